"""What gold lacks: records of a changefeed quarantined at or below the TS gold reflects.

A record that does not decode (silver's quarantine) or a change a data-quality check took out
(quality/quarantine) never reaches gold. When it may hold a change at or below the TS a gold
table reflects, the table's state says so in its ``reason`` (recomputed each run, so a fix and
a backfill that decode the record clear it), and the ``gold_mode`` check warns.

A quarantined record has no TS to go by, so its Kafka position decides: TiCDC sends every
change of TS <= R before a resolved event of TS R in each partition, so a record after the
partition's first resolved event at or above the target cannot hold a change at or below it.
Every other record of the changefeed's topics may. Which tables it may hold changes of is read
from it as far as it allows (``Decoder.tables_named``); when it cannot be told, every table of
the changefeed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ticdc_lake.config import PipelineConfig
from ticdc_lake.delta import delta_table_exists, open_table
from ticdc_lake.gold.catalog import TableName
from ticdc_lake.gold.feed import FeedPlan
from ticdc_lake.gold.reasons import QUARANTINED
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.records import KafkaRecord

SHOWN_OFFSETS = 5  # offsets named per partition in a reason; the rest are counted


@dataclass(frozen=True)
class Quarantined:
    topic: str
    partition: int
    offset: int
    tables: frozenset[TableName] | None  # None: the record does not say


def quarantined_at_or_below(
    config: PipelineConfig, plan: FeedPlan, layout: LakeLayout
) -> list[Quarantined]:
    """The changefeed's records that silver's quarantine holds and that may hold a change at
    or below the run's target (any, when the run has none: gold then claims every change)."""
    rows = _read(layout.quarantine, ["topic", "partition", "offset", "key", "value"], plan.topics)
    if rows is None or rows.num_rows == 0:
        return []
    bounds = _first_resolved_at_or_above(layout, plan.topics, plan.target_ts)
    decoders = _Decoders(config)
    found = []
    for row in rows.to_pylist():
        bound = bounds.get((row["topic"], row["partition"]))
        if bound is not None and row["offset"] > bound:
            continue
        record = KafkaRecord(row["topic"], row["partition"], row["offset"], row["key"],
                             row["value"])  # fmt: skip
        found.append(Quarantined(row["topic"], row["partition"], row["offset"],
                                 decoders.tables_named(record)))  # fmt: skip
    return found


def checked_out(plan: FeedPlan, layout: LakeLayout) -> dict[TableName, int]:
    """Per table, the changes at or below the target a data-quality check took out."""
    rows = _read(layout.quality_quarantine, ["topic", "schema", "table", "commit_ts"], plan.topics)
    if rows is None or rows.num_rows == 0:
        return {}
    if plan.target_ts is not None:
        stamps = rows.column("commit_ts")
        rows = rows.filter(pc.or_kleene(pc.is_null(stamps), pc.less_equal(stamps, plan.target_ts)))
    counts: dict[TableName, int] = defaultdict(int)
    for row in rows.select(["schema", "table"]).to_pylist():
        counts[TableName(row["schema"], row["table"])] += 1
    return dict(counts)


def missing_reasons(
    plan: FeedPlan,
    tables: Iterable[TableName],
    records: list[Quarantined],
    checks: dict[TableName, int],
) -> dict[TableName, str]:
    """Per table of ``tables``, the reason naming what gold lacks (absent: nothing)."""
    where = "at or below TS " + str(plan.target_ts) if plan.target_ts is not None else "received"
    reasons = {}
    for name in tables:
        mine = [r for r in records if r.tables is None or name in r.tables]
        parts = []
        if mine:
            parts.append(
                f"{len(mine)} record(s) of its changefeed {where} could not be decoded (in "
                f"silver's quarantine: {_positions(mine)}), and gold lacks any change of it "
                "they hold: fix the cause, then backfill their range to decode them again"
            )
        if checks.get(name):
            parts.append(
                f"{checks[name]} change(s) of it {where} were taken out by a data-quality "
                "check (quality/quarantine)"
            )
        if parts:
            reasons[name] = QUARANTINED + ", and ".join(parts)
    return reasons


def _positions(records: list[Quarantined]) -> str:
    by_partition: dict[tuple[str, int], list[int]] = defaultdict(list)
    for record in records:
        by_partition[(record.topic, record.partition)].append(record.offset)
    texts = []
    for (topic, partition), offsets in sorted(by_partition.items()):
        offsets.sort()
        shown = ", ".join(map(str, offsets[:SHOWN_OFFSETS]))
        more = f" and {len(offsets) - SHOWN_OFFSETS} more" if len(offsets) > SHOWN_OFFSETS else ""
        texts.append(f"topic {topic} partition {partition} offset(s) {shown}{more}")
    return ", ".join(texts)  # no "; ": it separates reasons (reasons.py)


def _first_resolved_at_or_above(
    layout: LakeLayout, topics: tuple[str, ...], target: int | None
) -> dict[tuple[str, int], int]:
    """Per partition, the offset of its first resolved event at or above ``target``."""
    if target is None:
        return {}
    rows = _read(layout.resolved, ["topic", "partition", "offset", "ts"], topics,
                 pc.field("ts") >= target)  # fmt: skip
    if rows is None or rows.num_rows == 0:
        return {}
    first = rows.group_by(["topic", "partition"]).aggregate([("offset", "min")])
    return {(row["topic"], row["partition"]): row["offset_min"] for row in first.to_pylist()}


def _read(path, columns: list[str], topics: tuple[str, ...], condition=None) -> pa.Table | None:
    if not delta_table_exists(path):
        return None
    table = open_table(path)
    present = {field.name for field in table.schema().fields}
    if not set(columns) <= present:
        return None
    where = pc.field("topic").isin(list(topics))
    if condition is not None:
        where = where & condition
    return table.to_pyarrow_dataset().to_table(columns=columns, filter=where)


class _Decoders:
    """A decoder per topic, built when first asked, to read the names a record holds."""

    def __init__(self, config: PipelineConfig):
        self.config = config
        self.decoders: dict[str, object] = {}
        self.sources: dict = {}

    def tables_named(self, record: KafkaRecord) -> frozenset[TableName] | None:
        from ticdc_lake.silver.codecs import topic_decoder

        try:
            decoder = self.decoders.get(record.topic)
            if decoder is None:
                settings = self.config.topic(record.topic)
                decoder = topic_decoder(settings, self.config.limits, self.sources)
                self.decoders[record.topic] = decoder
            named = decoder.tables_named(record)
        except Exception:  # a registry down, a topic gone from the config: it cannot be told
            return None
        return None if named is None else frozenset(TableName(*pair) for pair in named)
