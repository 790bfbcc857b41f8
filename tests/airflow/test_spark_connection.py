"""A new user's Airflow: the project's dags/ in a fresh AIRFLOW_HOME (`airflow db migrate`, no
`AIRFLOW_CONN_SPARK_DEFAULT`, no pool), then `airflow dags test ticdc_lake`. The Spark jobs run
on local[*], the project's default, and the log says the connection is missing; with the
connection set but unreadable, the first Spark task fails at once naming the line that sets it.

Only `land` runs for real (the other tasks are marked successful): one spark-submit on a tiny
sample shows where the jobs go (the provider's own default was YARN: every job failed there and
was retried with backoff for minutes). The whole pipeline under Airflow is
tests/airflow/test_local_airflow.py's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from ticdc_lake.app.demo import sample_options
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.sample.workload.output import write_generated

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]  # land's spark-submit

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ONLY_LAND = r"(?!land$).*"  # --mark-success-pattern: every task but land


def airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=900
    )


def test_a_fresh_airflow_without_spark_default_runs_the_jobs_on_local(tmp_path):
    sample = tmp_path / "sample"
    write_generated(sample, sample_options("open-protocol", seed=5, transactions=5, partitions=1))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TICDC_LAKE"))}
    env |= {
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "TICDC_LAKE_CONFIGS": str(sample / "pipeline.yaml"),
    }
    migrated = airflow(env, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-2000:]

    done = airflow(env, "dags", "test", "ticdc_lake", "--mark-success-pattern", ONLY_LAND)
    output = done.stdout + done.stderr
    assert "Spark-Submit cmd: " in output, output[-5000:]
    assert "--master local[*]" in output and "--master yarn" not in output, output[-5000:]
    assert "connection spark_default is not defined: running the job on local[*]" in output
    assert "state=success" in output.split("DagRun Finished")[-1], output[-5000:]
    bronze = LakeLayout(load_config(sample / "pipeline.yaml").lake).bronze
    assert DeltaTable(str(bronze)).to_pyarrow_table().num_rows > 0

    # Set, but not as Airflow can read it (the URI form wants local[*] escaped): land fails at
    # its first try, before any spark-submit, saying so; nothing is retried.
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = "spark://local[*]"
    done = airflow(env, "dags", "test", "ticdc_lake", "--mark-success-pattern", ONLY_LAND)
    output = done.stdout + done.stderr
    assert "AIRFLOW_CONN_SPARK_DEFAULT is set, but Airflow cannot read the connection" in output
    assert """AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'""" in output
    assert "Spark-Submit cmd: " not in output
    assert "up_for_retry" not in output.lower(), output[-5000:]
    assert "state=failed" in output.split("DagRun Finished")[-1], output[-5000:]
