"""What the DDL log says about each upstream table, and what each DDL does to its gold table.

``Catalog`` folds parsed DDL actions (ddl.py) in commit order into ``TableInfo``s: the columns a
DDL defined (with their types), the keys, the partitioning. ``Catalog.apply(action)`` updates it
and returns the *effects* the action has on gold tables:

- ``Create``: a new (or re-created) table, empty, with the DDL's columns;
- ``AddColumns`` / ``DropColumns`` / ``AlterColumn`` (MODIFY, CHANGE, RENAME COLUMN);
- ``Truncate``, ``Drop``, ``Move`` (RENAME TABLE: the rows go to the new name);
- ``DeleteRows``: rows of dropped or truncated partitions, found by the partitioning;
- ``Inconsistent``: the DDL changes rows in a way the change log cannot reproduce (EXCHANGE
  PARTITION, dropping partitions of a table whose partitioning is unknown).

Columns never named by a DDL (no CREATE TABLE in the log, as with Avro or a changefeed started
after the table was created) are typed from the change rows instead; see gold/compact.py.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from ticdc_lake.gold import ddl
from ticdc_lake.gold.types import ColumnSpec, delta_type_name, gold_type, widens

TableName = ddl.TableName


@dataclass(frozen=True)
class TableInfo:
    name: TableName
    columns: tuple[ddl.ColumnDef, ...] = ()  # the DDL-defined columns, in table order
    complete: bool = False  # a CREATE TABLE was seen: `columns` are all the columns
    primary_key: tuple[str, ...] | None = None
    unique_keys: tuple[tuple[str, ...], ...] = ()
    partitioning: ddl.Partitioning | None = None
    partitioning_known: bool = False  # False: the table may be partitioned in ways unknown
    exists: bool = True

    def column(self, name: str) -> ddl.ColumnDef | None:
        for column in self.columns:
            if column.name == name:
                return column
        return None

    @property
    def specs(self) -> dict[str, ColumnSpec]:
        return {c.name: ColumnSpec.from_ddl(c) for c in self.columns}

    @property
    def handle(self) -> tuple[str, ...]:
        """TiDB's handle: the primary key, else the first unique key of NOT NULL columns."""
        if self.primary_key:
            return self.primary_key
        for key in self.unique_keys:
            columns = [self.column(name) for name in key]
            if key and all(c is not None and not c.nullable for c in columns):
                return key
        return ()


# --- effects on gold ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    table: TableName


@dataclass(frozen=True)
class Create(Effect):
    columns: tuple[tuple[str, ColumnSpec], ...] = ()
    replace: bool = True  # an existing gold table is emptied and takes this schema


@dataclass(frozen=True)
class AddColumns(Effect):
    columns: tuple[tuple[str, ColumnSpec], ...] = ()
    definitions: tuple[ddl.ColumnDef, ...] = ()  # with their DEFAULTs, for the rows already there


@dataclass(frozen=True)
class DropColumns(Effect):
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class AlterColumn(Effect):
    old_name: str = ""
    new_name: str = ""
    spec: ColumnSpec | None = None  # None: only renamed
    previous: ColumnSpec | None = None  # the column's type before, when a DDL defined it

    def folds(self, present_type: str | None) -> bool:
        """Whether a merge can carry it: the rows written before it read the same under the new
        definition, so a segment types them all by it. So for a rename (RENAME COLUMN, CHANGE
        keeping the type), a type whose values convert as before (VARCHAR(10) to VARCHAR(20),
        INT to INT NOT NULL) and a widening (INT to BIGINT: types.widens); and only while the
        gold column has the type from before (``present_type``, its Delta type; None: gold
        has no such column yet)."""
        if self.spec is None:
            return True  # only renamed: the values stay as they are
        if self.previous is None:
            return False  # no DDL defined the column: its type before is not known
        before, after = gold_type(self.previous), gold_type(self.spec)
        if present_type is not None and present_type != delta_type_name(before.arrow):
            return False
        return before == after or widens(self.previous, self.spec)


@dataclass(frozen=True)
class Truncate(Effect):
    pass


@dataclass(frozen=True)
class Drop(Effect):
    pass


@dataclass(frozen=True)
class Move(Effect):
    new: TableName | None = None


@dataclass(frozen=True)
class PartitionRows:
    """Rows of some partitions: ``kind`` range (bounds), list (values) or hash (remainders)."""

    kind: str
    column: str
    ranges: tuple[tuple[Any, Any], ...] = ()  # [low, high); None = unbounded (low None: NULLs)
    values: tuple[Any, ...] = ()  # LIST values; None in it matches NULL
    remainders: tuple[int, ...] = ()
    modulus: int = 0  # HASH: abs(column) % modulus in remainders (NULL is partition 0)


@dataclass(frozen=True)
class DeleteRows(Effect):
    rows: PartitionRows | None = None
    what: str = ""


@dataclass(frozen=True)
class Inconsistent(Effect):
    reason: str = ""


# --- the catalog ---------------------------------------------------------------------------------


@dataclass
class Catalog:
    tables: dict[TableName, TableInfo] = field(default_factory=dict)
    # The names set since the catalog was made or last asked (``take_changed``): what a run's
    # CatalogHistory keeps of each DDL, and what a walk over its catalogs visits, not every
    # table once per DDL (3,000 new tables: 9M visits).
    changed: set[TableName] = field(default_factory=set, repr=False, compare=False)

    def info(self, name: TableName) -> TableInfo:
        return self.tables.get(name) or TableInfo(name)

    def known(self, name: TableName) -> bool:
        return name in self.tables and self.tables[name].exists

    def copy(self) -> Catalog:
        return Catalog(dict(self.tables))

    def take_changed(self) -> frozenset[TableName]:
        changed, self.changed = frozenset(self.changed), set()
        return changed

    def put(self, name: TableName, info: TableInfo) -> None:
        self.tables[name] = info
        self.changed.add(name)

    def apply(self, action: ddl.Action, note: str = "") -> list[Effect]:
        """Fold one action in; return its effects on gold. ``note`` names the DDL in reasons."""
        return _HANDLERS[type(action)](self, action, note)


# --- what a DDL action does: tables --------------------------------------------------------------


def _create_table(catalog: Catalog, action: ddl.CreateTable, note: str) -> list[Effect]:
    name = action.table
    if action.if_not_exists and catalog.known(name):
        return []
    if action.like is not None:
        source = catalog.tables.get(action.like)
        if source is None or not source.complete:
            catalog.put(name, TableInfo(name))
            return [Create(name, (), replace=True)]
        info = dataclasses.replace(source, name=name, exists=True)
    else:
        info = TableInfo(
            name,
            columns=action.columns,
            complete=True,
            primary_key=action.primary_key,
            unique_keys=action.unique_keys,
            partitioning=action.partitioning,
            partitioning_known=True,
        )
    catalog.put(name, info)
    return [Create(name, tuple(info.specs.items()), replace=True)]


def _truncate_table(catalog: Catalog, action: ddl.TruncateTable, note: str) -> list[Effect]:
    return [Truncate(action.table)]


def _drop_table(catalog: Catalog, action: ddl.DropTable, note: str) -> list[Effect]:
    catalog.put(action.table, dataclasses.replace(catalog.info(action.table), exists=False))
    return [Drop(action.table)]


def _drop_schema(catalog: Catalog, action: ddl.DropSchema, note: str) -> list[Effect]:
    effects: list[Effect] = []
    for name, info in list(catalog.tables.items()):
        if name.schema == action.schema and info.exists:
            catalog.put(name, dataclasses.replace(info, exists=False))
            effects.append(Drop(name))
    return effects


def _rename_table(catalog: Catalog, action: ddl.RenameTable, note: str) -> list[Effect]:
    old, new = action.table, action.new
    info = catalog.info(old)
    catalog.put(new, dataclasses.replace(info, name=new, exists=True))
    catalog.put(old, dataclasses.replace(info, exists=False))
    return [Move(old, new)]


# --- what a DDL action does: columns -------------------------------------------------------------


def _add_columns(catalog: Catalog, action: ddl.AddColumns, note: str) -> list[Effect]:
    info = catalog.info(action.table)
    kept = tuple(c for c in info.columns if c.name not in {n.name for n in action.columns})
    catalog.put(action.table, dataclasses.replace(info, columns=kept + action.columns))
    specs = tuple((c.name, ColumnSpec.from_ddl(c)) for c in action.columns)
    return [AddColumns(action.table, specs, action.columns)]


def _drop_columns(catalog: Catalog, action: ddl.DropColumns, note: str) -> list[Effect]:
    info = catalog.info(action.table)
    columns = tuple(c for c in info.columns if c.name not in action.names)
    catalog.put(action.table, dataclasses.replace(info, columns=columns))
    return [DropColumns(action.table, action.names)]


def _modify_column(catalog: Catalog, action: ddl.ModifyColumn, note: str) -> list[Effect]:
    info = catalog.info(action.table)
    column = action.column
    before = info.column(action.old_name)
    if before is not None:
        columns = tuple(column if c.name == action.old_name else c for c in info.columns)
    else:
        columns = (*info.columns, column)
    key = info.primary_key
    if key and action.old_name in key:
        key = tuple(column.name if k == action.old_name else k for k in key)
    uniques = tuple(
        tuple(column.name if k == action.old_name else k for k in unique)
        for unique in info.unique_keys
    )
    catalog.put(
        action.table,
        dataclasses.replace(info, columns=columns, primary_key=key, unique_keys=uniques),
    )
    return [
        AlterColumn(
            action.table,
            action.old_name,
            column.name,
            ColumnSpec.from_ddl(column),
            ColumnSpec.from_ddl(before) if before is not None else None,
        )
    ]


def _rename_column(catalog: Catalog, action: ddl.RenameColumn, note: str) -> list[Effect]:
    info = catalog.info(action.table)
    columns = tuple(
        dataclasses.replace(c, name=action.new_name) if c.name == action.old_name else c
        for c in info.columns
    )
    rename = {action.old_name: action.new_name}
    key = info.primary_key and tuple(rename.get(k, k) for k in info.primary_key)
    uniques = tuple(tuple(rename.get(k, k) for k in u) for u in info.unique_keys)
    catalog.put(
        action.table,
        dataclasses.replace(info, columns=columns, primary_key=key, unique_keys=uniques),
    )
    return [AlterColumn(action.table, action.old_name, action.new_name, None)]


def _set_primary_key(catalog: Catalog, action: ddl.SetPrimaryKey, note: str) -> list[Effect]:
    info = catalog.info(action.table)
    columns = info.columns
    if action.columns:
        columns = tuple(
            dataclasses.replace(c, nullable=False) if c.name in action.columns else c
            for c in columns
        )
    catalog.put(
        action.table,
        dataclasses.replace(info, columns=columns, primary_key=action.columns or None),
    )
    return []


def _add_unique_key(catalog: Catalog, action: ddl.AddUniqueKey, note: str) -> list[Effect]:
    info = catalog.info(action.table)
    if action.columns:
        catalog.put(
            action.table,
            dataclasses.replace(info, unique_keys=(*info.unique_keys, action.columns)),
        )
    return []


def _no_op(catalog: Catalog, action: ddl.NoOp, note: str) -> list[Effect]:
    return []


# --- what a DDL action does: partitions ----------------------------------------------------------


def _set_partitioning(
    catalog: Catalog, name: TableName, partitioning: ddl.Partitioning | None
) -> None:
    info = catalog.info(name)
    catalog.put(name, dataclasses.replace(info, partitioning=partitioning))


def _add_partitions(catalog: Catalog, action: ddl.AddPartitions, note: str) -> list[Effect]:
    partitioning = catalog.info(action.table).partitioning
    if partitioning is not None:
        if action.count:
            partitioning = dataclasses.replace(
                partitioning, count=(partitioning.count or 0) + action.count
            )
        else:
            partitioning = dataclasses.replace(
                partitioning, definitions=partitioning.definitions + action.definitions
            )
        _set_partitioning(catalog, action.table, partitioning)
    return []  # a new partition holds no rows


def _drop_partitions(catalog: Catalog, action: ddl.DropPartitions, note: str) -> list[Effect]:
    effects = _partition_effects(catalog, action.table, action.names, "DROP PARTITION", note)
    partitioning = catalog.info(action.table).partitioning
    if partitioning is not None and partitioning.definitions:
        kept = tuple(p for p in partitioning.definitions if p.name not in action.names)
        _set_partitioning(
            catalog, action.table, dataclasses.replace(partitioning, definitions=kept)
        )
    return effects


def _truncate_partitions(
    catalog: Catalog, action: ddl.TruncatePartitions, note: str
) -> list[Effect]:
    if not action.names:
        return [Truncate(action.table)]
    return _partition_effects(catalog, action.table, action.names, "TRUNCATE PARTITION", note)


def _reorganize_partitions(
    catalog: Catalog, action: ddl.ReorganizePartitions, note: str
) -> list[Effect]:
    partitioning = catalog.info(action.table).partitioning
    if partitioning is not None and partitioning.definitions:
        definitions = list(partitioning.definitions)
        positions = [i for i, p in enumerate(definitions) if p.name in action.names]
        at = positions[0] if positions else len(definitions)
        definitions = [p for p in definitions if p.name not in action.names]
        definitions[at:at] = action.definitions
        _set_partitioning(
            catalog, action.table, dataclasses.replace(partitioning, definitions=tuple(definitions))
        )
    return []  # rows move between partitions; none change


def _exchange_partition(catalog: Catalog, action: ddl.ExchangePartition, note: str) -> list[Effect]:
    reason = (
        f"{note}EXCHANGE PARTITION {action.name} WITH TABLE {action.other} swapped rows "
        "without row events: gold cannot reproduce them"
    )
    return [Inconsistent(action.table, reason), Inconsistent(action.other, reason)]


def _repartition(catalog: Catalog, action: ddl.Repartition, note: str) -> list[Effect]:
    info = catalog.info(action.table)
    if action.coalesce is not None:
        if info.partitioning is not None:
            count = max(1, (info.partitioning.count or 0) - action.coalesce)
            _set_partitioning(
                catalog, action.table, dataclasses.replace(info.partitioning, count=count)
            )
        return []
    catalog.put(
        action.table,
        dataclasses.replace(info, partitioning=action.partitioning, partitioning_known=True),
    )
    return []  # repartitioning keeps every row


def _partition_effects(
    catalog: Catalog, table: TableName, names: tuple[str, ...], what: str, note: str
) -> list[Effect]:
    """The named partitions' rows deleted, or Inconsistent when they cannot be told."""
    info = catalog.info(table)
    rows, problem = partition_rows(info.partitioning, names)
    if rows is None:
        return [Inconsistent(table, f"{note}{what} {', '.join(names)}: {problem}")]
    return [DeleteRows(table, rows, f"{what} {', '.join(names)}")]


# What each kind of action does to the catalog (``Catalog.apply``).
_HANDLERS = {
    ddl.CreateTable: _create_table,
    ddl.TruncateTable: _truncate_table,
    ddl.DropTable: _drop_table,
    ddl.DropSchema: _drop_schema,
    ddl.RenameTable: _rename_table,
    ddl.AddColumns: _add_columns,
    ddl.DropColumns: _drop_columns,
    ddl.ModifyColumn: _modify_column,
    ddl.RenameColumn: _rename_column,
    ddl.SetPrimaryKey: _set_primary_key,
    ddl.AddUniqueKey: _add_unique_key,
    ddl.NoOp: _no_op,
    ddl.AddPartitions: _add_partitions,
    ddl.DropPartitions: _drop_partitions,
    ddl.TruncatePartitions: _truncate_partitions,
    ddl.ReorganizePartitions: _reorganize_partitions,
    ddl.ExchangePartition: _exchange_partition,
    ddl.Repartition: _repartition,
}


class CatalogHistory:
    """The catalog right after each of a run's DDLs, kept as each table's infos in the order
    the DDLs set them: a copy of every table per DDL grew with the square of a first run's new
    tables (10,000 CREATE TABLEs: 1.9 GB and 3.8 s)."""

    def __init__(self, base: Catalog):
        self._base = dict(base.tables)
        self._changes: dict[TableName, tuple[list[int], list[TableInfo]]] = {}
        self._count = 0

    def record(self, catalog: Catalog) -> tuple[CatalogView, frozenset[TableName]]:
        """``catalog`` as it is now (it grew from the base), as the next view; with the names
        it set since the last."""
        number, self._count = self._count, self._count + 1
        changed = catalog.take_changed()
        for name in changed:
            numbers, infos = self._changes.setdefault(name, ([], []))
            numbers.append(number)
            infos.append(catalog.tables[name])
        return CatalogView(self, number), changed

    def info_at(self, number: int, name: TableName) -> TableInfo | None:
        numbers, infos = self._changes.get(name, ((), ()))
        at = bisect.bisect_right(numbers, number)
        return infos[at - 1] if at else self._base.get(name)

    def names_at(self, number: int) -> list[TableName]:
        later = [name for name, (numbers, _) in self._changes.items() if numbers[0] <= number]
        return [*self._base, *(name for name in later if name not in self._base)]


@dataclass(frozen=True)
class CatalogView:
    """One of a ``CatalogHistory``'s catalogs, read as a ``Catalog`` is."""

    history: CatalogHistory
    number: int

    def info(self, name: TableName) -> TableInfo:
        return self.history.info_at(self.number, name) or TableInfo(name)

    def known(self, name: TableName) -> bool:
        info = self.history.info_at(self.number, name)
        return info is not None and info.exists

    @property
    def tables(self) -> dict[TableName, TableInfo]:
        """Every table it knows (built on each call)."""
        return {name: self.info(name) for name in self.history.names_at(self.number)}


def partition_rows(
    partitioning: ddl.Partitioning | None, names: tuple[str, ...]
) -> tuple[PartitionRows | None, str]:
    """The rows held by the named partitions, or None and why they cannot be told."""
    if partitioning is None:
        return None, "the table's partitioning is unknown (no CREATE TABLE in the DDL log)"
    if len(partitioning.columns) != 1:
        return None, (
            f"partitioning by {partitioning.kind.upper()} ({partitioning.expression}) is not on "
            "one plain column"
        )
    column = partitioning.columns[0]
    all_names = partitioning.names
    unknown = [n for n in names if n not in all_names]
    if unknown:
        return None, f"unknown partition(s) {', '.join(unknown)}; known: {', '.join(all_names)}"
    if partitioning.kind == "hash":
        modulus = len(all_names)
        return PartitionRows(
            "hash", column, remainders=tuple(all_names.index(n) for n in names), modulus=modulus
        ), ""
    if partitioning.kind == "key":
        return None, "KEY partitioning uses TiDB's internal hash, which gold does not reproduce"
    if partitioning.kind == "range":
        ranges = []
        low: Any = None
        for position, definition in enumerate(partitioning.definitions):
            bound = definition.less_than or ("MAXVALUE",)
            high = None if bound[0].upper() == "MAXVALUE" else literal(bound[0])
            if high is _NOT_LITERAL:
                return None, f"the range bound {bound[0]} is an expression"
            if definition.name in names:
                # NULL sorts below every value: it lives in the first partition.
                ranges.append((low if position else None, high))
            low = high
        return PartitionRows("range", column, ranges=tuple(ranges)), ""
    values: list[Any] = []
    for definition in partitioning.definitions:
        if definition.name in names:
            for value in definition.values_in or ():
                parsed = literal(value[0])
                if len(value) != 1 or parsed is _NOT_LITERAL:
                    return None, f"the list value {value} is not a plain literal"
                values.append(parsed)
    return PartitionRows("list", column, values=tuple(values)), ""


_NOT_LITERAL = object()


def literal(text: str) -> Any:
    """A SQL literal's value: integers, decimals, quoted strings, NULL; else _NOT_LITERAL."""
    text = text.strip()
    if text.upper() == "NULL":
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1].replace(text[0] * 2, text[0])
    try:
        number = Decimal(text)
    except InvalidOperation:
        return _NOT_LITERAL
    return int(number) if number == number.to_integral_value() and "." not in text else number
