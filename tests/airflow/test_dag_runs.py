"""The backfill DAG run by real Airflow (`airflow dags test`, SQLite) with real spark-submit jobs
on a small generated sample: a backfill in the middle of the range leaves every table as the
full run left it, and again adds no Delta version; a dry run writes nothing; bad parameters fail
before any Spark job; a failed data-quality check is a red task naming it.

The lake they start from is built in-process by the pipeline with its checks (the pipeline DAG's
own run, through a real scheduler, is tests/airflow/test_local_airflow.py's). Each spark-submit
costs 20-40 s (JVM start): the sample is small and the lake is shared by the tests, in file
order.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from deltalake import DeltaTable
from ticdc_lake.app.demo import sample_options
from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.backfill.plan import lake_versions
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.sample.workload.output import write_generated

from tests.quality.conftest import append, rows

pytestmark = [pytest.mark.airflow, pytest.mark.slow]  # spark: full_run asks for the session

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SPARK_STARTED = "Spark-Submit cmd"
# Columns that say when or by which run a row was written, not what it holds.
RUN_COLUMNS = {"decoded_at", "quarantined_at", "run", "generation", "gold_version"}


@dataclass(frozen=True)
class Airflow:
    env: dict[str, str]
    home: Path
    sample: Path

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / "airflow"), *args], env=self.env, capture_output=True, text=True,
            timeout=900,
        )  # fmt: skip

    def dags_test(self, dag_id: str, conf: dict | None = None) -> str:
        """Run the DAG once; its whole output (task logs included)."""
        args = ["dags", "test", dag_id, *(["-c", json.dumps(conf)] if conf else [])]
        done = self.run(*args)
        return done.stdout + done.stderr

    def summary(self, dag_id: str) -> dict | None:
        """The latest run's summary task XCom."""
        with sqlite3.connect(self.home / "airflow.db") as db:
            row = db.execute(
                "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'summary' "
                "AND key = 'return_value' ORDER BY timestamp DESC LIMIT 1",
                (dag_id,),
            ).fetchone()
        return None if row is None else json.loads(row[0])

    @property
    def layout(self) -> LakeLayout:
        return LakeLayout(load_config(self.sample / "pipeline.yaml").lake)


def succeeded(output: str, dag_id: str) -> bool:
    return f"dag_id={dag_id}" in output and "state=success" in output.split("DagRun Finished")[-1]


@pytest.fixture(scope="module")
def airflow(tmp_path_factory) -> Airflow:
    root = tmp_path_factory.mktemp("airflow")
    sample = root / "sample"
    options = sample_options("open-protocol", seed=7, transactions=30, partitions=2)
    write_generated(sample, options)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TICDC_LAKE"))}
    env |= {
        "AIRFLOW_HOME": str(root / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "TICDC_LAKE_CONFIGS": str(sample / "pipeline.yaml"),
    }
    found = Airflow(env, root / "home", sample)
    for command in (("db", "migrate"), ("pools", "set", "ticdc_lake", "1", "one job per lake")):
        done = found.run(*command)
        assert done.returncode == 0, done.stderr[-2000:]
    return found


def table_rows(path: Path) -> list[str]:
    """A Delta table's rows, order-free, without the columns that record when they were made."""
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return sorted(repr(sorted((k, v) for k, v in row.items() if k not in RUN_COLUMNS))
                  for row in rows)  # fmt: skip


def lake_contents(layout: LakeLayout) -> dict[str, list[str]]:
    paths = {name: path for name, path in layout.tables().items() if path.exists()}
    paths |= {f"gold:{p.parent.name}.{p.name}": p for p in (layout.root / "gold").glob("*/*")}
    return {name: table_rows(path) for name, path in sorted(paths.items())}


@pytest.fixture(scope="module")
def full_run(airflow, spark) -> dict[str, list[str]]:
    result = run_stages(spark, load_config(airflow.sample / "pipeline.yaml"), quality=True)
    assert not result.failed, result.to_dict()
    return lake_contents(airflow.layout)


def _middle_range(layout: LakeLayout) -> tuple[int, int]:
    stamps = sorted(set(DeltaTable(str(layout.changes)).to_pyarrow_table(columns=["commit_ts"])
                        .column("commit_ts").to_pylist()))  # fmt: skip
    return stamps[len(stamps) // 3], stamps[2 * len(stamps) // 3]


def test_backfill_in_the_middle_leaves_every_table_as_the_full_run(airflow, full_run):
    start, end = _middle_range(airflow.layout)
    conf = {"start_ts": str(start), "end_ts": str(end)}
    output = airflow.dags_test("ticdc_lake_backfill", conf)
    assert succeeded(output, "ticdc_lake_backfill"), output[-5000:]
    assert SPARK_STARTED in output
    summary = airflow.summary("ticdc_lake_backfill")
    assert summary["stages"]["backfill"]["batches"], summary  # something was re-derived
    assert summary["stages"]["backfill"]["records_redecoded"] > 0
    after = lake_contents(airflow.layout)
    after.pop("backfills", None)
    assert after == full_run

    versions = lake_versions(airflow.layout) | {
        "backfills": DeltaTable(str(airflow.layout.backfills)).version()
    }
    again = airflow.dags_test("ticdc_lake_backfill", conf)
    assert succeeded(again, "ticdc_lake_backfill"), again[-5000:]
    assert "already ran and the lake has not changed since" in again
    assert SPARK_STARTED not in again
    assert (
        lake_versions(airflow.layout)
        | {"backfills": DeltaTable(str(airflow.layout.backfills)).version()}
        == versions
    )


def test_dry_run_says_what_it_would_touch_and_writes_nothing(airflow, full_run):
    start, end = _middle_range(airflow.layout)
    versions = lake_versions(airflow.layout)
    conf = {"start_ts": str(start), "end_ts": str(end + 1), "dry_run": True}
    output = airflow.dags_test("ticdc_lake_backfill", conf)
    assert succeeded(output, "ticdc_lake_backfill"), output[-5000:]
    assert "bronze batches whose silver is re-derived: [1]" in output
    assert "gold tables with changes or DDL in the range: ['shop." in output
    assert "dry run: nothing written" in output
    assert SPARK_STARTED not in output
    assert lake_versions(airflow.layout) == versions


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"start_ts": "last tuesday", "end_ts": "1"}, "start_ts: 'last tuesday' is neither a TSO"),
        ({"start_ts": "1", "end_ts": "2099-01-01T00:00:00Z"}, "above the lake's current watermark"),
        (
            {"start_ts": "1", "end_ts": "9999-12-31T23:59:59.999+00:00"},
            "is after 3084-12-12T12:41:28.831+00:00, the last time a TSO can hold",
        ),
    ],
)
def test_bad_params_fail_before_any_spark_job(airflow, full_run, conf, message):
    versions = lake_versions(airflow.layout)
    output = airflow.dags_test("ticdc_lake_backfill", conf)
    assert not succeeded(output, "ticdc_lake_backfill")
    assert message in output
    assert SPARK_STARTED not in output
    assert lake_versions(airflow.layout) == versions


def test_a_failed_check_is_a_red_task_naming_it(airflow, full_run):
    """Last in the file: it leaves a duplicated Kafka offset in bronze. The task alone (`airflow
    tasks test`): that the stages after it wait for it is the DAG's wiring (test_dag_integrity)."""
    layout = airflow.layout
    copy = rows(layout.bronze)[0] | {"batch_id": 99, "source_file": "re-export.jsonl"}
    append(layout.bronze, [copy])
    landed = rows(layout.landed_files)[0]
    append(layout.landed_files, [landed | {"path": "re-export.jsonl", "batch_id": 99}])

    done = airflow.run("tasks", "test", "ticdc_lake", "quality_bronze")
    output = done.stdout + done.stderr

    assert "Task failed with exception" in output, output[-5000:]  # `tasks test` exits 0
    assert SPARK_STARTED in output
    assert "quality-bronze: bronze_offset_unique: " in output  # the check's name in its log
