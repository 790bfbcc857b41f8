"""spark_jobs/backfill.py's arguments, checked before pyspark is imported: a range or tables it
cannot use exit 2 with the reason, never a traceback (the job runs as its own process, as
spark-submit runs it; parsing fails before any Spark)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "spark_jobs" / "backfill.py"


def run_job(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(JOB), "--config", "missing.yaml", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_a_time_past_the_last_tso_exits_2_with_the_reason():
    done = run_job("--start-ts", "0", "--end-ts", "9999-12-31T23:59:59.999+00:00")
    assert done.returncode == 2, done.stderr
    assert "end_ts: '9999-12-31T23:59:59.999+00:00' is after 3084-12-12T12:41:28.831" in done.stderr
    assert "Traceback" not in done.stderr


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_table_named_with_a_comma_reaches_the_job_as_one_name(tmp_path, monkeypatch):
    """The backfill DAG renders the plan's tables into the job's --tables, which parses them
    back: a comma (or a quote) in a name must not split it."""
    monkeypatch.setenv("TICDC_LAKE_CONFIGS", str(tmp_path / "pipeline.yaml"))
    dag = load(REPO / "dags" / "ticdc_lake_backfill.py", "backfill_dag").ticdc_lake_backfill
    task = dag.get_task("backfill")
    template = task.application_args[task.application_args.index("--tables") + 1]
    names = ["shop.a,b", "shop.o'brien <2>", 'shop."q"']

    class PlanXCom:
        def xcom_pull(self, task_ids):
            assert task_ids == "plan"
            return {"tables": names}

    rendered = task.render_template(template, {"ti": PlanXCom()})
    argv = ["--config", "c.yaml", "--start-ts", "1", "--end-ts", "2", "--tables", rendered]
    assert load(JOB, "backfill_job").parse_args(argv).tables == names


@pytest.mark.parametrize("tables", ["shop.a,shop.b", "", '{"shop.a": 1}', "[1]", '"shop.a"'])
def test_tables_that_are_not_a_json_list_of_names_exit_2(tables):
    done = run_job("--start-ts", "0", "--end-ts", "1", "--tables", tables)
    assert done.returncode == 2, done.stderr
    assert 'tables: expected a JSON list of schema.table names such as ["shop.orders"]' in (
        done.stderr
    )
