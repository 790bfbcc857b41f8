"""Which quarantined records a gold table may lack changes from, and what its reason says."""

from __future__ import annotations

import pyarrow as pa
import yaml
from deltalake import write_deltalake
from ticdc_lake.config import load_config
from ticdc_lake.gold.catalog import TableName
from ticdc_lake.gold.feed import FeedPlan
from ticdc_lake.gold.missing import checked_out, missing_reasons, quarantined_at_or_below
from ticdc_lake.gold.reasons import carried_reasons, join_reasons
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.protocols import make_encoder
from ticdc_lake.sample.cases import BY_NAME, make_column
from ticdc_lake.silver.decode import QUARANTINE_SCHEMA
from ticdc_lake.silver.events import RowEvent
from ticdc_lake.silver.rows import RESOLVED_SCHEMA

TOPIC = "t"
ORDERS, ITEMS = TableName("shop", "orders"), TableName("shop", "items")


def plan(target: int | None) -> FeedPlan:
    return FeedPlan(
        name="feed", topics=(TOPIC,), mode="watermark" if target else "inconsistent",
        target=target, prior={}, zones={}, lacks_ts=False, mode_reason=None, rebuild=False,
        generation=0, low_ts=-1, low_batch=-1,
    )  # fmt: skip


def lake(tmp_path, quarantined: list[dict], resolved: list[tuple[int, int, int]]):
    path = tmp_path / "pipeline.yaml"
    document = {"lake": "lake", "topics": {TOPIC: {"protocol": "open-protocol", "partitions": 2}}}
    path.write_text(yaml.safe_dump(document))
    config = load_config(path)
    layout = LakeLayout(config.lake)
    rows = [
        {"topic": TOPIC, "source_file": "f", "bronze_batch": 0, "protocol": "open-protocol",
         "error": "bad", "byte_offset": None, "quarantined_at": None, **q}
        for q in quarantined
    ]  # fmt: skip
    write_deltalake(str(layout.quarantine), pa.Table.from_pylist(rows, QUARANTINE_SCHEMA))
    marks = [
        {"topic": TOPIC, "partition": p, "ts": ts, "offset": o, "index": 0, "bronze_batch": 0}
        for p, o, ts in resolved
    ]
    write_deltalake(str(layout.resolved), pa.Table.from_pylist(marks, RESOLVED_SCHEMA))
    return config, layout


def row_message(table: str) -> tuple[bytes, bytes]:
    image = {"id": make_column(BY_NAME["c_int"], 1, key=True)}
    event = RowEvent(10, "shop", table, "insert", image, None, TOPIC, 0, 0)
    (message,) = make_encoder("open-protocol").encode([event])
    return message.key, message.value


def test_records_before_the_partitions_first_resolved_event_at_the_target_count(tmp_path):
    key, _ = row_message("orders")
    config, layout = lake(
        tmp_path,
        [
            {"partition": 0, "offset": 3, "key": key, "value": b"cut short"},  # before: counts
            {"partition": 0, "offset": 9, "key": key, "value": b"cut short"},  # after: TS > 100
            {"partition": 1, "offset": 2, "key": b"garbage", "value": b"?"},  # names no table
        ],
        resolved=[(0, 5, 100), (0, 1, 50), (1, 8, 120)],
    )
    found = quarantined_at_or_below(config, plan(100), layout)
    assert [(r.partition, r.offset, r.tables) for r in found] == [
        (0, 3, frozenset([ORDERS])),
        (1, 2, None),
    ]
    reasons = missing_reasons(plan(100), [ORDERS, ITEMS], found, {})
    assert "2 record(s) of its changefeed at or below TS 100" in reasons[ORDERS]
    assert "topic t partition 0 offset(s) 3, topic t partition 1 offset(s) 2" in reasons[ORDERS]
    assert "1 record(s)" in reasons[ITEMS]  # only the one that names no table
    # Derived afresh by every run: never carried from a prior state.
    assert carried_reasons(join_reasons("DDL x", reasons[ORDERS])) == ["DDL x"]


def test_without_a_target_every_quarantined_record_counts(tmp_path):
    key, _ = row_message("items")
    config, layout = lake(
        tmp_path, [{"partition": 0, "offset": 9, "key": key, "value": b"x"}], [(0, 5, 100)]
    )
    (found,) = quarantined_at_or_below(config, plan(None), layout)
    assert found.tables == frozenset([ITEMS])
    reasons = missing_reasons(plan(None), [ITEMS], [found], {})
    assert "record(s) of its changefeed received" in reasons[ITEMS]


def test_changes_a_check_took_out_are_counted_per_table(tmp_path):
    _, layout = lake(tmp_path, [], [])
    rows = pa.table(
        {
            "topic": [TOPIC] * 3,
            "schema": ["shop"] * 3,
            "table": ["orders", "orders", "items"],
            "commit_ts": [90, 150, None],
        }
    )
    write_deltalake(str(layout.quality_quarantine), rows)
    assert checked_out(plan(100), layout) == {ORDERS: 1, ITEMS: 1}
    reasons = missing_reasons(plan(100), [ORDERS], [], {ORDERS: 1})
    assert (
        "1 change(s) of it at or below TS 100 were taken out by a data-quality" in reasons[ORDERS]
    )
