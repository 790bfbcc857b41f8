"""A real Airflow for tests (via ``pytest_plugins``): the launcher of ``ticdc-lake airflow``
started on a free localhost port from a temporary AIRFLOW_HOME, with the project's DAGs over a
small generated sample, its metadata in a database of its own on the session's PostgreSQL server
(tests/postgres_harness.py; docker-compose.yml's database), and stopped at the end whatever
happened. (``airflow dags test`` runs, tests/airflow/test_dag_runs.py, keep SQLite.)

    def test_something(local_airflow):          # one Airflow for the whole session
        admin = local_airflow.client("admin")   # REST API v2 with a token from /auth/token
        admin.get("/api/v2/dags")
        local_airflow.client(None)               # no token: expect 401

``start_airflow(home, configs=..., database_url=postgres.database(NAME), env=...)`` is the context
manager behind it, for a test that needs an Airflow of its own. Leaving it stops every process
Airflow started and fails if one is left.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from ticdc_lake.airflow.airflow_local import (
    LocalAirflow,
    LocalAirflowSettings,
    default_parallelism,
    session_processes,
)
from ticdc_lake.app.demo import sample_options
from ticdc_lake.sample.workload.output import write_generated

REPO = Path(__file__).resolve().parent.parent
FINISHED = {"success", "failed"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def start_airflow(
    home: Path,
    *,
    configs: Path | None,
    database_url: str | None,
    spark_master: str = "local[2]",
    triggerer: bool = False,
    env: Mapping[str, str] | None = None,
) -> Iterator[LocalAirflow]:
    """Airflow (api-server, scheduler, dag-processor, the task log server; no triggerer unless
    asked for: nothing defers) until the block ends; then every process they started is
    stopped and checked gone. ``database_url``: the metadata database (None: SQLite). ``env``
    is set in every Airflow process's environment over the launcher's (another auth manager,
    users)."""
    settings = LocalAirflowSettings(
        home=home,
        project=REPO,
        port=free_port(),
        log_port=free_port(),  # not Airflow's 8793: another Airflow on this machine may hold it
        spark_master=spark_master,
        configs=configs,
        triggerer=triggerer,
        schedules=False,  # unpausing must not start a scheduled run ahead of the test's
        python=Path(sys.executable),
        database_url=database_url,
        parallelism=default_parallelism(database_url),
    )
    if os.environ.get("TICDC_LAKE_TESTS_FAST") == "1":
        pytest.fail("TICDC_LAKE_TESTS_FAST=1: this test starts Airflow; mark it airflow")
    airflow = LocalAirflow(settings)
    airflow.env |= env or {}
    try:
        airflow.start()
        yield airflow
    finally:
        sessions = {name: process.pid for name, process in airflow.started.items()}
        airflow.stop()
        left = {name: session_processes(sid) for name, sid in sessions.items()}
        assert not any(left.values()), f"processes outlived the stop: {left}"


@pytest.fixture(scope="session")
def airflow_sample(tmp_path_factory) -> Path:
    """A small generated sample (30 transactions, 2 partitions): its folder, with pipeline.yaml."""
    sample = tmp_path_factory.mktemp("airflow-sample")
    write_generated(sample, sample_options("open-protocol", seed=3, transactions=30, partitions=2))
    return sample


@pytest.fixture(scope="session")
def local_airflow(tmp_path_factory, airflow_sample, postgres) -> Iterator[LocalAirflow]:
    # A password with what a URL must encode: Airflow, Alembic and both drivers get it right.
    password = secrets.token_urlsafe(12) + "@:/%? x"
    with start_airflow(
        tmp_path_factory.mktemp("airflow-home"),
        configs=airflow_sample / "pipeline.yaml",
        database_url=postgres.database("airflow_session", password=password),
    ) as airflow:
        yield airflow


def wait_for_run(airflow: LocalAirflow, dag_id: str, run_id: str, within: float) -> dict:
    """The run once it has finished (or whatever it is at after ``within`` seconds)."""
    admin = airflow.client("admin")
    deadline = time.monotonic() + within
    while True:
        run = admin.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        if run["state"] in FINISHED or time.monotonic() > deadline:
            return run
        airflow.check_running()
        time.sleep(3)


def run_report(airflow: LocalAirflow, dag_id: str, run_id: str) -> str:
    """Each task's state and the scheduler's last lines: what a failing assert should show."""
    admin = airflow.client("admin")
    tasks = admin.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    states = {task["task_id"]: task["state"] for task in tasks["task_instances"]}
    scheduler = (airflow.logs / "scheduler.out").read_text(errors="replace")[-3000:]
    failed = [task for task, state in states.items() if state not in ("success", "skipped")]
    task_logs = [
        f"--- {log}:\n{log.read_text(errors='replace')[-3000:]}"
        for task in failed
        for log in sorted(
            (airflow.logs / f"dag_id={dag_id}" / f"run_id={run_id}").glob(f"task_id={task}/*.log")
        )
    ]
    return "\n".join([f"tasks: {states}", *task_logs, f"scheduler log:\n{scheduler}"])
