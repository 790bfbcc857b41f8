"""The DDL timeline of a compaction run: history, barriers, and the catalog at each barrier.

DDL events are broadcast to every partition (Canal-JSON: partition 0 only), so the log holds
each several times: they are deduplicated by event_id and ordered by (commit TS, Kafka order).
Those at or below the TS already applied are *history* (folded into the catalog: the tables'
columns and keys); those in (applied, target] are *barriers*, each with its effects on gold and
the catalog right after it. A DDL without a commit TS (Canal-JSON without the TiDB extension)
cannot be placed among the changes: in a changefeed that has TSs it only marks the tables it
names as not consistent; in one without, it is applied after the run's changes.

A barrier *splits* only the tables whose gold it changes in ways a merge cannot carry (DROP and
RENAME TABLE, partition DDLs, a MODIFY COLUMN whose values convert differently, DDLs without a
TS). The others (ADD, DROP and RENAME COLUMN, TRUNCATE, CREATE TABLE, a MODIFY or CHANGE
COLUMN that keeps or widens the values, DDLs that only mark a table) are *folded* into the
table's segment (``Segment``): its changes and those DDLs go to gold in one step with the
schema after them (gold/compact.py). ``build_timeline(fold=False)`` splits at every
barrier: the reference the fold is tested against.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ticdc_lake.gold.catalog import (
    AddColumns,
    AlterColumn,
    Catalog,
    CatalogHistory,
    CatalogView,
    Create,
    DropColumns,
    Effect,
    Inconsistent,
    Move,
    TableInfo,
    TableName,
    Truncate,
)
from ticdc_lake.gold.ddl import Action, NoOp, parse_ddl
from ticdc_lake.gold.defaults import AddedValue, added_values
from ticdc_lake.gold.exceptions import DdlParseError
from ticdc_lake.gold.types import gold_type
from ticdc_lake.silver import mysql

# ActionTypes (PROTOCOLS.md §1.4) that change neither columns, rows nor names: no need to parse.
HARMLESS_ACTIONS = frozenset(
    {mysql.ACTION_CREATE_SCHEMA, mysql.ACTION_ADD_INDEX, mysql.ACTION_DROP_INDEX, 9, 10, 13, 15,
     16, 17, 18, 21, 22, 24, 26, 27, 28, 30, 31, 34, 35, 36, 39, 40, 41, 43, 44, 45, 48,
     *range(49, 60), 65, 67, 68, 69, 70}
)  # fmt: skip


@dataclass(frozen=True)
class DdlRecord:
    """One DDL event of the silver DDL log (silver/rows.py DDL_SCHEMA)."""

    event_id: str
    commit_ts: int | None
    schema: str
    table: str
    query: str
    ddl_type: int | None
    topic: str
    partition: int
    offset: int
    index: int
    bronze_batch: int

    @property
    def position(self) -> tuple:
        return (self.topic, self.partition, self.offset, self.index)

    def describe(self) -> str:
        ts = "no commit TS" if self.commit_ts is None else f"commit TS {self.commit_ts}"
        return f"DDL at {ts} (topic {self.topic}, partition {self.partition}, offset {self.offset})"


@dataclass
class ParsedDdl:
    record: DdlRecord
    actions: list[Action] = field(default_factory=list)
    error: str | None = None

    @property
    def table(self) -> TableName:
        return TableName(self.record.schema, self.record.table)


def unique_records(rows: list[dict[str, Any]]) -> list[DdlRecord]:
    """One record per event_id (its first copy in Kafka order), in commit order; DDLs without a
    commit TS last, in Kafka order."""
    first: dict[str, DdlRecord] = {}
    for row in rows:
        record = DdlRecord(**{name: row[name] for name in DdlRecord.__dataclass_fields__})
        known = first.get(record.event_id)
        if known is None or record.position < known.position:
            first[record.event_id] = record
    return sorted(
        first.values(),
        key=lambda r: (r.commit_ts is None, r.commit_ts or 0, r.bronze_batch, r.position),
    )


def parse_record(record: DdlRecord) -> ParsedDdl:
    if record.ddl_type in HARMLESS_ACTIONS:
        return ParsedDdl(record, [NoOp(None, f"DDL type {record.ddl_type}")])
    try:
        return ParsedDdl(record, parse_ddl(record.query, record.schema))
    except DdlParseError as exc:
        return ParsedDdl(record, [], str(exc))


# Effects a segment's merge can carry: they change columns, empty the table, or only mark it.
FOLDABLE = (AddColumns, DropColumns, Truncate, Create, Inconsistent)


@dataclass
class Barrier:
    ddl: ParsedDdl
    effects: list[Effect]
    catalog: CatalogView  # right after the DDL
    ts: int | None
    # The tables whose info may differ from the catalog of the barrier before (the first
    # barrier: from the run's initial catalog).
    changed: frozenset[TableName] = frozenset()

    def changed_infos(self) -> list[tuple[TableName, TableInfo]]:
        return [(name, self.catalog.info(name)) for name in self.changed]

    @property
    def tables(self) -> set[TableName]:
        touched = {effect.table for effect in self.effects if effect.table is not None}
        touched |= {e.new for e in self.effects if isinstance(e, Move) and e.new is not None}
        return touched

    def effects_on(self, table: TableName) -> list[Effect]:
        return [
            e for e in self.effects if e.table == table or (isinstance(e, Move) and e.new == table)
        ]

    def added_values(self, effect: AddColumns, zones: dict[str, str]) -> tuple[AddedValue, ...]:
        """What the rows already there hold in the columns ``effect`` adds."""
        zone = zones.get(self.ddl.record.topic, "UTC")
        return added_values(effect.definitions, self.ts, zone)

    def folds_into(self, table: TableName, gold_columns: Mapping[str, str] | None) -> bool:
        """Whether the table's segment can carry this DDL (it then does not split it).
        ``gold_columns``: the Delta types of the gold table's columns before it (None: not
        known)."""
        effects = self.effects_on(table)
        return (
            self.ts is not None
            and bool(effects)
            and all(_foldable(effect, gold_columns) for effect in effects)
        )


def _foldable(effect: Effect, gold_columns: Mapping[str, str] | None) -> bool:
    if isinstance(effect, AlterColumn):
        # Rows before it read the same under the new definition (catalog.AlterColumn.folds).
        return gold_columns is not None and effect.folds(gold_columns.get(effect.old_name))
    return isinstance(effect, FOLDABLE) and not isinstance(effect, Move)


def gold_columns_after(
    effects: list[Effect], gold_columns: Mapping[str, str] | None
) -> dict[str, str] | None:
    """The Delta types of a gold table's columns after ``effects`` (None: not known)."""
    if gold_columns is None:
        return None
    columns = dict(gold_columns)
    for effect in effects:
        if isinstance(effect, AddColumns):
            for name, spec in effect.columns:
                columns.setdefault(name, gold_type(spec).delta)
        elif isinstance(effect, DropColumns):
            for name in effect.names:
                columns.pop(name, None)
        elif isinstance(effect, AlterColumn) and effect.old_name in columns:
            present = columns.pop(effect.old_name)
            columns[effect.new_name] = gold_type(effect.spec).delta if effect.spec else present
        elif isinstance(effect, Create) and effect.columns:
            if effect.replace:
                columns = {}
            for name, spec in effect.columns:
                columns.setdefault(name, gold_type(spec).delta)
        elif isinstance(effect, (Create, Move)):
            return None  # columns from a table not followed here
    return columns


@dataclass(frozen=True)
class FoldPoint:
    """What one folded DDL effect does to the changes before it: a reset (TRUNCATE, CREATE
    TABLE) discards them; a DROP COLUMN takes the column out of their images; an ADD COLUMN
    puts in the value the rows already there get (gold/defaults.py); a RENAME or CHANGE
    COLUMN renames the column in them."""

    ts: int
    reset: bool = False
    dropped: tuple[str, ...] = ()
    added: tuple[AddedValue, ...] = ()
    renamed: tuple[str, str] | None = None  # (old name, new name)


class ColumnTrail:
    """Columns followed through DDLs in order: which column from before each name holds."""

    def __init__(self) -> None:
        self.sources: dict[str, str] = {}  # name now -> its name before, for renamed columns
        self.gone: set[str] = set()  # names before no longer holding their column

    def source(self, name: str) -> str | None:
        """The name before of the column called ``name`` now (None: a new column)."""
        if name in self.sources:
            return self.sources[name]
        return None if name in self.gone else name

    def drop(self, name: str) -> None:
        self.sources.pop(name, None)
        self.gone.add(name)

    def rename(self, old: str, new: str) -> None:
        source = self.source(old)
        self.drop(old)
        self.drop(new)
        if source is not None:
            self.sources[new] = source

    @property
    def renamed(self) -> dict[str, str]:
        """Name before -> name now, of the columns that are still there under another name."""
        return {before: now for now, before in self.sources.items()}


@dataclass(frozen=True)
class Segment:
    """A table's changes between two barriers that split it, with the DDLs folded into them."""

    number: int
    end: int | None  # the TS of the barrier closing it; None: the run's last segment
    folds: tuple[Barrier, ...]
    catalog: Catalog | CatalogView  # what its changes are typed by: after its last DDL

    def points(self, table: TableName, zones: dict[str, str]) -> list[FoldPoint]:
        """One point per folded effect, in order. ``zones``: topic -> the time zone
        upstream's time values are read in."""
        points = []
        for barrier in self.folds:
            for effect in barrier.effects_on(table):
                if isinstance(effect, (Truncate, Create)):
                    points.append(FoldPoint(barrier.ts, reset=True))
                elif isinstance(effect, DropColumns):
                    points.append(FoldPoint(barrier.ts, dropped=effect.names))
                elif isinstance(effect, AddColumns):
                    added = barrier.added_values(effect, zones)
                    points.append(FoldPoint(barrier.ts, added=added))
                elif isinstance(effect, AlterColumn) and effect.old_name != effect.new_name:
                    renamed = (effect.old_name, effect.new_name)
                    points.append(FoldPoint(barrier.ts, renamed=renamed))
        return points


@dataclass
class Timeline:
    history: Catalog  # the catalog at the TS already applied
    barriers: list[Barrier]
    fold: bool = True  # False: every barrier splits (the reference path)
    # Per table, the Delta types of its gold columns before the run.
    gold_columns: Mapping[TableName, Mapping[str, str]] = field(default_factory=dict)
    _folded: dict[TableName, set[int]] = field(default_factory=dict, init=False, repr=False)
    _by_table: dict[TableName, list[Barrier]] | None = field(default=None, init=False, repr=False)

    def segments_of(self, table: TableName) -> list[Segment]:
        """The table's segments in order. A non-last segment is typed by the catalog right
        after its last DDL; the last one by the catalog after all of the table's barriers,
        DDLs without a TS included: they are applied after the changes, but what they say
        about types (a CREATE TABLE) holds for those changes too."""
        mine = self.barriers_of(table)
        segments: list[Segment] = []
        folds: list[Barrier] = []
        current = self.history
        for barrier in mine:
            if barrier.ts is None:
                continue  # applied after the run's changes: splits nothing
            if self._folds(barrier, table):
                folds.append(barrier)
            else:
                segments.append(Segment(len(segments), barrier.ts, tuple(folds), current))
                folds = []
            current = barrier.catalog
        last = mine[-1].catalog if mine else self.history
        segments.append(Segment(len(segments), None, tuple(folds), last))
        return segments

    def catalog_for_segment(self, table: TableName, segment: int) -> Catalog | CatalogView:
        """The catalog that a table's segment ``segment`` is typed by when every barrier splits
        (``fold`` False): the one right after the barrier that opens it."""
        mine = self.barriers_of(table)
        known = [barrier for barrier in mine if barrier.ts is not None]
        if segment >= len(known):
            return mine[-1].catalog if mine else self.history
        return self.history if segment == 0 else known[segment - 1].catalog

    def splits(self, barrier: Barrier, table: TableName) -> bool:
        """Whether the barrier's effects on the table are carried out as a step of their own."""
        return not self._folds(barrier, table)

    def _folds(self, barrier: Barrier, table: TableName) -> bool:
        if table not in self._folded:
            # Each DDL is judged by the gold columns the ones before it leave.
            folded, columns = set(), dict(self.gold_columns.get(table, {}))
            for earlier in self.barriers_of(table):
                if self.fold and earlier.folds_into(table, columns):
                    folded.add(id(earlier))
                columns = gold_columns_after(earlier.effects_on(table), columns)
            self._folded[table] = folded
        return id(barrier) in self._folded[table]

    def latest_infos(self, wanted: Callable[[TableInfo], bool]) -> dict[TableName, TableInfo]:
        """Per table, its info in the latest of the run's catalogs (the history's, then each
        barrier's) where it is ``wanted``. Each catalog but the first two is visited only where
        it differs from the one before: the others hold the same infos."""
        catalogs = [self.history.tables.items()]
        if self.barriers:
            catalogs.append(self.barriers[0].catalog.tables.items())
            catalogs += [barrier.changed_infos() for barrier in self.barriers[1:]]
        found: dict[TableName, TableInfo] = {}
        for infos in catalogs:
            for name, info in infos:
                if wanted(info):
                    found[name] = info
        return found

    def barriers_of(self, table: TableName) -> list[Barrier]:
        # Indexed once: a first run over many tables holds a CREATE TABLE barrier for each,
        # and every table asks for its own (600 tables: 3.0 s scanning them all each time).
        if self._by_table is None:
            self._by_table = {}
            for barrier in self.barriers:
                for name in barrier.tables:
                    self._by_table.setdefault(name, []).append(barrier)
        return list(self._by_table.get(table, ()))


def _effects(parsed: ParsedDdl, catalog: Catalog) -> list[Effect]:
    note = f"{parsed.record.describe()}: "
    if parsed.error is not None:
        return [Inconsistent(parsed.table, f"{note}not understood: {parsed.error}")]
    effects: list[Effect] = []
    for action in parsed.actions:
        effects.extend(catalog.apply(action, note))
    return effects


def build_timeline(
    parsed: list[ParsedDdl],
    *,
    initial: Catalog,
    applied_ts: int,
    applied_batch: int,
    target_ts: int | None,
    fold: bool = True,
    gold_columns: Mapping[TableName, Mapping[str, str]] | None = None,
) -> Timeline:
    """Split the DDL log at the applied TS; fold the history, plan the barriers.

    ``target_ts`` None: a changefeed without a consistent cut, whose barriers are every DDL
    above the applied TS and every DDL without a TS from bronze batches not yet applied.
    ``fold`` False: every barrier splits the tables it touches (the reference path).
    ``gold_columns``: per table, the Delta types of its gold columns before the run.
    """
    catalog = initial.copy()
    catalogs = CatalogHistory(initial)
    barriers: list[Barrier] = []
    for ddl in parsed:
        ts = ddl.record.commit_ts
        if ts is not None:
            if ts <= applied_ts:
                _effects(ddl, catalog)
                continue
            if target_ts is not None and ts > target_ts:
                continue  # not yet: above the target
        elif ddl.record.bronze_batch <= applied_batch:
            _effects(ddl, catalog)
            continue
        effects = _effects(ddl, catalog)
        if ts is None:
            # Applied after the run's changes: a CREATE TABLE must not empty the rows that
            # came after it.
            effects = [
                dataclasses.replace(e, replace=False) if isinstance(e, Create) else e
                for e in effects
            ]
        if ts is None and target_ts is not None:
            reason = (
                f"{ddl.record.describe()} cannot be placed among the changes of a changefeed "
                "with commit TSs; it was not applied"
            )
            tables = {e.table for e in effects if e.table is not None} or {ddl.table}
            effects = [Inconsistent(name, reason) for name in sorted(tables, key=str)]
        view, changed = catalogs.record(catalog)
        barriers.append(Barrier(ddl, effects, view, ts, changed))
    history = _history(parsed, initial, applied_ts, applied_batch)
    return Timeline(history, barriers, fold, gold_columns or {})


def _history(
    parsed: list[ParsedDdl], initial: Catalog, applied_ts: int, applied_batch: int
) -> Catalog:
    catalog = initial.copy()
    for ddl in parsed:
        ts = ddl.record.commit_ts
        if (ts is not None and ts <= applied_ts) or (
            ts is None and ddl.record.bronze_batch <= applied_batch
        ):
            _effects(ddl, catalog)
    return catalog
