"""DAG integrity: every file in dags/ imports without errors, warnings, file or socket access
(or pyspark/deltalake), and every DAG has tags, retries, doc_md and an owner."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
GUARD = Path(__file__).with_name("parse_guard.py")


def parse_dags(tmp_path: Path, **environ: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TICDC_LAKE"))}
    env |= {"AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    env |= environ
    command = [sys.executable, str(GUARD), str(DAGS)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory) -> dict:
    return parse_dags(tmp_path_factory.mktemp("demo"))


def test_dag_files_import_cleanly_without_io(demo_report):
    assert demo_report["errors"] == {}
    assert demo_report["warnings"] == []
    assert demo_report["refused"] == {}
    assert demo_report["modules"] == []  # no pyspark, no deltalake at parse time
    assert set(demo_report["dags"]) == {"ticdc_lake", "ticdc_lake_backfill"}


def test_every_dag_has_tags_retries_doc_and_owner(demo_report):
    for dag_id, dag in demo_report["dags"].items():
        assert dag["tags"], dag_id
        assert len(dag["doc_md"]) > 200, dag_id
        assert dag["max_active_runs"] == 1, dag_id
        assert dag["catchup"] is False, dag_id
        for task_id, task in dag["tasks"].items():
            assert task["owner"] == "data-platform", (dag_id, task_id)
            if task_id != "plan" and not task_id.startswith("quality_"):  # fail the same again
                assert task["retries"] >= 1, (dag_id, task_id)
                assert task["retry_exponential_backoff"] > 1, (dag_id, task_id)


def test_pipeline_runs_the_stages_in_order_in_the_lakes_pool(demo_report):
    tasks = demo_report["dags"]["ticdc_lake"]["tasks"]
    order = ["prepare_demo", "land", "quality_bronze", "decode", "quality_silver", "watermark",
             "compact", "quality_gold", "summary"]  # fmt: skip
    assert list(tasks) == order
    for before, after in itertools.pairwise(order):
        assert tasks[after]["upstream"] == [before]
    for stage in order[1:-1]:
        assert tasks[stage]["operator"] == "SparkJobOperator"
        assert tasks[stage]["pool"] == "ticdc_lake"
    for checked in ("bronze", "silver", "gold"):  # each its own job: a red task names its check
        arguments = tasks[f"quality_{checked}"]["arguments"]
        assert arguments[0].endswith("pipeline.yaml") or arguments[0] == "--config"
        assert arguments[-2:] == ["--stage", checked]
        assert any(a.endswith(f"quality_{checked}.json") for a in arguments)
    assert tasks["land"]["outlets"] == ["ticdc_lake.bronze"]
    assert tasks["decode"]["outlets"] == ["ticdc_lake.silver"]
    assert tasks["summary"]["outlets"] == ["ticdc_lake.gold"]  # the alias of each changefeed's


@pytest.mark.slow  # a few seconds: out of the fast tier
def test_spark_jobs_get_the_sessions_driver_java_options(demo_report, tmp_path):
    from ticdc_lake.orchestration import driver_java_options

    tasks = demo_report["dags"]["ticdc_lake"]["tasks"]
    for stage in ("land", "decode", "watermark", "compact", "quality_gold"):
        options = tasks[stage]["conf"]["spark.driver.extraJavaOptions"]
        assert options == driver_java_options({}, sys.executable)
        assert "-XX:SharedArchiveFile=" in options
    replaced = parse_dags(tmp_path / "replaced", TICDC_LAKE_DRIVER_JAVA_OPTIONS="-Xss4m")
    none = parse_dags(tmp_path / "none", TICDC_LAKE_DRIVER_JAVA_OPTIONS=" ")
    for report, expected in ((replaced, "-Xss4m"), (none, None)):
        for dag in report["dags"].values():
            for task in dag["tasks"].values():
                if task["operator"] == "SparkJobOperator":
                    assert task["conf"].get("spark.driver.extraJavaOptions") == expected


def test_only_compact_keeps_the_memory_its_driver_frees(demo_report):
    for dag in demo_report["dags"].values():
        for task_id, task in dag["tasks"].items():
            if task["operator"] != "SparkJobOperator":
                continue
            env = task["env"]
            assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
            expected = "-1" if task_id == "compact" else None
            assert env.get("MIMALLOC_PURGE_DELAY") == expected, task_id


def test_backfill_checks_before_spark_and_shares_the_pool(demo_report):
    dag = demo_report["dags"]["ticdc_lake_backfill"]
    assert dag["timetable"] == "CronDataIntervalTimetable"
    assert dag["params"] == ["dry_run", "end_ts", "start_ts", "tables"]
    tasks = dag["tasks"]
    assert tasks["plan"]["operator"] == "_PythonDecoratedOperator"
    assert tasks["should_run"]["upstream"] == ["plan"]
    assert tasks["backfill"]["upstream"] == ["should_run"]
    assert tasks["backfill"]["pool"] == "ticdc_lake"


def test_a_folder_of_configs_gives_a_dag_pair_each(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    for name in ("orders.yaml", "billing.yml"):
        (folder / name).write_text("version: 1\n")
    report = parse_dags(tmp_path, TICDC_LAKE_CONFIGS=str(folder))
    assert report["errors"] == {} and report["refused"] == {}
    assert set(report["dags"]) == {
        "ticdc_lake__billing", "ticdc_lake__orders",
        "ticdc_lake_backfill__billing", "ticdc_lake_backfill__orders",
    }  # fmt: skip
    assert "prepare_demo" not in report["dags"]["ticdc_lake__orders"]["tasks"]


def test_configs_sharing_a_dag_id_fail_parsing_naming_both_files(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    for name in ("prod.yaml", "prod.yml", "team a.yaml", "team_a.yaml", "orders.yaml"):
        (folder / name).write_text("version: 1\n")
    report = parse_dags(tmp_path, TICDC_LAKE_CONFIGS=str(folder))
    assert set(report["errors"]) == {"ticdc_lake.py", "ticdc_lake_backfill.py"}
    for error in report["errors"].values():
        assert error.startswith("ConfigNameCollisionError: ")
        assert "'prod.yaml' and 'prod.yml' both give the DAG ids ticdc_lake__prod" in error
        assert "'team a.yaml' and 'team_a.yaml' both give" in error
    assert report["dags"] == {} and report["refused"] == {}


def test_the_guard_catches_a_dag_file_that_reads_a_file(tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "reads.json").write_text("{}")
    (folder / "reads.py").write_text(
        "from pathlib import Path\nSETTINGS = Path(__file__).with_suffix('.json').read_text()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    done = subprocess.run(
        [sys.executable, str(GUARD), str(folder)], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["errors"] == {}  # the read worked: the guard reports, the test fails on it
    assert any("reads.json" in entry for entry in report["refused"]["reads.py"])
