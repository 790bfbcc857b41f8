"""Each check fails on data built to break it, with its policy's outcome; the clean lake passes
and a rerun appends nothing."""

from __future__ import annotations

import argparse
import base64
import functools
import json
import subprocess
import sys

import pytest
from deltalake import DeltaTable
from ticdc_lake.app import cli
from ticdc_lake.app.pipeline import job_main
from ticdc_lake.bronze.land import land
from ticdc_lake.config import load_config
from ticdc_lake.gold.compact import compact
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.bronze import may_miss_payloads
from ticdc_lake.quality.context import QualityContext
from ticdc_lake.quality.run import check_stage, validate_stage
from ticdc_lake.quality.validator import Validator
from ticdc_lake.silver.decode import decode

from tests.quality.conftest import append, rows

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def validator():
    return Validator()  # one GE context for the module, as a job has one


def _outcomes(validation) -> dict:
    return {outcome.check: (outcome, policy) for outcome, policy in validation.outcomes}


def _job(spark, sample, stage, capsys) -> tuple[int, str]:
    """spark_jobs/quality.py's main, with the test's session."""
    args = argparse.Namespace(config=str(sample / "pipeline.yaml"), lock_wait=0, result_file=None)
    check = functools.partial(check_stage, stage=stage)
    code = job_main(f"quality-{stage}", args, lambda name: spark, check)
    return code, capsys.readouterr().err


def test_clean_lake_passes_every_stage_and_a_rerun_appends_nothing(spark, sample, validator):
    config = load_config(sample / "pipeline.yaml")
    settings = config.quality.replace(clock="kafka")  # a replay of 2024 data
    results = LakeLayout(config.lake).quality_results
    for stage in ("bronze", "silver", "gold"):
        validation = validate_stage(spark, config, stage, validator=validator, settings=settings)
        failed = [o.describe() for o, _ in validation.outcomes if not o.success]
        assert validation.batch is not None and validation.written
        assert not failed, failed
    recorded = rows(results)
    assert {row["stage"] for row in recorded} == {"bronze", "silver", "gold"}
    assert len(recorded) == 22  # seven checks per stage, one row each; gold_mode two rows
    assert all(row["ge_result"] and row["started_at"] for row in recorded)
    version = DeltaTable(str(results)).version()

    for stage in ("bronze", "silver", "gold"):
        again = validate_stage(spark, config, stage, validator=validator, settings=settings)
        assert again.batch is None and not again.written and not again.failed
    assert DeltaTable(str(results)).version() == version


def test_a_job_with_nothing_new_to_check_builds_no_spark_session(spark, sample, validator, capsys):
    """What a run of the schedule with no new exports meets: under spark-submit the job skips
    the seconds of starting a SparkContext, and exits as the last validation did."""
    config = load_config(sample / "pipeline.yaml")
    settings = config.quality.replace(clock="kafka")
    for stage in ("bronze", "silver", "gold"):
        validate_stage(spark, config, stage, validator=validator, settings=settings)
    args = argparse.Namespace(config=str(sample / "pipeline.yaml"), lock_wait=0, result_file=None)
    for stage in ("bronze", "silver", "gold"):
        check = functools.partial(check_stage, stage=stage)
        no_session = lambda name: pytest.fail(f"{name}: a session was built")  # noqa: E731
        assert job_main(f"quality-{stage}", args, no_session, check) == 0
        assert "FAILED" not in capsys.readouterr().err


def test_warming_up_ge_starts_no_spark_session():
    """The warm-up imports GE while a job starts Spark, and leaves the session to the job: GE's
    Spark source would start a default one (local[*], 1 GB) that the job's build would get."""
    code = (
        "import threading; from pyspark.sql import SparkSession; "
        "from ticdc_lake.quality.validator import Validator; v = Validator(); v.warm_up(); "
        "[t.join(120) for t in threading.enumerate() if t.name == 'ge-warm-up']; "
        "print(v._context is not None, SparkSession._instantiatedSession)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "None"]


def test_duplicate_offset_fails_the_bronze_job_naming_the_check(spark, sample, capsys):
    layout = LakeLayout(load_config(sample / "pipeline.yaml").lake)
    copy = rows(layout.bronze)[0] | {"batch_id": 2, "source_file": "re-export.jsonl"}
    append(layout.bronze, [copy])
    landed = rows(layout.landed_files)[0]
    append(
        layout.landed_files,
        [landed | {"path": "re-export.jsonl", "batch_id": 2, "records_read": 1,
                   "records_added": 1, "duplicates": 0, "conflicts": 0, "errors": 0}],
    )  # fmt: skip

    code, log = _job(spark, sample, "bronze", capsys)

    assert code == 1
    assert "bronze_offset_unique" in log
    (result,) = [r for r in rows(layout.quality_results) if r["check"] == "bronze_offset_unique"]
    assert not result["success"] and result["policy"] == "fail" and result["batch"] == 2
    failing = json.loads(result["sample"])  # both rows of the duplicated offset
    assert {(row["topic"], row["partition"], row["offset"]) for row in failing} == {
        (copy["topic"], copy["partition"], copy["offset"])
    }
    assert len(failing) == 2

    # The terminal summary reads the same results, with no Spark, and fails with the stage.
    assert cli.main(["dq-report", "--config", str(sample / "pipeline.yaml")]) == 1
    assert "FAIL bronze_offset_unique" in capsys.readouterr().out
    assert cli.main(["dq-report", "--config", str(sample / "pipeline.yaml"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["failed_stages"] == ["bronze"]
    assert {row["check"] for row in report["latest"]["bronze"] if not row["success"]} >= {
        "bronze_offset_unique"
    }


def test_a_batch_repeating_an_offset_or_landing_a_record_without_key_or_value_is_caught(
    spark, sample, validator
):
    config = load_config(sample / "pipeline.yaml")
    layout = LakeLayout(config.lake)
    ctx = QualityContext(spark, config, config.quality, validator, 0.0)
    assert not validate_stage(spark, config, "bronze", validator=validator).failed
    landed = rows(layout.bronze)
    clean = sorted({row["batch_id"] for row in landed})
    assert not may_miss_payloads(ctx, clean)  # the log's null counts rule such records out
    later, batch = max(row["offset"] for row in landed) + 100, max(clean) + 1
    twice = landed[0] | {"offset": later, "batch_id": batch, "source_file": "late.jsonl"}
    empty = twice | {"offset": later + 1, "key": None, "value": None}
    append(layout.bronze, [twice, twice, empty])
    append(layout.landed_files, [rows(layout.landed_files)[0] | {"path": "late.jsonl",
                                                                 "batch_id": batch}])  # fmt: skip
    assert may_miss_payloads(ctx, [batch]) and not may_miss_payloads(ctx, clean)

    found = _outcomes(validate_stage(spark, config, "bronze", validator=validator))

    unique, _ = found["bronze_offset_unique"]
    assert not unique.success and unique.unexpected_count == 2  # both copies
    assert {row["offset"] for row in unique.sample} == {later}
    present, policy = found["bronze_value_present"]
    assert policy == "warn" and not present.success and present.unexpected_count == 1
    assert [row["offset"] for row in present.sample] == [later + 1]


def _export(path, topic: str, partition: int, offsets: range) -> None:
    lines = [
        json.dumps({"topic": topic, "partition": partition, "offset": offset,
                    "timestamp": 1_717_200_000_000, "key_b64": None,
                    "value_b64": base64.b64encode(b"not a ticdc message").decode()})
        for offset in offsets
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def test_offset_gap_warns_and_low_decode_rate_fails(spark, sample, validator, capsys):
    config = load_config(sample / "pipeline.yaml")
    layout = LakeLayout(config.lake)
    for stage in ("bronze", "silver"):  # the clean batch, validated
        assert not validate_stage(spark, config, stage, validator=validator).failed
    topic = next(iter(config.topics))
    last = max(r["offset"] for r in rows(layout.bronze) if r["partition"] == 0)
    export = sample / "exports" / "late.jsonl"
    _export(export, topic, 0, range(last + 6, last + 66))  # 5 offsets missing, 60 garbage
    assert land(spark, config).records_added == 60

    gaps = validate_stage(spark, config, "bronze", validator=validator)

    outcome, policy = _outcomes(gaps)["bronze_offset_gaps"]
    assert policy == "warn" and not outcome.success and not gaps.failed  # recorded, goes on
    (gap,) = outcome.sample
    assert (gap["partition"], gap["from_offset"], gap["to_offset"]) == (0, last + 1, last + 5)
    assert str(export) in gap["files"]  # the export file just after the gap

    decode(spark, config)  # 60 records quarantined: the rate drops below 0.99
    code, log = _job(spark, sample, "silver", capsys)
    assert code == 1 and "decode_rate" in log
    rates = [r for r in rows(layout.quality_results) if r["check"] == "decode_rate"]
    (rate,) = [r for r in rates if not r["success"]]
    assert json.loads(rate["observed"])["quarantined"] == 60


def test_quarantine_moves_exactly_the_failing_rows_and_gold_leaves_them_out(
    spark, sample, validator
):
    config = load_config(sample / "pipeline.yaml")
    layout = LakeLayout(config.lake)
    (state,) = {r["watermark"] for r in rows(layout.gold_state)}
    changes = rows(layout.changes)
    broken = [
        change | {"event_id": f"broken-{i}", "handle_key": ["no_such_column"], "offset": 10**6 + i,
                  "commit_ts": state + 1, "bronze_batch": 9}
        for i, change in enumerate(changes[:2])
    ]  # fmt: skip
    append(layout.changes, broken)
    log = rows(layout.decode_log)[0]
    append(layout.decode_log, [log | {"bronze_batch": 9, "records": 2, "decoded": 2}])
    # The watermark moves past the broken rows: without the quarantine compaction applies them.
    marks = rows(layout.watermarks)
    DeltaTable(str(layout.watermarks)).update({"resolved_ts": str(state + 10)})

    validation = validate_stage(spark, config, "silver", validator=validator)

    outcome, policy = _outcomes(validation)["handle_key_present"]
    assert policy == "quarantine" and not outcome.success and outcome.unexpected_count == 2
    assert sorted(row["offset"] for row in outcome.sample) == [10**6, 10**6 + 1]
    quarantined = rows(layout.quality_quarantine)
    assert sorted(r["event_id"] for r in quarantined) == ["broken-0", "broken-1"]
    assert {r["check"] for r in quarantined} == {"handle_key_present"}
    assert validation.quarantined == 2

    result = compact(spark, config)
    assert len(marks) == 2
    assert sum(t.changes for t in result.tables.values()) == 0  # nothing of them reached gold
    assert {t.watermark for t in result.tables.values()} == {state + 10}


def test_gold_breakages_fail_the_gold_job_and_a_stuck_partition_is_named(spark, sample, capsys):
    config = load_config(sample / "pipeline.yaml")
    layout = LakeLayout(config.lake)
    (state,) = {r["watermark"] for r in rows(layout.gold_state)}
    orders = layout.gold("shop", "orders")
    append(orders, rows(orders)[:1])  # a second row with the same key
    accounts = DeltaTable(str(layout.gold("shop", "accounts")))
    code = accounts.to_pyarrow_table(columns=["code"]).column("code")[0].as_py()
    quoted = code.replace("'", "''")  # the sample's codes hold names such as o'brien
    accounts.update({"_commit_ts": str(state + 1)}, predicate=f"code = '{quoted}'")
    strings = DeltaTable(str(layout.gold("shop", "strings")))
    strings.delete(f"id = {strings.to_pyarrow_table(columns=['id']).column('id')[0].as_py()}")
    hour = 3600 * 1000 << 18
    DeltaTable(str(layout.watermarks)).update(
        {"resolved_ts": f"resolved_ts - {hour}"}, predicate="partition = 1"
    )

    code, log = _job(spark, sample, "gold", capsys)

    assert code == 1
    for check in ("gold_key_unique", "gold_ts_bound", "gold_row_count"):
        assert check in log
    found = {r["check"]: r for r in rows(layout.quality_results)}
    assert found["gold_key_unique"]["unexpected_count"] == 2
    assert json.loads(found["gold_ts_bound"]["sample"])[0]["table"] == "shop.accounts"
    assert "shop.strings" in found["gold_row_count"]["sample"]
    stuck = found["stuck_partition"]
    assert stuck["policy"] == "warn" and not stuck["success"]
    (partition,) = json.loads(stuck["sample"])
    assert partition["partition"] == 1 and partition["resolved_ts"] == state - hour
