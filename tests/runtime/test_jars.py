"""Delta Lake's jars: fetched once into the Python environment, checked against the checksums
Maven publishes, and a session that lacks them refused with what to do."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import pytest
from ticdc_lake.orchestration import DELTA_ARTIFACTS, SPARK_ARTIFACTS, delta_conf, jar_name
from ticdc_lake.runtime import jars
from ticdc_lake.runtime.spark import delta_settings


@pytest.fixture
def maven_central(tmp_path, monkeypatch):
    """A local stand-in for Maven Central serving every artifact's jar and its .sha1."""
    root = tmp_path / "central"
    for artifact in SPARK_ARTIFACTS:
        group, name, version = artifact.split(":")
        folder = root.joinpath(*group.split("."), name, version)
        folder.mkdir(parents=True)
        data = f"jar of {artifact}".encode()
        (folder / jar_name(artifact)).write_bytes(data)
        (folder / f"{jar_name(artifact)}.sha1").write_text(hashlib.sha1(data).hexdigest())

    class Files(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(jars, "MAVEN_CENTRAL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setattr(jars.shutil, "which", lambda name: None)  # no mvn installed
    try:
        yield root
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def environment(tmp_path: Path) -> str:
    """A Python environment's interpreter path (its jars go in <env>/share/ticdc-lake/jars)."""
    (tmp_path / "env" / "bin").mkdir(parents=True)
    return str(tmp_path / "env" / "bin" / "python")


def test_without_maven_the_jars_come_from_maven_central_checked_by_sha1(tmp_path, maven_central):
    python = environment(tmp_path)
    fetched = jars.fetch(python)
    assert [p.name for p in fetched] == [jar_name(a) for a in SPARK_ARTIFACTS]
    assert delta_conf(python)["spark.jars"] == ",".join(map(str, fetched))
    assert jars.fetch(python) == fetched  # there already: nothing fetched again


def test_a_jar_whose_sha1_differs_is_refused_and_not_kept(tmp_path, maven_central):
    group, name, version = DELTA_ARTIFACTS[0].split(":")
    served = maven_central.joinpath(*group.split("."), name, version, jar_name(DELTA_ARTIFACTS[0]))
    served.write_bytes(b"tampered")
    python = environment(tmp_path)
    with pytest.raises(jars.JarsError, match=r"SHA-1 .* but Maven Central publishes"):
        jars.fetch(python)
    assert not list(jars.jars_folder(python).iterdir())


def test_a_session_without_the_jars_says_how_to_get_them(monkeypatch, tmp_path):
    monkeypatch.setattr("ticdc_lake.runtime.spark.sys.executable", environment(tmp_path))
    with pytest.raises(jars.MissingJarsError, match=r"python -m ticdc_lake\.runtime\.jars"):
        delta_settings({})
    brought = {"spark.jars.packages": "io.delta:delta-spark_4.1_2.13:4.1.0"}
    assert delta_settings(brought)["spark.sql.extensions"] == (
        "io.delta.sql.DeltaSparkSessionExtension"
    )


def test_a_spark_submit_without_the_jars_is_told_the_jars_to_add(monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    with pytest.raises(jars.MissingJarsError, match="spark-submit was given no Delta Lake jars"):
        delta_settings({})
