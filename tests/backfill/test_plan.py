"""The backfill plan, on a lake written with delta-rs (no Spark): which bronze batches and gold
tables a TS range touches, the checks it makes first, and when a backfill is already done."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from ticdc_lake.backfill.plan import plan_backfill
from ticdc_lake.backfill.run import record_backfill
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.orchestration import BackfillParamError, tso_of

START = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)


def ts(seconds: int) -> int:
    return tso_of(START + dt.timedelta(seconds=seconds))


CONFIG = """
version: 1
lake: lake
inputs: [exports/*]
topics:
  t1: {protocol: open-protocol, partitions: 1}
  t2: {protocol: open-protocol, partitions: 1}
changefeeds:
  f1: {topics: [t1]}
  f2: {topics: [t2]}
"""


def _write(path, rows: list[dict], partition_by=None) -> None:
    write_deltalake(str(path), pa.Table.from_pylist(rows), mode="append",
                    partition_by=partition_by)  # fmt: skip


def _change(batch: int, seconds: int, topic: str, table: str) -> dict:
    return {"commit_ts": ts(seconds), "schema": "shop", "table": table, "topic": topic,
            "bronze_batch": batch}  # fmt: skip


@pytest.fixture
def config(tmp_path):
    (tmp_path / "pipeline.yaml").write_text(CONFIG)
    config = load_config(tmp_path / "pipeline.yaml")
    layout = LakeLayout(config.lake)
    _write(layout.changes, [
        _change(1, 10, "t1", "a"), _change(1, 20, "t1", "a"),
        _change(2, 30, "t1", "a"), _change(2, 40, "t2", "b"),
        _change(3, 50, "t2", "b"),
    ], ["bronze_batch"])  # fmt: skip
    _write(layout.ddl, [_change(1, 5, "t1", "a")], ["bronze_batch"])
    _write(layout.resolved, [{"topic": "t2", "ts": ts(60), "bronze_batch": 3}], ["bronze_batch"])
    # Batch 4 holds a record that did not decode, produced after the range starts; batch 5 one
    # produced long before it: only batch 4 can hold a change of the range.
    _write(layout.quarantine, [
        {"topic": "t2", "partition": 0, "offset": 7, "bronze_batch": 4},
        {"topic": "t1", "partition": 0, "offset": 8, "bronze_batch": 5},
    ], ["bronze_batch"])  # fmt: skip
    stamp = pa.timestamp("us", tz="UTC")
    bronze = pa.table({
        "topic": ["t2", "t1"], "partition": pa.array([0, 0], pa.int32()), "offset": [7, 8],
        "batch_id": [4, 5],
        "timestamp": pa.array([START + dt.timedelta(seconds=35), START - dt.timedelta(hours=1)],
                              stamp),
    })  # fmt: skip
    write_deltalake(str(layout.bronze), bronze)
    _write(layout.gold_state, [
        {"changefeed": "f1", "schema": "shop", "table": "a", "watermark": ts(100)},
        {"changefeed": "f2", "schema": "shop", "table": "b", "watermark": ts(90)},
    ])  # fmt: skip
    return config


def test_the_plan_names_the_batches_tables_and_changefeeds_a_range_touches(config):
    plan = plan_backfill(config, ts(25), ts(45))
    assert plan.batches == (2, 4)
    assert plan.tables_in_range == ("shop.a", "shop.b")
    assert plan.changefeeds == ("f1", "f2")
    assert plan.rebuilt_tables == ("shop.a", "shop.b")
    assert plan.watermark == ts(100) and not plan.done
    assert "bronze batches whose silver is re-derived: [2, 4]" in plan.lines()

    early = plan_backfill(config, ts(0), ts(15))  # DDL and changes of batch 1 only
    assert (early.batches, early.changefeeds) == ((1, 4), ("f1", "f2"))
    tail = plan_backfill(config, ts(55), ts(60))  # only a resolved event (and batch 4)
    assert (tail.batches, tail.tables_in_range) == ((3, 4), ())


def test_a_data_interval_holding_the_watermark_ends_at_it(config):
    plan = plan_backfill(config, ts(25), ts(3600), up_to_watermark=True)
    assert (plan.end_ts, plan.batches) == (ts(100), (2, 3, 4))
    with pytest.raises(BackfillParamError, match=r"starts at .* above the lake's current"):
        plan_backfill(config, ts(200), ts(3600), up_to_watermark=True)


def test_a_table_list_limits_what_is_rebuilt(config):
    plan = plan_backfill(config, ts(25), ts(45), ["shop.a"])
    assert plan.tables_in_range == ("shop.a",)
    assert plan.changefeeds == ("f1",) and plan.rebuilt_tables == ("shop.a",)
    assert plan.watermark == ts(100)


def test_bad_ranges_and_tables_say_what_to_give(config):
    with pytest.raises(BackfillParamError, match=r"shop\.zz not among the lake's gold tables"):
        plan_backfill(config, ts(1), ts(2), ["shop.zz"])
    with pytest.raises(BackfillParamError, match="above the lake's current watermark"):
        plan_backfill(config, ts(1), ts(101))
    with pytest.raises(BackfillParamError, match="above the lake's current watermark"):
        plan_backfill(config, ts(1), ts(95), ["shop.b"])  # f2's gold is at 90
    with pytest.raises(BackfillParamError, match="is before start_ts"):
        plan_backfill(config, ts(3), ts(2))


def test_a_recorded_backfill_is_done_until_the_lake_changes(config):
    plan = plan_backfill(config, ts(25), ts(45))
    record_backfill(config, plan)
    assert plan_backfill(config, ts(25), ts(45)).done
    assert not plan_backfill(config, ts(25), ts(46)).done  # another range
    assert not plan_backfill(config, ts(25), ts(45), ["shop.a"]).done  # other tables
    _write(LakeLayout(config.lake).changes, [_change(6, 70, "t1", "a")], ["bronze_batch"])
    assert not plan_backfill(config, ts(25), ts(45)).done  # silver changed since
