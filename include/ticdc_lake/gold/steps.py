"""A compaction run's steps on gold, in commit order.

Each table's segments (its changes, with the DDLs folded into them) and the barriers that
split tables are carried out in the order of their TSs. Every commit carries an app
transaction whose version only grows along the change log (``Versions``), so a rerun finds
each step done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ticdc_lake.delta import spark_can_merge
from ticdc_lake.gold.barrier_effects import carry_out
from ticdc_lake.gold.catalog import TableInfo, TableName
from ticdc_lake.gold.changes import (
    DRIVER_THREADS,
    Batches,
    Reduced,
    SegmentKey,
    in_parallel,
)
from ticdc_lake.gold.exceptions import GoldError
from ticdc_lake.gold.feed import FeedPlan
from ticdc_lake.gold.plan import Barrier, Segment, Timeline
from ticdc_lake.gold.shape import Shape, WidthLimit, combined_effects, folded_shape
from ticdc_lake.gold.state import TableState
from ticdc_lake.gold.tables import (
    GoldDDL,
    GoldTable,
    SegmentPlan,
    SegmentStats,
    TypedSegment,
    frame_specs,
    plan_segment,
    type_segment,
    typed_changes,
    typed_frame,
    zero_dates,
)
from ticdc_lake.runtime.spark_columns import named_column

DDL = ":ddl"  # the app id of a table's DDL effects: its merges' app id + DDL
# Room for this many DDL effects on one table at one commit TS (versions are TS x 8 + n; a TSO
# x 8 still fits a long until the year 2100).
EFFECTS_PER_DDL = 8
# Inconsistent mode numbers its steps from (bronze batch + 1) x STEPS_PER_RUN.
STEPS_PER_RUN = 1 << 16
# A small segment's merge is mostly delta-rs's cost per merge (~20 ms of which little holds the
# GIL): 600 tables of 250 changes each took 14.1 s with four at once against 18 s with two.
SMALL_SEGMENT_ROWS = 10_000
SMALL_SEGMENT_THREADS = 4
# Rows per file of a gold table loaded by the executors (~10-40 MB of Parquet).
ROWS_PER_FILE = 250_000
_INFINITY = float("inf")


class Steps:
    """A run's steps on gold, in commit order: each table's segments (its changes with the DDLs
    folded into them) and the barriers that split tables. A failing table is marked failed in
    ``failures`` and skipped from then on; the others go on."""

    def __init__(self, zones: dict[str, str], failures: dict[str, str], max_columns: int):
        self.zones = zones  # topic -> the time zone its TIMESTAMP text is read in
        self.failures = failures
        self.width = WidthLimit(max_columns)  # limits.max_table_columns
        self.writer = SegmentWriter(zones, self.width)

    def execute(
        self,
        timeline: Timeline,
        reduced: Reduced,
        work: dict[TableName, TableWork],
        versions: Versions,
    ) -> None:
        for batch in _batches(_in_commit_order(timeline, reduced, work)):
            if isinstance(batch[0][1], Barrier):
                ((number, barrier),) = batch
                self._ddl(timeline, barrier, work, versions, number)
            else:
                self._segments(batch, reduced, versions)

    def _segments(
        self, batch: list[tuple[int, SegmentStep]], reduced: Reduced, versions: Versions
    ) -> None:
        """A batch of segments between two barriers, each on a table of its own."""
        # Each on its own table (and Delta table): a few at once, as pyarrow and delta-rs
        # let go of the GIL; small merges more at once, as their memory allows (a folded
        # DDL may rewrite a table of up to DRIVER_REWRITE_ROWS on the driver).
        small, others = [], []
        for number, step in batch:
            merge_only = reduced.size(step.key) <= SMALL_SEGMENT_ROWS and not step.segment.folds
            (small if merge_only else others).append((number, step))
        for part, threads in ((others, DRIVER_THREADS), (small, SMALL_SEGMENT_THREADS)):
            for _ in in_parallel(
                lambda number, step: self._segment(step, reduced, versions, number),
                part,
                threads,
            ):
                pass

    def _segment(
        self, step: SegmentStep, reduced: Reduced, versions: Versions, number: int
    ) -> None:
        """A segment's folded DDLs and changes: at most a reshape of gold's columns, then one
        merge (after a TRUNCATE: one commit replacing the rows)."""
        item, segment = step.item, step.segment
        if item.failed:
            return
        info = segment.catalog.info(item.name)
        version = versions.merge(segment.end, number)
        try:
            shape = folded_shape(item, segment, self.zones)
            self.width.check(shape.schema)
            if step.key not in reduced.keys and shape.reset:
                # A DDL's version: the merge version (end TS - 1) can be the last run's target
                # when no change lies between, and would be taken as done.
                emptied = _ddl_version(versions, item, segment, number)
                item.commits += _emptied(item, shape.schema, emptied)
                return
            if shape.changed and not shape.reset:
                reshape = _ddl_version(versions, item, segment, number)
                item.commits += item.ddl_gold().reshape(
                    shape.schema, reshape, shape.values, shape.sources
                )
            if step.key not in reduced.keys:
                return
            stats = self.writer.apply(item, info, shape, reduced, step.key, version)
        except Exception as exc:  # one table's failure: recorded, the others go on
            self._fail(item, failure_text(exc))
            return
        item.count(stats)

    def _fail(self, item: TableWork, reason: str) -> None:
        item.fail(reason)
        self.failures[str(item.name)] = reason

    def _ddl(
        self,
        timeline: Timeline,
        barrier: Barrier,
        work: dict[TableName, TableWork],
        versions: Versions,
        number: int,
    ) -> None:
        """A barrier's effects on the tables it splits (folded ones: ``_segment``)."""
        for effect in combined_effects(barrier.effects):
            item = work.get(effect.table)
            if item is None or item.failed or not timeline.splits(barrier, effect.table):
                continue
            version = versions.ddl(effect.table, barrier.ts, number)
            if version is None:
                self._fail(item, f"{barrier.ddl.record.describe()} has more than "
                                 f"{EFFECTS_PER_DDL} effects on the table")  # fmt: skip
                continue
            try:
                carry_out(effect, item, work, barrier, version, self.zones, self.width)
            except Exception as exc:  # one table's failure: recorded, the others go on
                self._fail(item, f"{barrier.ddl.record.describe()}: {failure_text(exc)}")


class SegmentWriter:
    """A segment's reduced changes into its gold table: typed and merged on the driver, or a
    large one typed, and written or merged, by the executors."""

    def __init__(self, zones: dict[str, str], width: WidthLimit):
        self.zones = zones  # topic -> the time zone its TIMESTAMP text is read in
        self.width = width

    def apply(
        self,
        item: TableWork,
        info: TableInfo,
        shape: Shape,
        reduced: Reduced,
        key: SegmentKey,
        version: int,
    ) -> SegmentStats:
        """The segment's reduced changes into gold: merged, or replacing its rows after a
        reset; a large one typed and written or merged by the executors."""
        if reduced.large(key):
            stats = self._on_executors(item, info, reduced.frame(key), version, shape)
            if stats is not None:
                return stats
        typed = type_segment(reduced.rows(key), info, shape.schema, self.zones)
        self.width.check(typed.data.schema)
        if shape.schema is not None:
            typed = _in_order(typed, shape.schema)
        if shape.reset:
            item.commits += item.gold.replace_rows(typed, version)
        else:
            item.commits += item.gold.merge(typed, version)
        item.keys = typed.keys
        return typed.stats

    def _on_executors(
        self,
        item: TableWork,
        info: TableInfo,
        frame: DataFrame,
        version: int,
        shape: Shape,
    ) -> SegmentStats | None:
        """A large segment, typed on the executors and never collected to the driver: written
        into an empty gold table (an initial load, or after a reset), else merged into it by
        delta-spark (None: a column name delta-spark cannot merge; the driver merges it)."""
        handles, specs = frame_specs(frame)
        plan = plan_segment(info, handles, specs, shape.schema)
        self.width.check(plan.schema)
        merged = not shape.reset and item.gold.rows() > 0
        if merged and not spark_can_merge(plan.schema.names, item.gold.schema().names):
            return None
        stats = _frame_stats(frame, plan)
        item.keys = plan.keys
        if merged:
            changes = typed_changes(frame, plan, self.zones)
            item.commits += item.gold.merge_frame(changes, plan.keys, version)
            return stats
        # Files of disjoint key ranges, each sorted: a later merge's key range then skips the
        # files it does not touch (changes cluster on recent keys in most tables).
        files = max(1, -(-stats.upserts // ROWS_PER_FILE))
        typed = typed_frame(frame, plan, self.zones)
        keys = [named_column(key) for key in plan.keys]
        clustered = typed.repartitionByRange(files, *keys).sortWithinPartitions(*keys)
        if item.gold.exists() and (shape.reset or shape.changed):
            item.commits += item.gold.load(clustered, version)
        else:
            item.commits += item.gold.append(clustered, version)
        return stats


def _frame_stats(frame: DataFrame, plan: SegmentPlan) -> SegmentStats:
    """A large segment's counts, from one aggregation on the executors."""
    totals = frame.agg(
        F.count("*").alias("rows"),
        F.sum(F.col("deleted").cast("long")).alias("deletes"),
        F.sum((~F.col("deleted") & F.col("handle_key_only")).cast("long")).alias("key_only"),
        F.sum(F.when(~F.col("deleted"), zero_dates(plan))).alias("zero_dates"),
    ).first()
    deletes = int(totals.deletes or 0)
    return SegmentStats(
        upserts=int(totals.rows) - deletes,
        deletes=deletes,
        key_only=int(totals.key_only or 0),
        zero_dates=int(totals.zero_dates or 0),
    )


def _in_commit_order(
    timeline: Timeline, reduced: Reduced, work: dict[TableName, TableWork]
) -> list[SegmentStep | Barrier]:
    """The run's segments with something to do and its barriers, ordered by TS (a segment
    before a barrier at its end; no TS: last)."""
    steps: list[tuple[tuple, SegmentStep | Barrier]] = []
    for name, item in work.items():
        for segment in timeline.segments_of(name):
            key = (name.schema, name.name, segment.number)
            if key not in reduced.keys and not segment.folds:
                continue
            end = segment.end if segment.end is not None else _INFINITY
            steps.append(((end, 0, str(name)), SegmentStep(item, segment, key)))
    for position, barrier in enumerate(timeline.barriers):
        ts = barrier.ts if barrier.ts is not None else _INFINITY
        steps.append(((ts, 1, position), barrier))
    steps.sort(key=lambda step: step[0])
    return [step for _, step in steps]


def _ddl_version(versions: Versions, item: TableWork, segment: Segment, number: int) -> int:
    """The version of a commit carrying the segment's folded DDLs (at its last DDL's TS)."""
    version = versions.ddl(item.name, segment.folds[-1].ts, number)
    if version is None:
        raise GoldError(f"more than {EFFECTS_PER_DDL} DDL effects at one TS")
    return version


def _emptied(item: TableWork, schema: pa.Schema | None, version: int) -> int:
    """A reset without changes after it: gold empty, with ``schema``."""
    return 0 if schema is None else item.ddl_gold().create(schema, version)


@dataclass
class TableWork:
    """One gold table's progress in a run."""

    name: TableName
    gold: GoldTable
    prior: TableState | None
    upserts: int = 0
    deletes: int = 0
    ddl: int = 0
    commits: int = 0
    zero_dates: int = 0
    keys: tuple[str, ...] | None = None
    dropped: bool | None = None
    failed: bool = False
    reasons: list[str] = field(default_factory=list)

    def ddl_gold(self) -> GoldDDL:
        """The table under the app id of DDL effects (its versions are TS x 8 + n)."""
        return GoldDDL(self.gold.spark, self.name, self.gold.path, self.gold.app_id + DDL)

    def fail(self, reason: str) -> None:
        self.failed = True
        self.reasons.append(reason)

    def count(self, stats: SegmentStats) -> None:
        """A segment's changes, added to the table's counts."""
        self.upserts += stats.upserts
        self.deletes += stats.deletes
        self.zero_dates += stats.zero_dates
        if stats.key_only:
            self.reasons.append(
                f"{stats.key_only} changes carried only their handle key (TiCDC's large-message "
                "handle-key-only option): their other columns are NULL in gold"
            )


@dataclass(frozen=True)
class SegmentStep:
    """A step of a run: one table's segment (its folded DDLs and its changes) into gold."""

    item: TableWork
    segment: Segment
    key: SegmentKey  # the segment's key in the reduced change set


@dataclass
class Versions:
    """App-transaction versions of a run's steps; they only grow along the change log."""

    target: int | None  # the TS of a consistent run
    base: int | None  # inconsistent runs: steps numbered from here
    # DDL effects given a version per (table, TS or step): two DDLs at one TS (or a DDL and a
    # segment's reshape) take successive versions, so neither is taken for the other's rerun.
    used: dict[tuple, int] = field(default_factory=dict)

    def merge(self, end_ts: int | None, step: int) -> int:
        if self.base is not None:
            return self.base + step
        # Changes before a DDL at TS t all have TS < t; the last segment ends at the target.
        return (end_ts - 1) if end_ts is not None else self.target

    def ddl(self, table: TableName, ts: int | None, step: int) -> int | None:
        """The next version of a DDL effect on ``table`` at ``ts`` (None: more effects than
        EFFECTS_PER_DDL at one TS)."""
        numbered = self.base is not None or ts is None
        point = (table, step) if numbered else (table, ts)
        sub = self.used.get(point, 0)
        self.used[point] = sub + 1
        if sub >= EFFECTS_PER_DDL:
            return None
        if numbered:
            return (self.base or 0) + step * EFFECTS_PER_DDL + sub
        return ts * EFFECTS_PER_DDL + sub


# The errors the gold layer expects (bad values, DDL it cannot carry out): their text says it.
EXPECTED_FAILURES = (GoldError, ValueError, pa.ArrowException)
# How much of an unexpected error's text a failure keeps (Spark's carry JVM stack traces).
FAILURE_TEXT_LIMIT = 600


def failure_text(exc: BaseException) -> str:
    """Why a table failed, for its state row and the run's summary: an expected error's text;
    any other error's type and first lines (a Spark error's JVM trace left out)."""
    if isinstance(exc, EXPECTED_FAILURES):
        return str(exc)
    text = str(exc).split("\n\tat ", 1)[0].split("\nJVM stacktrace:", 1)[0].strip()
    if len(text) > FAILURE_TEXT_LIMIT:
        text = text[: FAILURE_TEXT_LIMIT - 3] + "..."
    return f"{type(exc).__name__}: {text}"


def _batches(
    steps: list[SegmentStep | Barrier],
) -> Iterator[list[tuple[int, SegmentStep | Barrier]]]:
    """The ``steps`` (in commit order), numbered, in batches that may run at once: each barrier
    alone, and the segments between two barriers, split where a table comes again."""
    batch: list[tuple[int, SegmentStep | Barrier]] = []
    tables: set[TableName] = set()  # of the batch's segments
    for number, step in enumerate(steps):
        alone = isinstance(step, Barrier) or step.item.name in tables
        if batch and (alone or isinstance(batch[0][1], Barrier)):
            yield batch
            batch, tables = [], set()
        batch.append((number, step))
        if isinstance(step, SegmentStep):
            tables.add(step.item.name)
    if batch:
        yield batch


def versions_of(plan: FeedPlan, batches: Batches) -> Versions:
    """The versions of a run's steps: TS-based in a consistent run, numbered from the latest
    bronze batch in an inconsistent one."""
    if plan.consistent:
        return Versions(plan.target, None)
    top = max(plan.low_batch, batches.latest if batches.latest is not None else -1)
    return Versions(None, (top + 1) * STEPS_PER_RUN)


def _in_order(typed: TypedSegment, schema: pa.Schema) -> TypedSegment:
    """The segment's columns in ``schema``'s order, then any others: a table it creates
    (after a CREATE TABLE folded in) has the columns in the order the barrier path gives."""
    names = typed.data.column_names
    order = [n for n in schema.names if n in names] + [n for n in names if n not in schema.names]
    return dataclasses.replace(typed, data=typed.data.select(order))
