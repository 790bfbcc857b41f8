"""The pipeline's spark_jobs on a Spark standalone cluster, not only ``local[*]``: a master and
a worker (2 cores) started from the pyspark wheel on 127.0.0.1, each stage one ``spark-submit
--master spark://...`` as the DAG runs it, executors in their own JVM and Python workers apart
from the driver; gold equals the generator's tables. An executor Python without the project is
refused up front, naming the fix. Both daemons are stopped at the end, pass or fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ticdc_lake.airflow.airflow_local import session_processes, signal_session
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.orchestration import delta_conf
from ticdc_lake.sample.workload.expected_gold import ExpectedGold

from tests.airflow_harness import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # a master's, a worker's, drivers' JVMs

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SPARK_CLASS = BIN / "spark-class"
STAGES = ("land", "decode", "watermark", "compact")
# Small JVMs: driver, executor and (elsewhere in CI) Airflow share 2 cores.
SUBMIT_CONF = {
    "spark.driver.memory": "512m",
    "spark.executor.memory": "768m",
    "spark.executor.cores": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
}


def spark_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    return env | {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        # No REST submission server: it would listen on a fixed port (6066).
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }


def wait_for_line(log: Path, text: str, process: subprocess.Popen, within: float = 180) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        assert process.poll() is None, f"{log.name} exited:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"no {text!r} in {log} within {within} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def daemon(args: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """A Spark daemon in a session of its own, stopped with everything it forked."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(SPARK_CLASS), *args],
            env=spark_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        signal_session(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            signal_session(process.pid, signal.SIGKILL)
            process.wait()
        deadline = time.monotonic() + 30
        while session_processes(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not session_processes(process.pid), f"{args[0]} left processes behind"


@pytest.fixture(scope="module")
def master(tmp_path_factory) -> Iterator[str]:
    """A standalone master and one 2-core worker on 127.0.0.1: the master's URL."""
    folder = tmp_path_factory.mktemp("spark-cluster")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    master_args += ["--port", str(port), "--webui-port", str(free_port())]
    worker_args = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
    worker_args += ["--webui-port", str(free_port()), "--cores", "2", "--memory", "2g"]
    worker_args += ["--work-dir", str(folder / "work"), url]
    with daemon(master_args, folder / "master.log") as master_process:
        wait_for_line(folder / "master.log", "I have been elected leader", master_process)
        with daemon(worker_args, folder / "worker.log") as worker_process:
            wait_for_line(
                folder / "worker.log", "Successfully registered with master", worker_process
            )
            yield url


def submit(master: str, job: str, config: Path, python: str) -> subprocess.CompletedProcess:
    """One stage as the DAG submits it; ``python`` runs the executors' Python workers."""
    conf = (
        SUBMIT_CONF
        | delta_conf(sys.executable)
        | {
            "spark.pyspark.python": python,
            "spark.pyspark.driver.python": sys.executable,
        }
    )
    args = [str(BIN / "spark-submit"), "--master", master]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    args += [str(REPO / "spark_jobs" / f"{job}.py"), "--config", str(config)]
    return subprocess.run(args, env=spark_env(), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cluster-sample")
    generate = [str(BIN / "ticdc-lake"), "generate", "--out", str(out)]
    generate += ["--protocol", "open-protocol", "--transactions", "30"]
    subprocess.run(generate, check=True, capture_output=True)
    return out


def test_an_executor_python_without_the_project_is_refused_up_front(master, sample, tmp_path):
    bare = tmp_path / "bare"  # the same Python version, none of the project's packages
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    # Land: its first use of the session, before any Spark job, checks the executors.
    # (Watermark folds on the driver and never builds a session.)
    done = submit(master, "land", sample / "pipeline.yaml", str(bare / "bin" / "python"))
    output = done.stdout + done.stderr  # spark-submit merges the Python driver's stderr in
    assert done.returncode == 2, output[-3000:]
    missing = "pyarrow, deltalake, xxhash, ticdc_lake"
    assert f"cannot import {missing}: point spark.pyspark.python" in output
    assert not LakeLayout(load_config(sample / "pipeline.yaml").lake).bronze.exists()


def test_the_stages_on_a_standalone_cluster_make_the_expected_gold(master, sample):
    config = sample / "pipeline.yaml"
    results = {}
    for stage in STAGES:
        done = submit(master, stage, config, sys.executable)
        assert done.returncode == 0, f"{stage}:\n{done.stderr[-4000:]}"
        results[stage] = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["land"]["records_added"] > 0
    assert results["decode"]["quarantined"] == 0
    (changefeed,) = results["compact"]["changefeeds"]
    watermark = results["watermark"]["changefeeds"][0]["watermark"]
    assert changefeed["target"] == watermark > 0
    lake = load_config(config).lake
    assert ExpectedGold.from_sample(sample).compare(lake, watermark, "UTC") == []
