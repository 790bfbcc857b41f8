"""Watermark: per Kafka partition the highest resolved TS, per changefeed the global watermark.

    watermark(spark, config) -> WatermarkResult

Reads the resolved events Decode wrote (layout.resolved, partitioned by bronze batch) that are
newer than the last run's bronze batch, and folds them into layout.watermarks, one row per
(topic, partition):

| column              | meaning                                                               |
|---------------------|-----------------------------------------------------------------------|
| topic, partition    | the Kafka partition                                                   |
| resolved_ts         | the highest resolved TS seen: every change with commit TS <= it has   |
|                     | been sent to this partition                                           |
| offset              | Kafka offset of the resolved event that first reached it              |
| events              | resolved events folded in                                             |
| regressions         | resolved events below the partition's watermark when they were read   |
|                     | (replays after a TiCDC restart): ignored, as TiCDC's consumer does    |
| last_regression_ts, | the latest of them, and where it was                                  |
| last_regression_offset |                                                                    |
| bronze_batch        | the last bronze batch folded in (the next run reads the batches above) |

Events are folded in arrival order: bronze batch, then offset and index; on the driver
(``fold_resolved_rows``) when a run has at most DRIVER_FOLD_LIMIT of them, else by Spark
(``fold_resolved``). The global watermark
of a changefeed (``changefeed_watermarks``) is the minimum over every partition of every topic
in it, partition counts from the config: a partition never seen holds it at 0 (PROTOCOLS.md §8).
It is computed from the table, not stored, so a config change is honoured at once.

Idempotent: the table is replaced in one commit with app id ``watermark`` and version = the
highest bronze batch folded in; a run with no new resolved events writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from ticdc_lake.config import ChangefeedConfig, PipelineConfig
from ticdc_lake.delta import (
    Table,
    delta_table_exists,
    file_actions,
    open_table,
    read_delta,
    read_on_driver,
    read_table,
    rows_in_partitions_above,
    write_arrow,
)
from ticdc_lake.lake.layout import LakeLayout

APP_ID = "watermark"
ARRIVAL = ("bronze_batch", "offset", "index")  # the order a partition's events came in

WATERMARKS_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("resolved_ts", T.LongType()),
        T.StructField("offset", T.LongType()),
        T.StructField("events", T.LongType()),
        T.StructField("regressions", T.LongType()),
        T.StructField("last_regression_ts", T.LongType()),
        T.StructField("last_regression_offset", T.LongType()),
        T.StructField("bronze_batch", T.LongType()),
    ]
)

WATERMARKS_ARROW = to_arrow_schema(WATERMARKS_SCHEMA)


@dataclass(frozen=True)
class ChangefeedWatermark:
    """A changefeed's global watermark and what holds it there."""

    name: str
    watermarks: bool  # False: the changefeed's protocol sends none (config)
    watermark: int | None  # None when watermarks is False
    holding: tuple[tuple[str, int], ...] = ()  # the partitions at the minimum
    unseen: tuple[tuple[str, int], ...] = ()  # configured partitions with no resolved event
    unexpected: tuple[tuple[str, int], ...] = ()  # seen partitions beyond the configured count

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "watermarks": self.watermarks,
            "watermark": self.watermark,
            "holding": [list(p) for p in self.holding],
            "unseen": [list(p) for p in self.unseen],
            "unexpected": [list(p) for p in self.unexpected],
        }


@dataclass(frozen=True)
class WatermarkResult:
    resolved_read: int  # resolved events read this run
    partitions: int  # rows of the watermarks table
    advanced: int  # partitions whose watermark rose this run
    regressions: int  # resolved events ignored this run (below their partition's watermark)
    committed: bool
    version: int | None  # the watermarks table's version after the run
    changefeeds: tuple[ChangefeedWatermark, ...] = ()
    unknown_topics: tuple[str, ...] = ()  # resolved events of topics not in the config
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "resolved_read": self.resolved_read,
            "partitions": self.partitions,
            "advanced": self.advanced,
            "regressions": self.regressions,
            "committed": self.committed,
            "version": self.version,
            "changefeeds": [c.to_dict() for c in self.changefeeds],
            "unknown_topics": list(self.unknown_topics),
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        lines = [
            f"watermark: {self.resolved_read} resolved events read, {self.advanced} of "
            f"{self.partitions} partitions advanced, {self.regressions} regressions ignored"
            + ("" if self.committed else " (nothing written)")
        ]
        for feed in self.changefeeds:
            if not feed.watermarks:
                lines.append(f"  {feed.name}: no watermarks (see cutoff-ts)")
                continue
            held = ", ".join(f"{t}[{p}]" for t, p in feed.holding[:4])
            lines.append(f"  {feed.name}: {feed.watermark} held by {held or '-'}")
            if feed.unseen:
                unseen = ", ".join(f"{t}[{p}]" for t, p in feed.unseen[:4])
                lines.append(f"    never seen: {unseen}{' ...' if len(feed.unseen) > 4 else ''}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def fold_resolved(new: DataFrame, previous: DataFrame | None) -> DataFrame:
    """The watermarks table after folding ``new`` resolved events (topic, partition, ts, offset,
    index, bronze_batch) into ``previous`` (WATERMARKS_SCHEMA or None)."""
    if previous is None:  # a first run folds into an empty table: one formula serves both
        previous = new.sparkSession.createDataFrame([], WATERMARKS_SCHEMA)
    before = _previous_rows(previous)
    merged = _merged(before, _folded_events(new, before))
    return merged.select(
        *[F.col(f.name).cast(f.dataType).alias(f.name) for f in WATERMARKS_SCHEMA.fields]
    )


def _previous_rows(previous: DataFrame) -> DataFrame:
    """The watermarks rows with their columns named ``old_...``."""
    return previous.select(
        "topic",
        "partition",
        F.col("resolved_ts").alias("old_ts"),
        F.col("offset").alias("old_offset"),
        F.col("events").alias("old_events"),
        F.col("regressions").alias("old_regressions"),
        F.col("last_regression_ts").alias("old_regression_ts"),
        F.col("last_regression_offset").alias("old_regression_offset"),
        F.col("bronze_batch").alias("old_batch"),
    )


def _folded_events(new: DataFrame, before: DataFrame) -> DataFrame:
    """Per partition, the new events folded (``new_...``): their highest TS and its offset,
    their count, their regressions against the running watermark, the latest batch."""
    arrival = Window.partitionBy("topic", "partition").orderBy(*ARRIVAL)
    earlier = arrival.rowsBetween(Window.unboundedPreceding, -1)
    events = new.select("topic", "partition", "ts", "offset", "index", "bronze_batch").join(
        before.select("topic", "partition", "old_ts"), ["topic", "partition"], "left"
    )
    # The partition's watermark just before each event: the previous run's, or a higher earlier
    # event of this run.
    running = F.greatest(F.col("old_ts"), F.max("ts").over(earlier))
    events = events.withColumn("regression", F.coalesce(F.col("ts") < running, F.lit(False)))
    last_regression = F.max_by(
        F.struct(F.col("ts"), F.col("offset")),
        F.when(F.col("regression"), F.struct("bronze_batch", "offset", "index")),
    )
    return events.groupBy("topic", "partition").agg(
        F.max("ts").alias("new_ts"),
        # The first event (in arrival order) that reached the partition's new maximum.
        F.min_by("offset", F.struct(-F.col("ts"), "bronze_batch", "offset", "index")).alias(
            "new_offset"
        ),
        F.count("*").alias("new_events"),
        F.sum(F.col("regression").cast("long")).alias("new_regressions"),
        last_regression.alias("new_last_regression"),
        F.max("bronze_batch").alias("new_batch"),
    )


def _merged(before: DataFrame, folded: DataFrame) -> DataFrame:
    """The previous rows and the folded events as watermarks rows: a partition's TS and offset
    move only when its new events rose above the old TS; counts add up."""
    joined = before.join(folded, ["topic", "partition"], "full_outer")
    rose = F.col("new_ts").isNotNull() & (
        F.col("old_ts").isNull() | (F.col("new_ts") > F.col("old_ts"))
    )
    return joined.select(
        "topic",
        "partition",
        F.when(rose, F.col("new_ts")).otherwise(F.col("old_ts")).alias("resolved_ts"),
        F.when(rose, F.col("new_offset")).otherwise(F.col("old_offset")).alias("offset"),
        (F.coalesce("old_events", F.lit(0)) + F.coalesce("new_events", F.lit(0))).alias("events"),
        (F.coalesce("old_regressions", F.lit(0)) + F.coalesce("new_regressions", F.lit(0))).alias(
            "regressions"
        ),
        F.coalesce("new_last_regression.ts", "old_regression_ts").alias("last_regression_ts"),
        F.coalesce("new_last_regression.offset", "old_regression_offset").alias(
            "last_regression_offset"
        ),
        F.greatest(F.col("old_batch"), F.col("new_batch")).alias("bronze_batch"),
    )


# Up to this many new resolved events are folded on the driver (delta-rs and one loop): a run's
# are usually tens of thousands (44k for a million row events), and the two Spark jobs of
# ``fold_resolved`` cost seconds, most of the stage. A backfill with more is folded by Spark.
DRIVER_FOLD_LIMIT = 2_000_000
_EVENT_COLUMNS = ["topic", "partition", "ts", "offset", "index", "bronze_batch"]


def fold_resolved_rows(
    new: pa.Table, previous: dict[tuple[str, int], dict]
) -> dict[tuple[str, int], dict]:
    """``fold_resolved`` on the driver: the watermarks rows (by topic and partition) after
    folding ``new`` resolved events (topic, partition, ts, offset, index, bronze_batch) into
    ``previous``, one event at a time in arrival order."""
    arrival = [(name, "ascending") for name in ("topic", "partition", *ARRIVAL)]
    ordered = new.select(_EVENT_COLUMNS).sort_by(arrival).to_pydict()
    rows = {key: dict(row) for key, row in previous.items()}
    events = zip(*(ordered[name] for name in _EVENT_COLUMNS), strict=True)
    for topic, partition, ts, offset, _index, batch in events:
        row = rows.get((topic, partition))
        if row is None:
            row = rows[(topic, partition)] = _new_partition(topic, partition)
        high = row["resolved_ts"]
        if high is not None and ts < high:
            row["regressions"] += 1
            row["last_regression_ts"], row["last_regression_offset"] = ts, offset
        elif high is None or ts > high:  # the first event to reach a new high gives the offset
            row["resolved_ts"], row["offset"] = ts, offset
        row["events"] += 1
        row["bronze_batch"] = (
            batch if row["bronze_batch"] is None else max(row["bronze_batch"], batch)
        )
    return rows


def _new_partition(topic: str, partition: int) -> dict:
    row = dict.fromkeys(WATERMARKS_SCHEMA.names)
    return row | {"topic": topic, "partition": partition, "events": 0, "regressions": 0}


def changefeed_watermarks(
    config: PipelineConfig, partitions: Iterable[tuple[str, int, int]]
) -> dict[str, ChangefeedWatermark]:
    """Per changefeed the global watermark from (topic, partition, resolved_ts) rows."""
    seen: dict[tuple[str, int], int] = {(t, p): ts for t, p, ts in partitions}
    found = {}
    for feed in config.changefeeds.values():
        found[feed.name] = _changefeed_watermark(config, feed, seen)
    return found


def _changefeed_watermark(
    config: PipelineConfig, feed: ChangefeedConfig, seen: dict[tuple[str, int], int]
) -> ChangefeedWatermark:
    if not feed.watermarks:
        return ChangefeedWatermark(feed.name, False, None)
    marks: dict[tuple[str, int], int] = {}
    unseen, unexpected = [], []
    for topic in feed.topics:
        count = config.topic(topic).partitions
        for partition in range(count):
            if (topic, partition) in seen:
                marks[(topic, partition)] = seen[(topic, partition)]
            else:
                marks[(topic, partition)] = 0  # never seen: holds the changefeed at 0
                unseen.append((topic, partition))
        # A partition beyond the configured count still counts (the config may be stale).
        for (t, p), ts in seen.items():
            if t == topic and p >= count:
                marks[(t, p)] = ts
                unexpected.append((t, p))
    watermark = min(marks.values())
    holding = tuple(sorted(key for key, ts in marks.items() if ts == watermark))
    return ChangefeedWatermark(
        feed.name, True, watermark, holding, tuple(sorted(unseen)), tuple(sorted(unexpected))
    )


def read_watermarks(layout: LakeLayout) -> list[tuple[str, int, int]]:
    """(topic, partition, resolved_ts) of every partition in the watermarks table."""
    if not delta_table_exists(layout.watermarks):
        return []
    # One row per Kafka partition: delta-rs reads it in milliseconds, a Spark job takes seconds.
    columns = ["topic", "partition", "resolved_ts"]
    rows = open_table(layout.watermarks).to_pyarrow_table(columns=columns).to_pydict()
    return list(zip(*(rows[name] for name in columns), strict=True))


def column_max(path, column: str) -> int | None:
    """The highest value of an integer column from the table's file statistics (or partition
    values): no data is read. None for a missing or empty table."""
    return table_column_max(open_table(path), column) if delta_table_exists(path) else None


def table_column_max(table: Table, column: str) -> int | None:
    """``column_max`` of a table already open."""
    actions = file_actions(table)
    if not actions.num_rows:
        return None
    for name in (f"partition.{column}", f"max.{column}"):
        if name in actions.column_names:
            return pc.max(pc.cast(actions.column(name), pa.int64())).as_py()
    raise ValueError(f"{table.table_uri} records no statistics for {column}")


def _folded(
    spark: SparkSession,
    layout: LakeLayout,
    table: Table,
    cursor: int,
    before: dict[tuple[str, int], dict],
) -> dict[tuple[str, int], dict]:
    """The watermarks rows after the resolved events (``table``) of the bronze batches above
    ``cursor``: folded on the driver when there are at most DRIVER_FOLD_LIMIT of them, else
    by Spark."""
    if rows_in_partitions_above(table, "bronze_batch", cursor) <= DRIVER_FOLD_LIMIT:
        new = read_on_driver(table, _EVENT_COLUMNS, pc.field("bronze_batch") > cursor)
        return fold_resolved_rows(new, before)
    previous = read_delta(spark, layout.watermarks) if before else None
    new = read_table(spark, table).where(F.col("bronze_batch") > cursor)
    return {(r.topic, r.partition): r.asDict() for r in fold_resolved(new, previous).collect()}


def watermark(spark: SparkSession, config: PipelineConfig) -> WatermarkResult:
    """Fold the new resolved events into the watermarks table; report every changefeed's."""
    layout = LakeLayout(config.lake)
    notes: list[str] = []
    before: dict[tuple[str, int], dict] = {}
    if delta_table_exists(layout.watermarks):
        # One row per Kafka partition: read on the driver.
        rows = open_table(layout.watermarks).to_pyarrow_table().to_pylist()
        before = {(row["topic"], row["partition"]): row for row in rows}
    cursor = max((row["bronze_batch"] for row in before.values()), default=-1)
    after = before
    committed, version = False, None
    resolved = open_table(layout.resolved) if delta_table_exists(layout.resolved) else None
    if resolved is None:
        notes.append(f"no resolved events yet ({layout.resolved} does not exist)")
    elif (latest := table_column_max(resolved, "bronze_batch")) is not None and latest > cursor:
        after = _folded(spark, layout, resolved, cursor, before)
        batch = max(row["bronze_batch"] for row in after.values())
        if batch > cursor:
            # One row per Kafka partition: written from the driver.
            folded = pa.Table.from_pylist(list(after.values()), schema=WATERMARKS_ARROW)
            result = write_arrow(
                folded, layout.watermarks, mode="overwrite", app_id=APP_ID, version=int(batch)
            )
            committed, version = result.committed, result.version
    if version is None and delta_table_exists(layout.watermarks):
        version = open_table(layout.watermarks).version()

    def total(rows: dict, name: str) -> int:
        return sum(row[name] for row in rows.values())

    advanced = sum(
        1
        for key, row in after.items()
        if key not in before or row["resolved_ts"] > before[key]["resolved_ts"]
    )
    topics = {topic for topic, _ in after}
    unknown = tuple(sorted(topic for topic in topics if topic not in config.topics))
    if unknown:
        notes.append(f"resolved events of topics not in the config: {', '.join(unknown)}")
    marks = [(t, p, row["resolved_ts"]) for (t, p), row in after.items()]
    return WatermarkResult(
        resolved_read=total(after, "events") - total(before, "events"),
        partitions=len(after),
        advanced=advanced,
        regressions=total(after, "regressions") - total(before, "regressions"),
        committed=committed,
        version=version,
        changefeeds=tuple(changefeed_watermarks(config, marks).values()),
        unknown_topics=unknown,
        notes=tuple(notes),
    )
