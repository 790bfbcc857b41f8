"""A compaction run's counts on the driver (delta-rs and pyarrow) equal Spark's counts pass, for
any silver changes, applied state, target, mode and quarantine."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ticdc_lake.gold import changes
from ticdc_lake.gold.catalog import Catalog, TableName
from ticdc_lake.gold.feed import FeedPlan
from ticdc_lake.gold.plan import Timeline
from ticdc_lake.gold.state import INCONSISTENT, WATERMARK, TableState
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.quarantine import COORDINATES
from ticdc_lake.silver.rows import CHANGES_SCHEMA

CHANGE = st.tuples(
    st.sampled_from(["t", "u", "v"]),  # table
    st.sampled_from(["e1", "e2", "e3"]),  # event id: copies are frequent
    st.one_of(st.none(), st.integers(0, 8)),  # commit TS
    st.sampled_from(["a", "b", "other"]),  # topic: "other" is not the changefeed's
    st.integers(0, 3),  # bronze batch
    st.booleans(),  # quarantined by a data-quality check
)
APPLIED = st.dictionaries(
    st.sampled_from(["t", "u"]), st.tuples(st.integers(-1, 6), st.integers(-1, 2))
)


def _silver(layout: LakeLayout, changes: list[tuple]) -> None:
    rows = [
        {"event_id": event, "commit_ts": ts, "schema": "s", "table": table, "op": "insert",
         "handle_key": [], "handle_key_only": False, "topic": topic, "partition": 0,
         "offset": offset, "index": 0, "bronze_batch": batch}
        for offset, (table, event, ts, topic, batch, _) in enumerate(changes)
    ]  # fmt: skip
    data = pa.Table.from_pylist(rows, schema=CHANGES_SCHEMA)
    write_deltalake(str(layout.changes), data, partition_by=["bronze_batch"])
    quarantined = [
        {"topic": topic, "partition": 0, "offset": offset, "index": 0}
        for offset, (*_, topic, _, held) in enumerate(changes)
        if held
    ]
    if quarantined:
        # The quality table's coordinates, typed as wide as Arrow reads them back from JSON.
        schema = pa.schema(
            [(name, pa.int64() if name != "topic" else pa.string()) for name in COORDINATES]
        )
        write_deltalake(str(layout.quality_quarantine), pa.Table.from_pylist(quarantined, schema))


def _plan(applied: dict, *, consistent: bool, target: int, rebuild: bool) -> FeedPlan:
    mode = WATERMARK if consistent else INCONSISTENT
    prior = {
        TableName("s", table): TableState("f", "s", table, "gold", mode, None, ts, batch)
        for table, (ts, batch) in applied.items()
    }
    kept = [] if rebuild else list(prior.values())
    return FeedPlan(
        name="f", topics=("a", "b"), mode=mode, target=target if consistent else None,
        prior=prior, zones={}, lacks_ts=False, mode_reason=None, rebuild=rebuild, generation=0,
        low_ts=min((p.applied_ts for p in kept), default=-1),
        low_batch=min((p.applied_batch for p in kept), default=-1),
    )  # fmt: skip


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    silver=st.lists(CHANGE, min_size=1, max_size=16),
    applied=APPLIED,
    consistent=st.booleans(),
    target=st.integers(0, 8),
    rebuild=st.booleans(),
)
def test_the_driver_counts_what_spark_counts(
    spark, tmp_path_factory, silver, applied, consistent, target, rebuild
):
    """Read, distinct, pending and the largest TS per table, the latest batch and the first
    pending one: changes of other topics, settled batches and quarantined coordinates left out,
    replays (an event id at the same TS) counted once."""
    layout = LakeLayout(tmp_path_factory.mktemp("lake"))
    _silver(layout, silver)
    plan = _plan(applied, consistent=consistent, target=target, rebuild=rebuild)
    in_spark = changes.count_in_spark(changes.selected_changes(spark, layout, plan), plan)
    assert changes.count_on_driver(layout, plan) == in_spark


def test_spark_counts_a_run_too_large_for_the_driver_or_without_commit_ts(tmp_path, monkeypatch):
    layout = LakeLayout(tmp_path)
    _silver(layout, [("t", "e1", 5, "a", 0, False), ("t", "e2", 6, "a", 1, False)])
    plan = _plan({}, consistent=True, target=8, rebuild=False)
    counted, batches = changes.count_on_driver(layout, plan)
    assert counted == {TableName("s", "t"): changes.TableCounts(2, 2, 0, 6)}
    assert batches == changes.Batches(latest=1, pending=None)
    lacking = FeedPlan(**{**plan.__dict__, "lacks_ts": True})
    assert changes.count_on_driver(layout, lacking) is None
    monkeypatch.setattr(changes, "DRIVER_COUNT_LIMIT", 1)
    assert changes.count_on_driver(layout, plan) is None
    settled = FeedPlan(**{**plan.__dict__, "low_batch": 0})  # one change above it: counted
    assert changes.count_on_driver(layout, settled)[0][TableName("s", "t")].read == 1


@pytest.mark.parametrize("limit", [0, changes.DRIVER_COUNT_LIMIT], ids=["spark", "driver"])
def test_a_compaction_reports_the_same_counts_either_way(spark, tmp_path, monkeypatch, limit):
    """Through reduce_changes, as the stage calls it."""
    layout = LakeLayout(tmp_path)
    _silver(layout, [("t", "e1", 5, "a", 0, False), ("t", "e1", 5, "b", 1, False)])
    monkeypatch.setattr(changes, "DRIVER_COUNT_LIMIT", limit)
    plan = _plan({}, consistent=True, target=8, rebuild=False)
    _, counted, _ = changes.reduce_changes(spark, layout, plan, Timeline(Catalog(), []))
    assert counted[TableName("s", "t")].duplicates == 1
