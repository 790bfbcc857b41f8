"""The local Airflow launcher's parts that need no Airflow running: its environment, the kept
passwords, and stopping (the real Airflow runs in tests/airflow/test_local_airflow.py)."""

from __future__ import annotations

import importlib
import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ticdc_lake.airflow import airflow_local
from ticdc_lake.airflow.airflow_local import (
    DATABASE_ENV,
    PASSWORDS_FILE,
    AirflowStartError,
    LocalAirflow,
    LocalAirflowSettings,
    airflow_env,
    database_url,
    passwords,
    serve,
    session_processes,
)
from ticdc_lake.app import cli
from ticdc_lake.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def settings(tmp_path: Path, **changes) -> LocalAirflowSettings:
    return LocalAirflowSettings(home=tmp_path / "home", project=REPO, port=18123, **changes)


def test_the_environment_binds_to_loopback_and_keeps_the_ports_in_step(tmp_path):
    base = {"PATH": "/usr/bin", "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor", "TICDC_LAKE_X": "1"}
    env = airflow_env(settings(tmp_path, spark_master="spark://127.0.0.1:7077"), base)
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__API__PORT"] == "18123"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18123/execution/"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert "TICDC_LAKE_X" not in env
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite:////")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(REPO / "dags")
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"]) == {
        "conn_type": "spark",
        "host": "spark://127.0.0.1:7077",
    }
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    # One signing secret for every process, the same on the next start.
    assert (
        env["AIRFLOW__API_AUTH__JWT_SECRET"]
        == airflow_env(settings(tmp_path), base)["AIRFLOW__API_AUTH__JWT_SECRET"]
    )


# A password holding what a URL must encode, and how it appears inside one.
PASSWORD = "s3cr:et@p/w %x"
ENCODED = "s3cr%3Aet%40p%2Fw%20%25x"
PG_URL = f"postgresql+psycopg2://airflow:{ENCODED}@db.example:5432/airflow"


def test_a_database_url_replaces_sqlite_and_is_never_in_a_repr(tmp_path):
    env = airflow_env(settings(tmp_path, database_url=PG_URL), {"PGPASSWORD": "kept"})
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == PG_URL
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["PGPASSWORD"] == "kept"  # libpq's, for a URL without its password
    shown = settings(tmp_path, database_url=PG_URL)
    assert shown.database_shown == "postgresql+psycopg2://airflow:***@db.example:5432/airflow"
    assert PASSWORD not in repr(shown) and ENCODED not in repr(shown)
    assert settings(tmp_path).database_shown == f"sqlite:///{tmp_path / 'home' / 'airflow.db'}"


def test_database_urls_are_checked_without_showing_their_password():
    assert database_url(f" {PG_URL} ") == PG_URL
    # libpq's scheme, which SQLAlchemy and Airflow refuse, is read as SQLAlchemy's.
    assert database_url("postgres://a:b@h/d") == "postgresql://a:b@h/d"
    assert database_url("postgres+psycopg2://a:b@h/d") == "postgresql+psycopg2://a:b@h/d"
    assert database_url("sqlite:////tmp/a.db") == "sqlite:////tmp/a.db"
    for wrong in (f"oracle://airflow:{ENCODED}@h/d", f"airflow:{ENCODED}@h/d", "postgresql://"):
        with pytest.raises(ConfigError) as error:
            database_url(wrong)
        assert ENCODED not in str(error.value) and PASSWORD not in str(error.value)


def started_with(monkeypatch, argv: list[str], env: dict[str, str]) -> LocalAirflowSettings:
    """The settings ``ticdc-lake airflow ARGV`` would start Airflow with."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if DATABASE_ENV not in env:
        monkeypatch.delenv(DATABASE_ENV, raising=False)
    seen = []
    monkeypatch.setattr(airflow_local, "serve", lambda found: seen.append(found) or 0)
    assert cli.main(["airflow", "--project", str(REPO), *argv]) == 0
    return seen[0]


def test_the_cli_takes_the_database_from_its_flag_or_variable_sqlite_otherwise(monkeypatch):
    sqlite = started_with(monkeypatch, [], {})
    assert sqlite.database_url is None and sqlite.parallelism == 2
    from_env = started_with(monkeypatch, [], {DATABASE_ENV: "postgres://a:b@h/d"})
    assert from_env.database_url == "postgresql://a:b@h/d" and from_env.parallelism == 4
    flag = started_with(monkeypatch, ["--database-url", PG_URL], {DATABASE_ENV: "sqlite:///x"})
    assert flag.database_url == PG_URL
    assert (
        started_with(monkeypatch, ["--parallelism", "3"], {DATABASE_ENV: PG_URL}).parallelism == 3
    )


def test_serving_prints_the_database_without_its_password_even_when_airflow_fails(
    tmp_path, monkeypatch
):
    def failing_start(self):  # as if Airflow echoed the password, bare and in the URL
        raise AirflowStartError(f"airflow db migrate failed: {PG_URL} refused {PASSWORD!r}")

    monkeypatch.setattr(LocalAirflow, "start", failing_start)
    monkeypatch.setattr(airflow_local.signal, "signal", lambda *args: None)
    printed: list[str] = []
    assert serve(settings(tmp_path, database_url=PG_URL), out=printed.append) == 1
    text = "\n".join(printed)
    assert "metadata database: postgresql+psycopg2://airflow:***@db.example:5432/airflow" in text
    assert "migrate failed" in text
    assert PASSWORD not in text and ENCODED not in text


def test_task_logs_are_served_by_a_server_of_our_own_on_loopback_not_airflow_s_on_all(tmp_path):
    """The scheduler's and triggerer's serve-logs listen on 0.0.0.0:8793 (no setting binds it):
    they are started with --skip-serve-logs, and the api-server is sent to ours."""
    local = LocalAirflow(settings(tmp_path, log_port=18124), base_env={"PATH": "/usr/bin"})
    assert "serve-logs" in local.settings.processes
    assert local.command("scheduler")[-2:] == ["scheduler", "--skip-serve-logs"]
    assert local.command("triggerer")[-2:] == ["triggerer", "--skip-serve-logs"]
    assert local.command("serve-logs")[0] == sys.executable
    env = local.env
    assert env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] == "18124"
    assert env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] == "18124"
    module, _, name = env["AIRFLOW__CORE__HOSTNAME_CALLABLE"].rpartition(".")
    assert getattr(importlib.import_module(module), name)() == "127.0.0.1"


def test_passwords_are_made_once_kept_and_private(tmp_path):
    home = tmp_path / "home"
    first = passwords(home)
    assert set(first) == {"admin", "viewer"} and all(len(p) >= 12 for p in first.values())
    assert passwords(home) == first
    assert stat.S_IMODE((home / PASSWORDS_FILE).stat().st_mode) == 0o600


# Like an Airflow task: a child that moves to a process group of its own, then a grandchild.
TASK_LIKE = """
import os, sys, time
if os.fork() == 0:
    os.setpgid(0, 0)
    if os.fork() == 0:
        time.sleep(600)
    time.sleep(600)
print("started", flush=True)
time.sleep(600)
"""


def test_stop_reaches_processes_that_left_the_process_group(tmp_path):
    airflow = LocalAirflow(settings(tmp_path))
    leader = subprocess.Popen(
        [sys.executable, "-c", TASK_LIKE], stdout=subprocess.PIPE, start_new_session=True
    )
    airflow.started["scheduler"] = leader
    assert leader.stdout.readline().strip() == b"started"
    deadline = time.monotonic() + 10
    while len(session_processes(leader.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(session_processes(leader.pid)) == 3
    assert airflow.stop() == []  # SIGTERM was enough
    assert session_processes(leader.pid) == []
