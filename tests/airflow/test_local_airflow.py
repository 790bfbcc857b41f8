"""A real Airflow started by the test (tests/airflow_harness.py: api-server, scheduler and
dag-processor from ``ticdc-lake airflow``'s launcher, the triggerer too where its listeners are
checked, on PostgreSQL (a temporary server of the session's: tests/postgres_harness.py), its own
AIRFLOW_HOME, a free port on 127.0.0.1), driven through REST API v2 only: it lists the DAGs, a
triggered ``ticdc_lake`` run and a ``ticdc_lake_backfill`` run over a TS range reach ``success``
with gold equal to the generator's tables, and a viewer may read but not trigger. The database's
password is in none of the logs Airflow writes, nor in what ``ticdc-lake airflow`` prints. The
harness stops every process it started, pass or fail.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from ticdc_lake.airflow.airflow_local import DATABASE_ENV, session_processes
from ticdc_lake.config import load_config
from ticdc_lake.sample.workload.expected_gold import ExpectedGold

from tests.airflow_harness import REPO, free_port, run_report, start_airflow, wait_for_run
from tests.runtime.test_spark import _is_loopback, listening, refused_from_outside

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

PIPELINE, BACKFILL = "ticdc_lake", "ticdc_lake_backfill"
# Seven spark-submit jobs take 4-5 minutes on an idle 2-core machine; far more when it is busy.
RUN_WITHIN = 1500.0


def wait_for_dags(airflow, dag_ids: set[str], within: float = 180.0) -> dict:
    """The DAGs once the dag-processor has put all of ``dag_ids`` in the database."""
    admin = airflow.client("admin")
    deadline = time.monotonic() + within
    while True:
        listed = admin.get("/api/v2/dags?dag_id_pattern=ticdc_lake")
        found = {dag["dag_id"]: dag for dag in listed["dags"]}
        if dag_ids <= set(found) or time.monotonic() > deadline:
            return found
        time.sleep(2)


def trigger(client, dag_id: str, run_id: str, conf: dict) -> tuple[int, object]:
    return client.request(
        "POST",
        f"/api/v2/dags/{dag_id}/dagRuns",
        {"logical_date": None, "dag_run_id": run_id, "conf": conf},
    )


def run_to_success(airflow, dag_id: str, run_id: str, conf: dict) -> None:
    status, body = trigger(airflow.client("admin"), dag_id, run_id, conf)
    assert status == 200, body
    run = wait_for_run(airflow, dag_id, run_id, RUN_WITHIN)
    assert run["state"] == "success", run_report(airflow, dag_id, run_id)


def check_gold(sample, watermark: int) -> None:
    lake = load_config(sample / "pipeline.yaml").lake
    assert ExpectedGold.from_sample(sample).compare(lake, watermark, "UTC") == []


def test_tokens_list_dags_and_only_a_viewer_is_refused_a_trigger(local_airflow):
    found = wait_for_dags(local_airflow, {PIPELINE, BACKFILL})
    assert {PIPELINE, BACKFILL} <= set(found), f"DAGs listed: {sorted(found)}"

    assert local_airflow.client(None).request("GET", "/api/v2/dags")[0] == 401
    viewer = local_airflow.client("viewer")
    assert viewer.get(f"/api/v2/dags/{PIPELINE}")["dag_id"] == PIPELINE
    status, body = trigger(viewer, PIPELINE, "by-a-viewer", {})
    assert status == 403, body
    admin = local_airflow.client("admin")
    assert admin.request("GET", f"/api/v2/dags/{PIPELINE}/dagRuns/by-a-viewer")[0] == 404


@pytest.mark.spark  # the DAGs' spark-submits
def test_triggered_pipeline_and_backfill_succeed_with_gold_right(local_airflow, airflow_sample):
    wait_for_dags(local_airflow, {PIPELINE, BACKFILL})
    admin = local_airflow.client("admin")
    for dag_id in (PIPELINE, BACKFILL):  # DAGs start paused: a triggered run would stay queued
        status, body = admin.request(
            "PATCH", f"/api/v2/dags/{dag_id}?update_mask=is_paused", {"is_paused": False}
        )
        assert status == 200, body

    run_to_success(local_airflow, PIPELINE, "pipeline-1", {})
    summary = admin.get(
        f"/api/v2/dags/{PIPELINE}/dagRuns/pipeline-1/taskInstances/summary/xcomEntries/"
        "return_value?deserialize=true"
    )["value"]
    ((changefeed, watermark),) = summary["watermarks"].items()
    assert watermark > 0 and summary["modes"] == {changefeed: "watermark"}, summary
    assert summary["stages"]["land"]["records_added"] > 0
    assert summary["changed_changefeeds"] == [changefeed]
    # Each stage's checks ran as a task and passed (gold's gold_mode is two: mode, quarantine).
    for checked, checks in (("bronze", 7), ("silver", 7), ("gold", 8)):
        assert summary["stages"][f"quality_{checked}"]["checks"] == checks, summary
        assert summary["stages"][f"quality_{checked}"]["failed"] == [], summary
    assert (load_config(airflow_sample / "pipeline.yaml").reports / "quality.html").is_file()
    check_gold(airflow_sample, watermark)

    # Re-derive everything up to the watermark from bronze: gold is exactly as before.
    run_to_success(
        local_airflow, BACKFILL, "backfill-1", {"start_ts": "0", "end_ts": str(watermark)}
    )
    check_gold(airflow_sample, watermark)

    # The metadata database's password, which every Airflow process and task had in its
    # environment, is in none of the files they wrote (their output, the task logs).
    assert local_airflow.settings.sql_alchemy_conn.startswith("postgresql+psycopg2://")
    assert files_holding(local_airflow.settings.home, local_airflow.settings.secrets) == []


def files_holding(folder: Path, secrets: tuple[str, ...]) -> list[Path]:
    assert secrets and all(len(secret) >= 12 for secret in secrets)
    return [
        path
        for path in folder.rglob("*")
        if path.is_file() and any(s.encode() in path.read_bytes() for s in secrets)
    ]


def test_ticdc_lake_airflow_refused_by_its_database_prints_why_but_not_the_password(
    tmp_path, postgres
):
    """The command with TICDC_LAKE_AIRFLOW_DB naming a PostgreSQL database it has the wrong
    password for: ``airflow db migrate`` fails, and the command says so and stops (status 1)
    showing the URL with ``***`` for the password, which is in no file it wrote either."""
    postgres.database("airflow_refused")
    wrong = secrets.token_urlsafe(12) + "@:/%? x"
    url = (
        f"postgresql+psycopg2://airflow_refused:{quote(wrong, safe='')}@127.0.0.1:"
        f"{postgres.port}/airflow_refused"
    )
    home = tmp_path / "home"
    done = subprocess.run(
        [sys.executable, "-m", "ticdc_lake", "airflow", "--home", str(home), "--project",
         str(REPO), "--port", str(free_port()), "--log-port", str(free_port())],
        env=os.environ | {DATABASE_ENV: url}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "airflow db migrate failed" in output and "password authentication failed" in output
    assert "metadata database: postgresql+psycopg2://airflow_refused:***@127.0.0.1:" in output
    for shown in (wrong, quote(wrong, safe="")):
        assert shown not in output
    assert files_holding(home, (wrong, quote(wrong, safe=""))) == []


def test_every_process_of_a_local_airflow_listens_on_loopback_only(tmp_path, postgres):
    """serve-logs, which the scheduler and the triggerer start with the LocalExecutor, listened
    on every interface (0.0.0.0:8793). As ``ticdc-lake airflow`` starts it, triggerer too."""
    database = postgres.database("airflow_loopback")
    with start_airflow(
        tmp_path / "home", configs=None, database_url=database, triggerer=True
    ) as airflow:
        found = {
            (address, port)
            for process in airflow.started.values()
            for pid in session_processes(process.pid)
            for address, port in listening(pid)
        }
        ports = {port for _, port in found}
        assert {airflow.settings.port, airflow.settings.log_port} <= ports, found
        assert all(_is_loopback(address) for address, _ in found), found
        assert all(refused_from_outside(port) for port in ports)
        # The log server is Airflow's: it wants a token signed as the api-server signs it,
        # and serves the log folder to the api-server's own fetch.
        log_url = f"http://127.0.0.1:{airflow.settings.log_port}/log/scheduler.out"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(log_url, timeout=30)
        assert refused.value.code == 403
        fetch = subprocess.run(
            [sys.executable, "-c", _FETCH_LOG, log_url, "scheduler.out"],
            env=airflow.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert fetch.stdout.strip().splitlines()[-1:] == ["200"], fetch.stderr[-3000:]


# How the api-server fetches a running task's log (FileTaskHandler._read_from_logs_server).
_FETCH_LOG = """
import sys
from airflow.utils.log.file_task_handler import _fetch_logs_from_service
print(_fetch_logs_from_service(sys.argv[1], sys.argv[2]).status_code)
"""
