"""Watermark stage: per-partition maximum resolved TS, regressions, changefeed minimum."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ticdc_lake.config import load_config
from ticdc_lake.delta import TableFileMissingError, read_delta, write_delta
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.silver import watermark as watermark_stage
from ticdc_lake.silver.events import ResolvedEvent
from ticdc_lake.silver.watermark import (
    WATERMARKS_SCHEMA,
    fold_resolved,
    fold_resolved_rows,
    watermark,
)

from tests.gold import silver_input as si

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]


def _config(directory: Path):
    document = {
        "lake": "lake",
        "topics": {
            "a": {"protocol": "open-protocol", "partitions": 4},
            "b": {"protocol": "open-protocol", "partitions": 1},
            "c": {"protocol": "avro", "partitions": 1, "schema-dir": "s"},
        },
        "changefeeds": {"ab": {"topics": ["a", "b"]}, "c": {"topics": ["c"], "watermarks": False}},
    }
    (directory / "pipeline.yaml").write_text(yaml.safe_dump(document))
    return load_config(directory / "pipeline.yaml")


def _resolved(spark, layout: LakeLayout, batch: int, events: list[tuple[str, int, int, int]]):
    rows = [
        {"topic": t, "partition": p, "ts": ts, "offset": o, "index": 0, "bronze_batch": batch}
        for t, p, ts, o in events
    ]
    frame = spark.createDataFrame(pa.Table.from_pylist(rows, schema=si.RESOLVED_SCHEMA))
    write_delta(frame, layout.resolved, partition_by=["bronze_batch"], app_id="t", version=batch)


def _table(spark, layout: LakeLayout) -> dict[tuple[str, int], dict]:
    rows = read_delta(spark, layout.watermarks).collect()
    return {(r.topic, r.partition): r.asDict() for r in rows}


def test_maximum_per_partition_regressions_and_the_changefeed_minimum(spark, tmp_path):
    config = _config(tmp_path)
    layout = LakeLayout(config.lake)
    _resolved(
        spark,
        layout,
        0,
        [
            # partition 0: 10, 30, then a replayed 20 (a regression) and 30 again (not one)
            *[("a", 0, 10, 0), ("a", 0, 30, 1), ("a", 0, 20, 2), ("a", 0, 30, 3)],
            *[("a", 1, 25, 0), ("a", 2, 40, 0), ("b", 0, 35, 7)],
        ],
    )
    first = watermark(spark, config)
    table = _table(spark, layout)
    assert table[("a", 0)] == {
        "topic": "a",
        "partition": 0,
        "resolved_ts": 30,
        "offset": 1,
        "events": 4,
        "regressions": 1,
        "last_regression_ts": 20,
        "last_regression_offset": 2,
        "bronze_batch": 0,
    }
    assert (first.resolved_read, first.partitions, first.advanced, first.regressions) == (
        7,
        4,
        4,
        1,
    )
    feeds = {feed.name: feed for feed in first.changefeeds}
    assert feeds["ab"].watermark == 0  # partition a[3] has sent nothing yet
    assert feeds["ab"].unseen == (("a", 3),)
    assert feeds["c"].watermarks is False and feeds["c"].watermark is None

    # The next batch: a[3] catches up, a[0] regresses again, a partition beyond the config.
    _resolved(spark, layout, 1, [("a", 3, 50, 0), ("a", 0, 15, 4), ("a", 7, 60, 0)])
    second = watermark(spark, config)
    table = _table(spark, layout)
    assert table[("a", 0)]["resolved_ts"] == 30 and table[("a", 0)]["regressions"] == 2
    assert table[("a", 0)]["last_regression_ts"] == 15
    assert table[("a", 0)]["bronze_batch"] == 1
    feeds = {feed.name: feed for feed in second.changefeeds}
    assert feeds["ab"].watermark == 25 and feeds["ab"].holding == (("a", 1),)
    assert feeds["ab"].unexpected == (("a", 7),)
    assert (second.resolved_read, second.advanced, second.regressions) == (3, 2, 1)

    version = DeltaTable(str(layout.watermarks)).version()
    again = watermark(spark, config)
    assert not again.committed and again.resolved_read == 0
    assert DeltaTable(str(layout.watermarks)).version() == version == again.version
    assert str(again).startswith("watermark: 0 resolved events read")


def test_generated_streams_with_replays_and_an_idle_partition(spark, tmp_path):
    workload = generate_workload(seed=21, transactions=120)
    streams = si.dispatch(workload, "open-protocol", partitions=4, idle_partitions=1, replays=4)
    config = si.write_config(tmp_path, streams, "open-protocol")
    layout = LakeLayout(config.lake)
    (topic,) = streams.topics
    uneven = {(topic, 0): 0.6, (topic, 1): 0.3, (topic, 2): 0.9, (topic, 3): 0.5}
    si.land(spark, layout, streams, uneven)
    si.land(spark, layout, streams, 1.0)
    result = watermark(spark, config)
    table = _table(spark, layout)

    expected_regressions = 0
    for key, events in streams.events.items():
        marks = [e.ts for e in events if isinstance(e, ResolvedEvent)]
        assert table[key]["resolved_ts"] == max(marks)
        high = -1
        for ts in marks:  # arrival order: batch, then offset
            expected_regressions += ts < high
            high = max(high, ts)
    assert expected_regressions > 0, "the workload's replays re-send resolved events"
    assert result.regressions == expected_regressions
    assert result.changefeeds[0].watermark == workload.resolved_ts[-1]
    assert streams.routing.idle_partitions == (3,)


def test_spark_submit_entry_point_prints_the_result(spark, tmp_path, monkeypatch, capsys):
    config = _config(tmp_path)
    _resolved(spark, LakeLayout(config.lake), 0, [("b", 0, 5, 0)])
    spec = importlib.util.spec_from_file_location("job", REPO / "spark_jobs" / "watermark.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    monkeypatch.setattr(job, "build_session", lambda name: spark)
    assert job.main(["--config", str(tmp_path / "pipeline.yaml")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["resolved_read"] == 1 and printed["committed"] is True
    assert {feed["name"]: feed["watermark"] for feed in printed["changefeeds"]} == {
        "ab": 0,
        "c": None,
    }


def test_the_job_folds_new_events_without_building_a_spark_session(
    spark, tmp_path, monkeypatch, capsys
):
    """A run's few resolved events fold on the driver: under spark-submit the job skips the
    seconds of starting a SparkContext."""
    config = _config(tmp_path)
    _resolved(spark, LakeLayout(config.lake), 0, [("a", 0, 7, 0), ("b", 0, 5, 0)])
    spec = importlib.util.spec_from_file_location("job", REPO / "spark_jobs" / "watermark.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    monkeypatch.setattr(job, "build_session", lambda name: pytest.fail("a session was built"))
    assert job.main(["--config", str(tmp_path / "pipeline.yaml")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["resolved_read"], printed["partitions"], printed["committed"]) == (2, 2, True)


EVENT = st.tuples(
    st.sampled_from([("a", 0), ("a", 1), ("b", 0)]),
    st.integers(0, 6),  # resolved TS: small, so that ties and replays are frequent
    st.integers(0, 2),  # bronze batch
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(EVENT, max_size=25),
    earlier=st.lists(EVENT, max_size=8),
)
def test_the_driver_fold_equals_sparks(spark, events, earlier):
    """Arrival order (batch, offset, index), regressions, the offset that first reached the
    high, the last regression, over a previous table or none: the same rows both ways."""

    def table(events, first_offset, batch_shift):
        rows = [
            {"topic": t, "partition": p, "ts": ts, "offset": first_offset + i % 3, "index": i,
             "bronze_batch": batch + batch_shift}
            for i, ((t, p), ts, batch) in enumerate(events)
        ]  # fmt: skip
        return pa.Table.from_pylist(rows, schema=si.RESOLVED_SCHEMA)

    def spark_fold(new: pa.Table, previous):
        frame = fold_resolved(spark.createDataFrame(new), previous)
        return {(r.topic, r.partition): r.asDict() for r in frame.collect()}

    first, second = table(earlier, 0, 0), table(events, 10, 3)
    before = spark_fold(first, None)
    assert fold_resolved_rows(first, {}) == before
    previous = spark.createDataFrame(list(before.values()), WATERMARKS_SCHEMA) if before else None
    assert fold_resolved_rows(second, before) == spark_fold(second, previous)


def test_the_stage_folds_alike_on_the_driver_and_in_spark(spark, tmp_path, monkeypatch):
    tables = {}
    for limit in (watermark_stage.DRIVER_FOLD_LIMIT, 0):  # 0: every run's events go to Spark
        monkeypatch.setattr(watermark_stage, "DRIVER_FOLD_LIMIT", limit)
        directory = tmp_path / str(limit)
        directory.mkdir()
        config = _config(directory)
        layout = LakeLayout(config.lake)
        _resolved(spark, layout, 0, [("a", 0, 10, 0), ("a", 0, 30, 1), ("a", 0, 20, 2)])
        watermark(spark, config)
        _resolved(spark, layout, 1, [("a", 0, 30, 3), ("a", 0, 15, 4), ("b", 0, 5, 0)])
        result = watermark(spark, config)
        assert (result.resolved_read, result.regressions, result.advanced) == (3, 1, 1)
        tables[limit] = _table(spark, layout)
    assert tables[0] == tables[watermark_stage.DRIVER_FOLD_LIMIT]


def test_a_missing_resolved_file_is_named(spark, tmp_path):
    config = _config(tmp_path)
    layout = LakeLayout(config.lake)
    _resolved(spark, layout, 0, [("a", 0, 10, 0)])
    (gone,) = layout.resolved.glob("bronze_batch=0/*.parquet")
    gone.unlink()
    with pytest.raises(TableFileMissingError, match="bronze_batch=0"):
        watermark(spark, config)
