"""spark_jobs/backfill.py's arguments, checked before pyspark is imported: a range or tables it
cannot use exit 2 with the reason, never a traceback (the job runs as its own process, as
spark-submit runs it; parsing fails before any Spark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
