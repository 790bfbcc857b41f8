"""A scheduled run's summary, from the result files its Spark jobs leave (--result-file)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from ticdc_lake.app.pipeline import job_main
from ticdc_lake.app.run_results import MissingResultError, summarize_run

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "include" / "pipeline.example.yaml"


@dataclass
class _Result:
    data: dict

    def to_dict(self) -> dict:
        return self.data


def _table(name: str, **counts) -> dict:
    return {"table": name, "rows": 3, "changes": 4, "upserts": 3, "deletes": 1, "ddl": 1} | counts


def _write(folder: Path, stage: str, result: dict) -> None:
    args = argparse.Namespace(config=str(CONFIG), result_file=folder / f"{stage}.json")
    assert job_main(stage, args, lambda name: None, lambda spark, config: _Result(result)) == 0


def test_a_runs_results_fold_into_one_summary(tmp_path, capsys):
    _write(tmp_path, "land", {"batch_id": 2, "records_added": 10, "recovered": False})
    _write(tmp_path, "compact", {"changefeeds": [
        {"name": "a", "mode": "watermark", "target": 99, "noop": False,
         "tables": [_table("s.t"), _table("s.u", rows=5)]},
        {"name": "b", "mode": "cutoff", "target": 7, "noop": True, "tables": [_table("s.v")]},
    ], "failures": {}})  # fmt: skip
    printed = capsys.readouterr().out.splitlines()
    assert json.loads(printed[0])["records_added"] == 10  # the job still prints its result

    summary = summarize_run(tmp_path, ("land", "compact"))
    assert summary.stages["land"]["records_added"] == 10
    assert summary.stages["compact"]["upserts"] == 9
    assert summary.watermarks == {"a": 99, "b": 7}
    assert summary.gold_rows == {"s.t": 3, "s.u": 5, "s.v": 3}
    assert summary.changed_changefeeds == ("a",)  # b did nothing: no gold asset event
    assert "changefeed a: gold watermark at TS 99" in summary.lines()
    assert not list(tmp_path.glob(".*partial"))


def test_a_stage_that_left_no_result_says_so(tmp_path):
    with pytest.raises(MissingResultError, match=r"decode\.json: the job left no result"):
        summarize_run(tmp_path, ("decode",))


def _backfill_job():
    path = REPO / "spark_jobs" / "backfill.py"
    spec = importlib.util.spec_from_file_location("job_backfill", path)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


def test_the_backfill_job_reads_times_and_refuses_bad_ones(capsys):
    job = _backfill_job()
    times = ["--start-ts", "2026-01-02T12:00:00Z", "--end-ts", "462873715384320000"]
    args = job.parse_args(["--config", "c.yaml", *times, "--tables", '["s.t", "s.u"]'])
    assert args.start_ts == 1767355200000 << 18 and args.end_ts == 462873715384320000
    assert args.tables == ["s.t", "s.u"]
    with pytest.raises(SystemExit) as stopped:
        job.parse_args(["--config", "c", "--start-ts", "soon", "--end-ts", "1"])
    assert stopped.value.code == 2
    assert "start_ts: 'soon' is neither a TSO" in capsys.readouterr().err
