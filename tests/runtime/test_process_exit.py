"""The commands' exit: the status and everything printed reach the caller, through pipes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark_jobs"


def run_python(*args: str) -> subprocess.CompletedProcess:
    # Buffered as a command's output is by default, so a lost flush would show.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("status", [0, 1, 3])
def test_exit_now_keeps_the_status_and_flushes_buffered_output(status):
    # Through a pipe stdout is block-buffered: a plain os._exit would lose both lines.
    done = run_python(
        "-c",
        "import sys\n"
        "from ticdc_lake.runtime.process_exit import exit_now\n"
        "print('result')\n"
        "sys.stderr.write('why')\n"
        f"exit_now({status})\n",
    )
    assert (done.returncode, done.stdout, done.stderr) == (status, "result\n", "why")


def test_exit_now_survives_a_reader_that_has_gone():
    # `ticdc-lake decode ... | head`: the flush at exit meets a pipe nobody reads any more.
    done = run_python(
        "-c",
        "import os\n"
        "from ticdc_lake.runtime.process_exit import exit_now\n"
        "read_end, write_end = os.pipe()\n"
        "os.dup2(write_end, 1)\n"
        "os.close(read_end)\n"
        "print('lost')\n"
        "exit_now(0)\n",
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_the_cli_exits_with_mains_status(tmp_path):
    missing = tmp_path / "missing.yaml"
    done = run_python("-m", "ticdc_lake", "run", "--config", str(missing))
    assert done.returncode == 2
    assert "configuration error" in done.stderr and str(missing) in done.stderr


def test_a_spark_job_exits_with_its_status_on_a_bad_config(tmp_path):
    missing = tmp_path / "missing.yaml"
    done = run_python(str(SPARK_JOBS / "land.py"), "--config", str(missing))
    assert done.returncode == 2
    assert done.stderr.startswith("land: configuration error:"), done.stderr
