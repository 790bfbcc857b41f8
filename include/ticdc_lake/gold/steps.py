"""A compaction run's steps on gold, in commit order.

Each table's segments (its changes, with the DDLs folded into them) and the barriers that
split tables are carried out in the order of their TSs. Every commit carries an app
transaction whose version only grows along the change log (``Versions``), so a rerun finds
each step done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ticdc_lake.delta import spark_can_merge
from ticdc_lake.gold.catalog import (
    AddColumns,
    AlterColumn,
    Create,
    DeleteRows,
    Drop,
    DropColumns,
    Effect,
    Inconsistent,
    Move,
    TableInfo,
    TableName,
    Truncate,
)
from ticdc_lake.gold.changes import (
    DRIVER_THREADS,
    Batches,
    Reduced,
    SegmentKey,
    in_parallel,
)
from ticdc_lake.gold.exceptions import GoldError
from ticdc_lake.gold.feed import FeedPlan
from ticdc_lake.gold.plan import Barrier, ColumnTrail, Segment, Timeline
from ticdc_lake.gold.state import TableState
from ticdc_lake.gold.tables import (
    COMMIT_TS,
    DELETED,
    GoldTable,
    SegmentStats,
    TypedSegment,
    alter_column,
    delete_rows,
    frame_specs,
    plan_segment,
    type_segment,
    typed_changes,
    typed_frame,
    zero_dates,
)
from ticdc_lake.gold.types import ColumnSpec, gold_type
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
# Effects that change rows, named for a reason: without a TS they are misplaced in time.
ROW_EFFECTS = {
    Truncate: "TRUNCATE",
    Drop: "DROP TABLE",
    Move: "RENAME",
    DeleteRows: "partition DDL deleting rows",
}


class Steps:
    """A run's steps on gold, in commit order: each table's segments (its changes with the DDLs
    folded into them) and the barriers that split tables. A failing table is marked failed in
    ``failures`` and skipped from then on; the others go on."""

    def __init__(self, zones: dict[str, str], failures: dict[str, str], max_columns: int):
        self.zones = zones  # topic -> the time zone its TIMESTAMP text is read in
        self.failures = failures
        self.max_columns = max_columns  # limits.max_table_columns: no gold table grows past it

    def execute(
        self,
        timeline: Timeline,
        reduced: Reduced,
        work: dict[TableName, TableWork],
        versions: Versions,
    ) -> None:
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
        for batch in _batches([step for _, step in steps]):
            if isinstance(batch[0][1], Barrier):
                ((number, barrier),) = batch
                self._ddl(timeline, barrier, work, versions, number)
                continue
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
            shape = self._shape(item, segment)
            self._check_width(shape.schema)
            if step.key not in reduced.keys and shape.reset:
                # A DDL's version: the merge version (end TS - 1) can be the last run's target
                # when no change lies between, and would be taken as done.
                emptied = self._ddl_version(versions, item, segment, number)
                item.commits += self._emptied(item, shape.schema, emptied)
                return
            if shape.changed and not shape.reset:
                reshape = self._ddl_version(versions, item, segment, number)
                item.commits += item.ddl_gold().reshape(
                    shape.schema, reshape, shape.values, shape.sources
                )
            if step.key not in reduced.keys:
                return
            stats = self._apply(item, info, shape, reduced, step.key, version)
        except Exception as exc:  # one table's failure: recorded, the others go on
            self._fail(item, failure_text(exc))
            return
        item.upserts += stats.upserts
        item.deletes += stats.deletes
        item.zero_dates += stats.zero_dates
        if stats.key_only:
            item.reasons.append(
                f"{stats.key_only} changes carried only their handle key (TiCDC's large-message "
                "handle-key-only option): their other columns are NULL in gold"
            )

    def _check_width(self, schema: pa.Schema | None, adding: int = 0) -> None:
        """GoldError when a gold table would have more than ``max_columns`` columns (its
        ``_commit_ts`` and the merge's flag not counted) with ``adding`` more."""
        own = {COMMIT_TS, DELETED}
        count = adding + (sum(f.name not in own for f in schema) if schema is not None else 0)
        if count > self.max_columns:
            raise GoldError(
                f"the table would have {count:,} columns, more than limits.max-table-columns "
                f"= {self.max_columns:,} (TiDB allows 4,096): its changes or DDL name columns "
                "no table of TiDB can have; raise that setting if they are expected"
            )

    def _fail(self, item: TableWork, reason: str) -> None:
        item.fail(reason)
        self.failures[str(item.name)] = reason

    def _shape(self, item: TableWork, segment: Segment) -> Shape:
        """Gold's columns after the segment's folded DDLs, as the barrier path leaves them:
        CREATE TABLE's columns, added ones appended (after _commit_ts) with the value the rows
        already there get, dropped ones gone, renamed ones renamed and widened ones widened
        in place."""
        present = item.gold.schema()
        schema, reset, values, trail = present, False, {}, ColumnTrail()
        for barrier in segment.folds:
            for effect in combined_effects(barrier.effects_on(item.name)):
                if isinstance(effect, Inconsistent):
                    item.reasons.append(effect.reason)
                    continue
                item.ddl += 1
                if isinstance(effect, Create):
                    item.dropped, reset, values = False, True, {}
                    if effect.columns:
                        schema = create_schema(effect.columns)
                elif isinstance(effect, Truncate):
                    reset, values = True, {}
                elif schema is None:
                    continue  # no gold table: nothing to change
                elif isinstance(effect, AddColumns):
                    for name, value in self._added(effect, barrier, schema.names).items():
                        schema = schema.append(pa.field(name, value.type))
                        values[name] = value
                        trail.drop(name)
                elif isinstance(effect, DropColumns):
                    for name in effect.names:
                        if name in schema.names:
                            schema = schema.remove(schema.get_field_index(name))
                            values.pop(name, None)
                            trail.drop(name)
                elif isinstance(effect, AlterColumn) and effect.old_name in schema.names:
                    schema, values = _altered(schema, values, effect)
                    trail.rename(effect.old_name, effect.new_name)
        sources = {}
        if schema is not None and present is not None and not reset:
            sources = {f.name: trail.source(f.name) for f in schema}
        changed = schema is not None and (
            present is None or _columns(schema) != _columns(present) or bool(values)
        )
        return Shape(schema, reset, changed, values, sources)

    def _added(
        self, effect: AddColumns, barrier: Barrier, existing: Container[str] = ()
    ) -> dict[str, pa.Scalar]:
        """The columns ``effect`` adds (those not ``existing``), each with the value the rows
        already there get, typed as gold's column."""
        specs = dict(effect.columns)
        where = barrier.ddl.record.describe()
        return {
            value.name: value.gold_value(_gold_arrow(specs[value.name]), where)
            for value in barrier.added_values(effect, self.zones)
            if value.name not in existing
        }

    @staticmethod
    def _ddl_version(versions: Versions, item: TableWork, segment: Segment, number: int) -> int:
        """The version of a commit carrying the segment's folded DDLs (at its last DDL's TS)."""
        version = versions.ddl(item.name, segment.folds[-1].ts, number)
        if version is None:
            raise GoldError(f"more than {EFFECTS_PER_DDL} DDL effects at one TS")
        return version

    def _emptied(self, item: TableWork, schema: pa.Schema | None, version: int) -> int:
        """A reset without changes after it: gold empty, with ``schema``."""
        return 0 if schema is None else item.ddl_gold().create(schema, version)

    def _apply(
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
        self._check_width(typed.data.schema)
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
        self._check_width(plan.schema)
        merged = not shape.reset and item.gold.rows() > 0
        if merged and not spark_can_merge(plan.schema.names, item.gold.schema().names):
            return None
        totals = frame.agg(
            F.count("*").alias("rows"),
            F.sum(F.col("deleted").cast("long")).alias("deletes"),
            F.sum((~F.col("deleted") & F.col("handle_key_only")).cast("long")).alias("key_only"),
            F.sum(F.when(~F.col("deleted"), zero_dates(plan))).alias("zero_dates"),
        ).first()
        deletes = int(totals.deletes or 0)
        stats = SegmentStats(
            upserts=int(totals.rows) - deletes,
            deletes=deletes,
            key_only=int(totals.key_only or 0),
            zero_dates=int(totals.zero_dates or 0),
        )
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
                self._effect(effect, item, work, barrier, version)
            except Exception as exc:  # one table's failure: recorded, the others go on
                self._fail(item, f"{barrier.ddl.record.describe()}: {failure_text(exc)}")

    def _effect(
        self,
        effect: Effect,
        item: TableWork,
        work: dict[TableName, TableWork],
        barrier: Barrier,
        version: int,
    ) -> None:
        gold = item.ddl_gold()
        if isinstance(effect, Inconsistent):
            item.reasons.append(effect.reason)
            return
        item.ddl += 1
        if barrier.ts is None and type(effect) in ROW_EFFECTS:
            item.reasons.append(
                f"{barrier.ddl.record.describe()} ({ROW_EFFECTS[type(effect)]}) applied after "
                "the changes of the run, having no TS to place it by: rows upstream wrote after "
                "it are missing from gold, rows it removed before later changes may remain"
            )
        if isinstance(effect, Create):
            item.dropped = False
            if not effect.replace and gold.exists():
                fields = [pa.field(n, _gold_arrow(spec)) for n, spec in effect.columns]
                self._check_width(gold.schema(), len(fields))
                item.commits += gold.add_columns(fields, version)
            elif effect.columns:
                schema = create_schema(effect.columns)
                self._check_width(schema)
                item.commits += gold.create(schema, version)
            else:
                item.commits += gold.empty(version)
        elif isinstance(effect, AddColumns):
            added = self._added(effect, barrier)
            fields = [pa.field(name, value.type) for name, value in added.items()]
            self._check_width(gold.schema(), len(fields))
            item.commits += gold.add_columns(fields, version, added)
        elif isinstance(effect, DropColumns):
            present = gold.schema()
            if present is not None and any(n in present.names for n in effect.names):
                item.commits += gold.drop_columns(effect.names, version)
        elif isinstance(effect, AlterColumn):
            self._alter(effect, gold, item, version)
        elif isinstance(effect, Truncate):
            item.commits += gold.empty(version)
        elif isinstance(effect, Drop):
            item.commits += gold.empty(version)
            item.dropped = True
        elif isinstance(effect, Move):
            target = work.get(effect.new)
            if target is not None and not target.failed:
                target.commits += gold.copy_to(target.ddl_gold(), version)
                target.dropped = False
                target.ddl += 1
            item.commits += gold.empty(version)
            item.dropped = True
        elif isinstance(effect, DeleteRows):
            item.commits += gold.rewrite(delete_rows(effect.rows), version)

    def _alter(self, effect: AlterColumn, gold: GoldTable, item, version: int) -> None:
        present = gold.schema()
        if present is None or effect.old_name not in present.names:
            return
        _check_free(present, effect)
        current = present.field(effect.old_name).type
        target = _gold_arrow(effect.spec) if effect.spec is not None else current
        if target == current and effect.new_name == effect.old_name:
            return  # the gold type is the same (VARCHAR(10) → VARCHAR(20), new ENUM members)
        item.commits += gold.rewrite(
            alter_column(effect.old_name, effect.new_name, None if target == current else target),
            version,
        )


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

    def ddl_gold(self) -> GoldTable:
        """The table under the app id of DDL effects (its versions are TS x 8 + n)."""
        return GoldTable(self.gold.spark, self.name, self.gold.path, self.gold.app_id + DDL)

    def fail(self, reason: str) -> None:
        self.failed = True
        self.reasons.append(reason)


@dataclass(frozen=True)
class SegmentStep:
    """A step of a run: one table's segment (its folded DDLs and its changes) into gold."""

    item: TableWork
    segment: Segment
    key: SegmentKey  # the segment's key in the reduced change set


@dataclass(frozen=True)
class Shape:
    """A gold table's columns after a segment's folded DDLs, before its changes."""

    schema: pa.Schema | None  # None: no gold table yet
    reset: bool  # emptied (TRUNCATE, CREATE TABLE): the changes replace its rows
    changed: bool  # columns differ from gold's
    values: dict[str, pa.Scalar]  # added columns: the value the rows already there get
    # Each column's name in gold before the segment (None: a new column; absent: as named).
    sources: dict[str, str | None] = field(default_factory=dict)


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


def combined_effects(effects: list[Effect]) -> list[Effect]:
    """Consecutive ADD/DROP COLUMN effects on one table as one (ALTER TABLE t ADD a, ADD b)."""
    combined: list[Effect] = []
    for effect in effects:
        last = combined[-1] if combined else None
        if (
            isinstance(effect, AddColumns)
            and isinstance(last, AddColumns)
            and last.table == effect.table
        ):
            combined[-1] = AddColumns(
                effect.table, last.columns + effect.columns, last.definitions + effect.definitions
            )
        elif (
            isinstance(effect, DropColumns)
            and isinstance(last, DropColumns)
            and last.table == effect.table
        ):
            combined[-1] = DropColumns(effect.table, last.names + effect.names)
        else:
            combined.append(effect)
    return combined


def _altered(
    schema: pa.Schema, values: dict[str, pa.Scalar], effect: AlterColumn
) -> tuple[pa.Schema, dict[str, pa.Scalar]]:
    """A folded RENAME, CHANGE or MODIFY COLUMN on gold's columns: the column in its place,
    renamed and typed anew (a folded one only widens: catalog.AlterColumn.folds)."""
    _check_free(schema, effect)
    index = schema.get_field_index(effect.old_name)
    arrow = schema.field(index).type if effect.spec is None else _gold_arrow(effect.spec)
    schema = schema.set(index, pa.field(effect.new_name, arrow))
    values = dict(values)
    if effect.old_name in values:  # added by the segment: its value widened and renamed
        values[effect.new_name] = values.pop(effect.old_name).cast(arrow)
    return schema, values


def _check_free(schema: pa.Schema, effect: AlterColumn) -> None:
    """A column renamed onto one gold holds already (a change carried the name after the DDL
    had taken it away) would leave two columns of one name."""
    if effect.new_name != effect.old_name and effect.new_name in schema.names:
        raise GoldError(
            f"cannot rename column {effect.old_name!r} to {effect.new_name!r}: gold has a "
            f"column {effect.new_name!r} already (changes carried it after the DDL)"
        )


def _columns(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [(f.name, f.type) for f in schema]


def _gold_arrow(spec: ColumnSpec) -> pa.DataType:
    return gold_type(spec).arrow


def _in_order(typed: TypedSegment, schema: pa.Schema) -> TypedSegment:
    """The segment's columns in ``schema``'s order, then any others: a table it creates
    (after a CREATE TABLE folded in) has the columns in the order the barrier path gives."""
    names = typed.data.column_names
    order = [n for n in schema.names if n in names] + [n for n in names if n not in schema.names]
    return dataclasses.replace(typed, data=typed.data.select(order))


def create_schema(columns: tuple[tuple[str, ColumnSpec], ...]) -> pa.Schema:
    """The gold columns of a CREATE TABLE."""
    fields = [pa.field(n, _gold_arrow(spec)) for n, spec in columns]
    return pa.schema([*fields, pa.field(COMMIT_TS, pa.int64())])
