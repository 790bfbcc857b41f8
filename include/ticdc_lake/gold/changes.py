"""A compaction run's input: the DDL records and the reduced change set it reads from silver.

Silver is partitioned by bronze batch, so a run reads only the batches after the settled ones
(partition pruning), and of those only changes above the applied TS (Parquet statistics).
"""

from __future__ import annotations

import functools
import itertools
import shutil
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ticdc_lake.delta import (
    RowGroups,
    delta_table_exists,
    open_table,
    read_delta,
    rows_in_partitions_above,
)
from ticdc_lake.engines import pure
from ticdc_lake.gold import reduce_arrow
from ticdc_lake.gold.catalog import TableName
from ticdc_lake.gold.feed import FeedPlan
from ticdc_lake.gold.plan import DdlRecord, Timeline, unique_records
from ticdc_lake.gold.reduce import (
    key_actions,
    last_per_key,
    with_folds,
    with_order_ts,
    with_segment,
    with_selection,
)
from ticdc_lake.gold.reduce_arrow import SegmentKey
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.quarantine import (
    COORDINATES,
    quarantined_coordinates,
    quarantined_table,
)

# A run reading more changes than this keeps its change set in Spark: a segment of more is
# typed by the executors and loaded into an empty gold table, or merged by delta-spark; smaller
# ones are brought to the driver (for merge_delta) one at a time. Below it, one collect serves
# the whole run.
COLLECT_LIMIT = 200_000
# A large run's reduced change set is written under layout.scratch("compact", changefeed) for
# the run, in one directory per SPILL_BUCKET (a hash of table and segment).
SPILL_BUCKET = "segment_bucket"
REDUCED_COLUMNS = tuple(reduce_arrow.REDUCED_SCHEMA.names)
# A run of up to this many silver changes (by the log's file statistics) is counted on the
# driver: delta-rs reads five narrow columns and pyarrow groups them, about a second for a
# million changes, where Spark's counts pass took 3-10 s as a compaction's first Spark job.
DRIVER_COUNT_LIMIT = 2_000_000
# A run of up to this many silver changes is reduced on the driver (gold/reduce_arrow.py),
# where Spark's reduce job took 20-45 s for a million realistic changes: the run's narrow
# columns (MARKED_COLUMNS, ~100 bytes a change) are read at once, its images in chunks of
# about DRIVER_CHUNK_ROWS changes (~100 bytes per image column while reduced), DRIVER_THREADS
# chunks at once (a third less time than one by one on 2 cores; in chunks of 125k rather than
# 250k, the threads' last chunks end closer together: 1M realistic changes 7.0-8.2 s against
# 7.5-8.3 s, and 250 MB less held). The winners are held together; when they hold more than
# DRIVER_REDUCE_ELEMENTS image columns (a wide table's backfill), Spark reduces the run
# instead.
DRIVER_REDUCE_LIMIT = 8_000_000
DRIVER_CHUNK_ROWS = 125_000
DRIVER_THREADS = 2
DRIVER_REDUCE_ELEMENTS = 30_000_000
# The chunks' winners are ranked together (dropping those a later chunk's beat) once the
# unranked ones hold as many columns as the ranked and at least this many (image columns, and
# one per winner): a bound on what is held. A realistic 1M run's chunks beat 3-4% of the
# winners before them; ranked from 125k winners on, it ranked twice before the last, for
# 0.3 s more compaction.
RANK_ELEMENTS = 10_000_000
# Names of image columns, read dictionary-encoded: ~20% less time reading a chunk, and coded
# by their dictionaries rather than each hashed.
IMAGE_NAMES = ("columns.list.element.name", "old_columns.list.element.name")
CHUNK_COLUMNS = (
    "commit_ts", "schema", "table", "op", "handle_key", "handle_key_only", "columns",
    "old_columns", "topic", "partition", "offset", "index",
)  # fmt: skip


@dataclass(frozen=True)
class TableCounts:
    """A table's changes in a run."""

    read: int = 0  # selected for this run, replays included
    changes: int = 0  # distinct events among them
    pending: int = 0  # changes without a commit TS left for a later run
    max_ts: int | None = None  # the largest order TS selected

    @property
    def duplicates(self) -> int:
        return self.read - self.changes


@dataclass(frozen=True)
class Batches:
    """The bronze batches a run read."""

    latest: int | None = None  # the latest one
    pending: int | None = None  # the first holding a change left for a later run


class Reduced:
    """A run's reduced change set by segment: on the driver (small runs), or spilled once to
    Parquet files bucketed by segment (large runs), from which each segment is read alone.

    Spilling costs one Spark job however many segments (DDL barriers) the run has; reading
    each segment from a cached DataFrame would scan the whole change set once per segment.
    """

    def __init__(self, table: pa.Table | None = None, spill: Path | None = None):
        self.spill = spill
        self.dataset: ds.Dataset | None = None
        self.frame_all: DataFrame | None = None
        self.segments: dict[SegmentKey, pa.Table] = {}
        self.sizes: dict[SegmentKey, int] = {}
        self.buckets: dict[SegmentKey, int] = {}
        if table is not None and table.num_rows:
            # One sort, then each segment is a slice (a take per segment costs a pass each).
            order = [("schema", "ascending"), ("table", "ascending"), ("segment", "ascending")]
            table = table.sort_by(order).combine_chunks()
            columns = table.select(["schema", "table", "segment"]).to_pydict()
            triples = zip(columns["schema"], columns["table"], columns["segment"], strict=True)
            start = 0
            for key, run in itertools.groupby(triples):
                size = sum(1 for _ in run)
                self.segments[key] = table.slice(start, size)
                self.sizes[key] = size
                start += size
        self.keys = set(self.sizes)

    @classmethod
    def of_segments(cls, segments: dict[SegmentKey, pa.Table]) -> Reduced:
        """A change set already split by segment (gold/reduce_arrow.py)."""
        reduced = cls()
        reduced.segments = {key: rows for key, rows in segments.items() if rows.num_rows}
        reduced.sizes = {key: rows.num_rows for key, rows in reduced.segments.items()}
        reduced.keys = set(reduced.sizes)
        return reduced

    @classmethod
    def empty(cls) -> Reduced:
        return cls(pa.table({name: [] for name in REDUCED_COLUMNS}))

    @classmethod
    def spilled(cls, frame: DataFrame, directory: Path) -> Reduced:
        """Write ``frame`` under ``directory``, one Parquet directory per SPILL_BUCKET (a
        column of ``frame``: a hash of schema, table and segment)."""
        shutil.rmtree(directory, ignore_errors=True)
        frame.write.partitionBy(SPILL_BUCKET).parquet(str(directory))
        reduced = cls(spill=directory)
        if not any(directory.glob(f"{SPILL_BUCKET}=*")):
            return reduced  # nothing to apply
        # Listed once: a run may read a thousand segments from it.
        dataset = reduced.dataset = ds.dataset(directory, format="parquet", partitioning="hive")
        reduced.frame_all = frame.sparkSession.read.parquet(str(directory))
        columns = ["schema", "table", "segment", SPILL_BUCKET]
        groups = (
            dataset.to_table(columns=columns)
            .group_by(columns, use_threads=False)
            .aggregate([([], "count_all")])
            .to_pylist()
        )
        for group in groups:
            key = (group["schema"], group["table"], group["segment"])
            reduced.sizes[key] = group["count_all"]
            reduced.buckets[key] = group[SPILL_BUCKET]
        reduced.keys = set(reduced.sizes)
        return reduced

    def size(self, key: SegmentKey) -> int:
        return self.sizes.get(key, 0)

    def large(self, key: SegmentKey) -> bool:
        """Whether the segment is too large to bring to the driver at once (a spilled one:
        one reduced on the driver is there already)."""
        return self.dataset is not None and self.size(key) > COLLECT_LIMIT

    def _where(self, key: SegmentKey, column) -> Any:
        schema, table, segment = key
        return (
            (column(SPILL_BUCKET) == self.buckets[key])
            & (column("schema") == schema)
            & (column("table") == table)
            & (column("segment") == segment)
        )

    def frame(self, key: SegmentKey) -> DataFrame:
        """A spilled segment as a DataFrame (a large one, for the executors to load)."""
        assert self.frame_all is not None, "only a spilled segment is read by Spark"
        return self.frame_all.where(self._where(key, F.col)).drop(SPILL_BUCKET)

    def rows(self, key: SegmentKey) -> pa.Table:
        if self.dataset is None:
            return self.segments[key]
        rows = self.dataset.to_table(filter=self._where(key, pc.field))
        return rows.drop_columns([SPILL_BUCKET])

    def release(self) -> None:
        if self.spill is not None:
            shutil.rmtree(self.spill, ignore_errors=True)


def read_ddl_records(layout: LakeLayout, plan: FeedPlan) -> list[DdlRecord]:
    """The changefeed's DDL log, each DDL once. Read on the driver with delta-rs: the log is
    small, and a Spark job for it costs a second in a run's first use of the JVM."""
    if not delta_table_exists(layout.ddl):
        return []
    log = open_table(layout.ddl).to_pyarrow_table(columns=list(DdlRecord.__dataclass_fields__))
    of_feed = log.filter(pc.is_in(log.column("topic"), pa.array(sorted(plan.topics), pa.string())))
    return unique_records(of_feed.to_pylist())


def reduce_changes(
    spark: SparkSession, layout: LakeLayout, plan: FeedPlan, timeline: Timeline
) -> tuple[Reduced, dict[TableName, TableCounts], Batches]:
    """The reduced change set (REDUCED_COLUMNS), per-table counts and batch bounds."""
    if not delta_table_exists(layout.changes):
        return Reduced.empty(), {}, Batches()
    splits, points = {}, {}
    for name in {n for b in timeline.barriers for n in b.tables}:
        segments = timeline.segments_of(name)
        splits[(name.schema, name.name)] = [segment.end for segment in segments[:-1]]
        for segment in segments:
            if segment.folds:
                points[(name.schema, name.name, segment.number)] = segment.points(name, plan.zones)
    handles = _fallback_handles(timeline)
    # Spark's reduce is the reference (ticdc_lake.engines): a pure run reduces and counts there.
    on_driver = None if pure() else reduce_on_driver(layout, plan, splits, points, handles)
    if on_driver is not None:
        return on_driver
    selected = selected_changes(spark, layout, plan)
    if selected is None:
        return Reduced.empty(), {}, Batches()
    # Not cached: Spark's counts (a large run, or changes without TSs) read only narrow
    # columns (Parquet column pruning), and caching a large run's images would not fit.
    counted = None if pure() else count_on_driver(layout, plan)
    counts, batches = counted or count_in_spark(selected, plan)
    applying = with_segment(selected.where(F.col("selected")), splits)
    applying = with_folds(applying, points)
    actions = key_actions(applying, handles)
    # Most runs hold no replay (TiCDC replays after a restart): then nothing is dropped as one.
    replays = any(count.duplicates for count in counts.values())
    if sum(count.read for count in counts.values()) <= COLLECT_LIMIT:
        reduced = last_per_key(actions, replays=replays).select(*REDUCED_COLUMNS)
        return Reduced(reduced.toArrow()), counts, batches
    # The spill's bucket leads the reduce's windows: their output is then sorted by it, and
    # the partitioned write needs neither a shuffle nor a sort of its own.
    bucketed = actions.withColumn(SPILL_BUCKET, F.xxhash64("schema", "table", "segment"))
    reduced = last_per_key(bucketed, ahead=[SPILL_BUCKET], replays=replays)
    reduced = reduced.select(*REDUCED_COLUMNS, SPILL_BUCKET)
    spill = layout.scratch("compact", plan.name)
    return Reduced.spilled(reduced, spill), counts, batches


def reduce_on_driver(
    layout: LakeLayout,
    plan: FeedPlan,
    splits: dict[tuple[str, str], list[int | None]],
    points: dict[SegmentKey, list],
    handles: dict[tuple[str, str], tuple[str, ...]],
) -> tuple[Reduced, dict[TableName, TableCounts], Batches] | None:
    """What the rest of ``reduce_changes`` does in Spark, on the driver (gold/reduce_arrow.py),
    for a run of up to DRIVER_REDUCE_LIMIT changes, all with a commit TS, whose winners hold
    up to DRIVER_REDUCE_ELEMENTS image columns; None otherwise."""
    groups = _unsettled_row_groups(layout, plan, DRIVER_REDUCE_LIMIT)
    if groups is None:
        return None
    narrow = groups.read_all(MARKED_COLUMNS)
    kept = _unsettled(groups, narrow, quarantined_table(layout))
    marked = marked_on_driver(rows_at(narrow, kept), plan)
    read = marked.filter(marked.column("read"))
    # Counting copies of an event and dropping them both group by its id: encoded once.
    events = reduce_arrow.event_codes(read.column("event_id"))
    counts, batches = counts_of(marked, events)
    chosen = kept[read.column("row").to_numpy()]
    # What first_copies and reset_discards read: no event ids copied.
    picked = rows_at(narrow.select(["schema", "table", "commit_ts", *COORDINATES]), chosen)
    if picked.column("commit_ts").null_count:
        return None  # ordered by the TSs around them: Spark's with_order_ts
    if any(count.duplicates for count in counts.values()):
        firsts = reduce_arrow.first_copies(picked, events)
        chosen, picked = chosen[firsts], picked.take(pa.array(firsts))
    # A folded TRUNCATE discards what came before it: those images need not be read.
    discarded = reduce_arrow.reset_discards(picked, splits, points)
    if discarded is None:
        return None
    wanted = np.zeros(narrow.num_rows, bool)
    wanted[chosen[~discarded]] = True
    del narrow, marked, picked
    winners = _ChunkWinners()

    def reduce_chunk(chunk: list[ds.ParquetFileFragment], selected: np.ndarray):
        rows = groups.read(chunk, list(CHUNK_COLUMNS), IMAGE_NAMES)
        if rows.num_rows != len(selected):
            return None  # a row group holds other rows than its footer says: let Spark read
        return reduce_arrow.reduce_chunk(
            rows, splits, points, handles, replays=False, selected=selected
        )

    for found in in_parallel(reduce_chunk, _chunks(groups, wanted)):
        if found is None or not winners.add(found):
            return None
    segments = winners.segments()
    return None if segments is None else (Reduced.of_segments(segments), counts, batches)


def rows_at(rows: pa.Table, numbers: np.ndarray) -> pa.Table:
    """``rows.take(numbers)``, without the copy of every column when ``numbers`` are all the
    rows in order (as in most runs: nothing quarantined, settled or replayed)."""
    if len(numbers) == rows.num_rows and np.array_equal(numbers, np.arange(rows.num_rows)):
        return rows
    return rows.take(pa.array(numbers))


def in_parallel(work, arguments: Iterator[tuple], threads: int = DRIVER_THREADS) -> Iterator:
    """``work(*a)`` of each of ``arguments``, in their order, ``threads`` at once: pyarrow
    and numpy let go of the GIL while they work. One more waits its turn, so a thread that
    finishes before the oldest starts it at once. Stopping early drops the rest."""
    with ThreadPoolExecutor(threads) as pool:
        running: deque[Future] = deque()
        try:
            for argument in arguments:
                running.append(pool.submit(work, *argument))
                if len(running) > threads:
                    yield running.popleft().result()
            while running:
                yield running.popleft().result()
        finally:
            for future in running:
                future.cancel()


def _chunks(
    groups: RowGroups, wanted: np.ndarray
) -> Iterator[tuple[list[ds.ParquetFileFragment], np.ndarray]]:
    """The row groups holding ``wanted`` rows (of all ``groups``' rows), in chunks of about
    DRIVER_CHUNK_ROWS rows, each with its rows' part of ``wanted``."""
    chunk, parts, held, start = [], [], 0, 0
    for group, size in zip(groups.groups, groups.sizes, strict=True):
        part, start = wanted[start : start + size], start + size
        if not part.any():
            continue
        chunk.append(group)
        parts.append(part)
        held += size
        if held >= DRIVER_CHUNK_ROWS:
            yield chunk, np.concatenate(parts)
            chunk, parts, held = [], [], 0
    if chunk:
        yield chunk, np.concatenate(parts)


class _ChunkWinners:
    """Chunks' winners, each chunk's less those a later chunk's beat: ranked together
    (``reduce_arrow.latest``, over their keys and places, not their images) whenever the
    unranked ones hold as many columns (image columns, and one per winner) as the ranked and
    RANK_ELEMENTS, and a chunk's copied without the beaten ones once they are half of it. So
    what is held stays under twice the run's winners' columns or RANK_ELEMENTS and a chunk's,
    whichever is more, and the images are copied a few times at most."""

    def __init__(self):
        self.parts: list[pa.Table] = []
        self.alive: list[np.ndarray] = []
        self.widths: list[np.ndarray] = []  # per winner, its image's columns
        # What is held, as columns: each winner's image columns and one for its key and place
        # (a delete's image may have none).
        self.ranked = self.unranked = 0

    def add(self, found: pa.Table) -> bool:
        """Hold ``found``; False when the winners ranked so far hold more than
        DRIVER_REDUCE_ELEMENTS image columns."""
        self.parts.append(found)
        self.alive.append(np.ones(found.num_rows, bool))
        self.widths.append(_widths(found))
        self.unranked += int(self.widths[-1].sum()) + found.num_rows
        if self.unranked < max(self.ranked, RANK_ELEMENTS):
            return True
        return self._rank()

    def segments(self) -> dict[SegmentKey, pa.Table] | None:
        """The run's winners (REDUCED_SCHEMA) by segment; None when they hold more than
        DRIVER_REDUCE_ELEMENTS image columns."""
        if self.unranked and not self._rank():
            return None
        # Each chunk's survivors copied on its own thread (4M realistic changes: 1.9 s on the
        # main thread alone).
        split = in_parallel(
            lambda part, alive: reduce_arrow.by_segment(_alive_rows(part, alive)),
            zip(self.parts, self.alive, strict=True),
        )
        found: dict[SegmentKey, list[pa.Table]] = {}
        for segments in split:
            for key, rows in segments.items():
                found.setdefault(key, []).append(rows)
        return {key: pa.concat_tables(parts) for key, parts in found.items()}

    def _rank(self) -> bool:
        if len(self.parts) > 1:
            ranks = pa.concat_tables(
                _alive_rows(part.select(reduce_arrow.RANK_COLUMNS), alive)
                for part, alive in zip(self.parts, self.alive, strict=True)
            )
            won = np.zeros(ranks.num_rows, bool)
            won[_latest(ranks)] = True
            start = 0
            for number, alive in enumerate(self.alive):
                at = np.flatnonzero(alive)
                alive[at] = won[start : start + len(at)]
                start += len(at)
                if alive.sum() * 2 < len(alive):
                    self.parts[number] = self.parts[number].filter(pa.array(alive))
                    self.widths[number] = self.widths[number][alive]
                    self.alive[number] = np.ones(self.parts[number].num_rows, bool)
        held = sum(int(w[a].sum()) for w, a in zip(self.widths, self.alive, strict=True))
        self.ranked = held + sum(int(alive.sum()) for alive in self.alive)
        self.unranked = 0
        return held <= DRIVER_REDUCE_ELEMENTS


def _latest(ranks: pa.Table) -> np.ndarray:
    """``reduce_arrow.latest`` of ``ranks``, a table at a time in parallel: a table's changes
    never outrank another's."""
    tables = reduce_arrow.rows_by_table(ranks).values()
    if len(tables) < 2:
        return reduce_arrow.latest(ranks)
    found = in_parallel(
        lambda rows: rows[reduce_arrow.latest(ranks.take(pa.array(rows)))],
        ((rows,) for rows in tables),
    )
    return np.concatenate(list(found))


def _alive_rows(rows: pa.Table, alive: np.ndarray) -> pa.Table:
    """``rows`` that are ``alive``: no copy when all are."""
    return rows if alive.all() else rows.filter(pa.array(alive))


def _widths(rows: pa.Table) -> np.ndarray:
    return pc.fill_null(pc.list_value_length(rows.column("image")), 0).to_numpy()


def selected_changes(spark: SparkSession, layout: LakeLayout, plan: FeedPlan) -> DataFrame | None:
    """The unsettled changes with their ``order_ts`` and ``selected`` (``with_selection``);
    None when silver holds no changes yet."""
    changes = _unsettled_changes(spark, layout, plan)
    if changes is None:
        return None
    ordered = with_order_ts(changes, _markers(spark, layout, plan) if plan.lacks_ts else None)
    return with_selection(
        ordered,
        spark.createDataFrame(_applied(plan)),
        target_ts=plan.target_ts,
        default_ts=plan.low_ts,
        default_batch=plan.low_batch,
    )


def _of_feed(plan: FeedPlan):
    return F.col("topic").isin(list(plan.topics))


def _unsettled_changes(spark: SparkSession, layout: LakeLayout, plan: FeedPlan) -> DataFrame | None:
    if not delta_table_exists(layout.changes):
        return None
    changes = read_delta(spark, layout.changes).where(_of_feed(plan))
    # Rows a data-quality check quarantined stay out of gold.
    quarantined = quarantined_coordinates(spark, layout)
    if quarantined is not None:
        changes = changes.join(F.broadcast(quarantined), COORDINATES, "left_anti")
    # Bronze batches up to low_batch are settled: every change in them is applied (or was
    # a replay). Silver is partitioned by bronze batch, so Spark reads only later files.
    unsettled = changes.where(F.col("bronze_batch") > plan.low_batch)
    if not plan.consistent or plan.lacks_ts:
        # Changes without a TS need their neighbours, whatever their TSs.
        return unsettled
    # Above the target too: those changes keep their batches unsettled (see count_in_spark).
    return unsettled.where(F.col("commit_ts") > plan.low_ts)


def _markers(spark: SparkSession, layout: LakeLayout, plan: FeedPlan) -> DataFrame | None:
    """Known TSs in the partitions: resolved events and DDLs of the unsettled batches, and
    per partition the largest TS of the settled ones (before them: replays below it are
    told from bounds, ``reduce.with_order_ts``)."""
    frames, settled = [], []
    tables = ((layout.resolved, "ts"), (layout.ddl, "commit_ts"), (layout.changes, "commit_ts"))
    for path, ts in tables:
        if not delta_table_exists(path):
            continue
        rows = read_delta(spark, path).where(_of_feed(plan))
        if path != layout.changes:
            frames.append(
                rows.where(F.col("bronze_batch") > plan.low_batch).select(
                    "topic", "partition", F.col(ts).alias("ts"), "offset", "index"
                )
            )
        settled.append(
            rows.where(F.col("bronze_batch") <= plan.low_batch).select(
                "topic", "partition", F.col(ts).alias("ts")
            )
        )
    if settled and plan.low_batch >= 0:
        floor = functools.reduce(DataFrame.unionByName, settled).groupBy("topic", "partition")
        frames.append(
            floor.agg(F.max("ts").alias("ts"))
            .where(F.col("ts").isNotNull())
            .withColumn("offset", F.lit(-1).cast("long"))
            .withColumn("index", F.lit(-1).cast("int"))
        )
    return functools.reduce(DataFrame.unionByName, frames) if frames else None


def count_in_spark(
    marked: DataFrame, plan: FeedPlan
) -> tuple[dict[TableName, TableCounts], Batches]:
    """Per table: changes read, distinct, left for later; the batch bounds of the run."""
    selected = F.col("selected")
    unsettled = F.lit(False)  # a change this run leaves for a later one
    if plan.consistent:
        unsettled = ~selected & (
            F.col("order_ts").isNull() | (F.col("order_ts") > F.lit(plan.target))
        )
    waiting = F.col("commit_ts").isNull() & unsettled
    rows = (
        marked.groupBy("schema", "table")
        .agg(
            F.sum(selected.cast("long")).alias("read"),
            # Replays: copies of an event (same event_id and order TS) beyond the first.
            F.count_distinct(
                F.when(selected, F.struct("event_id", F.coalesce("order_ts", F.lit(-1))))
            ).alias("changes"),
            F.sum(waiting.cast("long")).alias("pending"),
            F.min(F.when(unsettled, F.col("bronze_batch"))).alias("pending_batch"),
            F.max("bronze_batch").alias("max_batch"),
            F.max(F.when(selected, F.col("order_ts"))).alias("max_ts"),
        )
        .collect()
    )
    counts = {
        TableName(row.schema, row.table): TableCounts(
            read=int(row.read or 0),
            changes=int(row.changes or 0),
            pending=int(row.pending or 0),
            max_ts=row.max_ts,
        )
        for row in rows
    }
    pending = [row.pending_batch for row in rows if row.pending_batch is not None]
    batches = Batches(
        latest=max((row.max_batch for row in rows), default=None),
        pending=min(pending) if pending else None,
    )
    return counts, batches


def count_on_driver(
    layout: LakeLayout, plan: FeedPlan
) -> tuple[dict[TableName, TableCounts], Batches] | None:
    """What ``count_in_spark`` counts of ``selected_changes``, on the driver; None when Spark
    must count: more than DRIVER_COUNT_LIMIT changes, or changes that may lack a commit TS
    (their order TSs come from ``with_order_ts``'s windows)."""
    rows = changes_on_driver(layout, plan, COUNTED_COLUMNS, DRIVER_COUNT_LIMIT)
    return None if rows is None else counts_of(marked_on_driver(rows, plan))


COUNTED_COLUMNS = ("schema", "table", "event_id", "commit_ts", "bronze_batch")
MARKED_COLUMNS = [*COUNTED_COLUMNS, *COORDINATES]


def changes_on_driver(
    layout: LakeLayout, plan: FeedPlan, columns: Sequence[str], limit: int
) -> pa.Table | None:
    """``columns`` of the unsettled changes (``_unsettled_changes``), read by delta-rs; None
    when they may lack a commit TS, or the unsettled batches hold more than ``limit`` rows."""
    groups = _unsettled_row_groups(layout, plan, limit)
    if groups is None:
        return None
    quarantined = quarantined_table(layout)
    needed = [*columns, *_UNSETTLED_BY, *(COORDINATES if quarantined is not None else [])]
    rows = groups.read_all(list(dict.fromkeys(needed)))
    return rows_at(rows, _unsettled(groups, rows, quarantined)).select(list(columns))


_UNSETTLED_BY = ("bronze_batch", "topic", "commit_ts")  # the columns the run's ``where`` names


def _unsettled_row_groups(layout: LakeLayout, plan: FeedPlan, limit: int) -> RowGroups | None:
    """The row groups of ``_unsettled_changes`` for a driver read (``changes_on_driver``)."""
    if plan.lacks_ts:
        return None
    table = open_table(layout.changes)
    if rows_in_partitions_above(table, "bronze_batch", plan.low_batch) > limit:
        return None
    where = (pc.field("bronze_batch") > plan.low_batch) & pc.field("topic").isin(list(plan.topics))
    if plan.consistent:
        where &= pc.field("commit_ts") > plan.low_ts
    return RowGroups.of(table, where)


def _unsettled(groups: RowGroups, rows: pa.Table, quarantined: pa.Table | None) -> np.ndarray:
    """The numbers of the changes ``rows`` (``groups``' rows: _UNSETTLED_BY, and COORDINATES
    if a quarantine exists) that ``_unsettled_changes`` selects: those ``groups.where`` keeps
    and the ``quarantined`` (quarantined_table) do not hold."""
    matching = groups.matching(rows)
    if quarantined is None:
        return matching
    # Joined by row number: an Arrow join would carry (and may not take) the nested images.
    numbered = rows_at(rows.select(COORDINATES), matching)
    numbered = numbered.append_column("_row", pa.array(matching))
    quarantined = quarantined.cast(numbered.select(COORDINATES).schema)
    kept = numbered.join(quarantined, COORDINATES, join_type="left anti").column("_row")
    return np.sort(kept.to_numpy())


def marked_on_driver(rows: pa.Table, plan: FeedPlan) -> pa.Table:
    """``_marked``'s marks of the unsettled changes ``rows`` (COUNTED_COLUMNS at least), with
    each one's row number in ``rows`` (``row``)."""
    numbered = rows.select(list(COUNTED_COLUMNS)).append_column(
        "row", pa.array(np.arange(rows.num_rows))
    )
    return _marked(numbered.join(_applied(plan), ["schema", "table"], join_type="left outer"), plan)


def counts_of(
    marked: pa.Table, events: np.ndarray | None = None
) -> tuple[dict[TableName, TableCounts], Batches]:
    """``count_in_spark``'s counts of the marked changes (``marked_on_driver``); ``events``:
    the read ones' ``event_codes``, if known."""
    per_table = (
        marked.group_by(["schema", "table"], use_threads=False)
        .aggregate(
            [("read", "sum"), ("pending_batch", "min"), ("bronze_batch", "max"), ("max_ts", "max")]
        )
        .to_pylist()
    )
    read = marked.filter(marked.column("read"))
    if events is None:
        events = reduce_arrow.event_codes(read.column("event_id"))
    copies = _copies(read, events)
    counts = {
        TableName(row["schema"], row["table"]): TableCounts(
            read=row["read_sum"] or 0,
            changes=(row["read_sum"] or 0) - copies.get((row["schema"], row["table"]), 0),
            max_ts=row["max_ts_max"],
        )
        for row in per_table
    }
    pending = [
        row["pending_batch_min"] for row in per_table if row["pending_batch_min"] is not None
    ]
    batches = Batches(
        latest=max((row["bronze_batch_max"] for row in per_table), default=None),
        pending=min(pending, default=None),
    )
    return counts, batches


def _copies(read: pa.Table, codes: np.ndarray) -> dict[tuple[str, str], int]:
    """Per table, how many of the changes ``read`` (marked; ``codes``: their event ids'
    ``event_codes``) are a copy of an event (same event_id and order TS) beyond its first.
    Only changes whose id is not unique can be, so they alone are grouped: grouping all by id
    took seconds for a few million."""
    copied = read.take(pa.array(reduce_arrow.repeated(codes)))
    tables = ["schema", "table"]
    rows = copied.group_by(tables, use_threads=False).aggregate([([], "count_all")])
    events = copied.group_by([*tables, "event_id", "event_ts"], use_threads=False).aggregate([])
    distinct = events.group_by(tables, use_threads=False).aggregate([([], "count_all")])
    found = {(row["schema"], row["table"]): row["count_all"] for row in rows.to_pylist()}
    for row in distinct.to_pylist():
        found[(row["schema"], row["table"])] -= row["count_all"]
    return found


_APPLIED = pa.schema(
    [("schema", pa.string()), ("table", pa.string()), ("applied_ts", pa.int64()),
     ("applied_batch", pa.int64())]
)  # fmt: skip


def _applied(plan: FeedPlan) -> pa.Table:
    """Per table the TS and bronze batch applied before the run (none when it rebuilds)."""
    states = {} if plan.rebuild else plan.prior
    columns = {
        "schema": [name.schema for name in states],
        "table": [name.name for name in states],
        "applied_ts": [state.applied_ts for state in states.values()],
        "applied_batch": [state.applied_batch for state in states.values()],
    }
    return pa.table(columns, schema=_APPLIED)


def _marked(rows: pa.Table, plan: FeedPlan) -> pa.Table:
    """``with_selection``'s and ``count_in_spark``'s marks in pyarrow, on changes joined with
    ``_applied``: ``read`` (selected), ``pending_batch`` (of a change above the target),
    ``max_ts`` (of a selected one), ``event_ts``. The order TS is the commit TS."""
    order_ts, batch = rows.column("commit_ts"), rows.column("bronze_batch")
    if plan.target_ts is None:
        applied_batch = pc.fill_null(rows.column("applied_batch"), plan.low_batch)
        selected = pc.greater(batch, applied_batch)
        unsettled = pa.repeat(False, rows.num_rows)  # an inconsistent run leaves none
    else:
        # Every change read has a commit TS: the read kept those above low_ts. So none waits
        # for one (count_in_spark's ``pending``).
        applied_ts = pc.fill_null(rows.column("applied_ts"), plan.low_ts)
        target = plan.target_ts
        selected = pc.and_(pc.greater(order_ts, applied_ts), pc.less_equal(order_ts, target))
        unsettled = pc.greater(order_ts, target)
    none = pa.scalar(None, pa.int64())
    return pa.table(
        {
            "schema": rows.column("schema"),
            "table": rows.column("table"),
            "event_id": rows.column("event_id"),
            "event_ts": pc.fill_null(order_ts, -1),
            "bronze_batch": batch,
            "read": selected,
            "pending_batch": pc.if_else(unsettled, batch, none),
            "max_ts": pc.if_else(selected, order_ts, none),
            "row": rows.column("row"),
        }
    )


def _fallback_handles(timeline: Timeline) -> dict[tuple[str, str], tuple[str, ...]]:
    """Per table the handle the DDL log implies (the latest catalog that knows it)."""
    infos = timeline.latest_infos(lambda info: bool(info.handle))
    return {(name.schema, name.name): info.handle for name, info in infos.items()}
