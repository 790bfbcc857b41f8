"""A schema registry's password never shows: not on stdout or stderr, not in any log line, not in
any table of the lake, whatever the registry does (nothing listens; it answers 401, 500, 404,
echoing the request's Authorization header in its errors), whatever the password holds (an "@",
a space).

The pipeline runs as a user runs it: ``ticdc-lake run`` (land, then decode on real Spark) in a
process of its own, so everything it and its JVM and Python workers print is captured, with
Python logging at DEBUG (the HTTP client logs every request). The registry is a tiny local HTTP
server the test starts and stops; it answers by path, so each config points at one behaviour.
"""

from __future__ import annotations

import base64
import http.server
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable
from ticdc_lake.app.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]

USER, PASSWORD = "lake", "Kn0wn-Pa55@word 31337"
# What of the password must not show anywhere: each of its words, and the basic-auth token.
TOKEN = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = ("Kn0wn", "Pa55", "word 31337", "31337", TOKEN, TOKEN[:12])
PASSWORD_ENV = "TEST_SCHEMA_REGISTRY_PASSWORD"

# Runs every config on one SparkSession, through the CLI's own entry point.
RUNNER = textwrap.dedent(
    """
    import logging, sys
    from ticdc_lake.app.cli import main
    from ticdc_lake.runtime.spark import build_session

    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    spark = build_session("secrets", master="local[2]", conf={"spark.ui.enabled": "false"})
    for config in sys.argv[1:]:
        code = main(["run", "--config", config, "--stages", "land,decode"], spark=spark)
        print(f"exit {code}", flush=True)
    """
)


class _Registry(http.server.BaseHTTPRequestHandler):
    """Answers every request under /<status>/ with that HTTP status, as a registry would, its
    error echoing the request's Authorization header (as some proxies and debug builds do)."""

    authorizations: list[str] = []  # noqa: RUF012 - what clients sent, for the test to check

    def do_GET(self):
        self.authorizations.append(self.headers.get("Authorization", ""))
        status = int(self.path.strip("/").split("/")[0])
        echo = f"no (Authorization: {self.headers.get('Authorization', '')})".encode()
        body = b'{"error_code": %d, "message": "%s"}' % (status * 100 + 1, echo)
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_configs(sample: Path, registries: dict[str, dict]) -> list[Path]:
    """One config per registry setting, beside the generator's (same exports, same lake)."""
    document = yaml.safe_load((sample / "pipeline.yaml").read_text())
    paths = []
    for name, registry in registries.items():
        for topic in document["topics"].values():
            topic.pop("schema-dir", None)
            topic.pop("schemas-topic", None)
            topic["schema-registry"] = registry
        path = sample / f"pipeline-{name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        paths.append(path)
    return paths


def lake_text(lake: Path) -> str:
    """Every row of every Delta table of the lake, read with delta-rs, as text."""
    tables = sorted(log.parent for log in lake.rglob("_delta_log"))
    assert tables, f"no tables under {lake}"
    return "\n".join(str(DeltaTable(str(t)).to_pyarrow_table().to_pylist()) for t in tables)


def test_the_registry_password_never_reaches_output_logs_or_tables(tmp_path, registry):
    sample = tmp_path / "sample"
    argv = ["generate", "--out", str(sample), "--protocol", "avro", "--transactions", "4"]
    assert main([*argv, "--partitions", "1", "--replays", "0"]) == 0
    in_url = f"http://{USER}:{PASSWORD}@"
    configs = write_configs(
        sample,
        {
            "unreachable": {"url": f"{in_url}127.0.0.1:{closed_port()}"},
            "refused": {"url": f"http://{registry}/401", "username": USER,
                        "password-env": PASSWORD_ENV},
            "failing": {"url": f"{in_url}{registry}/500"},
            "unknown-ids": {"url": f"{in_url}{registry}/404"},
        },
    )  # fmt: skip

    run = subprocess.run(
        [sys.executable, "-c", RUNNER, *map(str, configs)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, PASSWORD_ENV: PASSWORD},
    )
    said = run.stdout + run.stderr
    lake = lake_text(sample / "lake")

    for secret in SECRETS:
        assert secret not in said, secret
        assert secret not in lake, secret
    # Each behaviour was met, and reported: the outage and the server error fail decode (exit
    # 1), refused credentials are a config error (exit 2), unknown ids are quarantined, which the
    # decode-rate check then fails (exit 1).
    exits = [line for line in run.stdout.splitlines() if line.startswith("exit ")]
    assert exits == ["exit 1", "exit 2", "exit 1", "exit 1"], said
    assert "decode_rate: FAILED" in said
    assert "could not be reached" in said and "refused the credentials (HTTP 401)" in said
    assert "failed to give schema id" in said and "is not in schema registry http://" in lake
    assert f"http://{USER}:***@" in said  # the warning about a password in the URL
    assert "Authorization: Basic ***" in said  # the echo, masked
    # The password was really in use: every request carried it as basic auth.
    assert set(_Registry.authorizations) == {f"Basic {TOKEN}"}
