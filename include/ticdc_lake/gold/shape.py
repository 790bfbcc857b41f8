"""Gold's columns as DDL effects leave them: the shape a segment's folded DDLs give a table,
the columns a CREATE TABLE or ADD COLUMN makes, and the cap on a table's width."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from ticdc_lake.gold.catalog import (
    AddColumns,
    AlterColumn,
    Create,
    DropColumns,
    Effect,
    Inconsistent,
    Truncate,
)
from ticdc_lake.gold.exceptions import GoldError
from ticdc_lake.gold.plan import Barrier, ColumnTrail, Segment
from ticdc_lake.gold.tables import COMMIT_TS, DELETED
from ticdc_lake.gold.types import ColumnSpec, gold_type

if TYPE_CHECKING:
    from ticdc_lake.gold.steps import TableWork


@dataclass(frozen=True)
class Shape:
    """A gold table's columns after a segment's folded DDLs, before its changes."""

    schema: pa.Schema | None  # None: no gold table yet
    reset: bool  # emptied (TRUNCATE, CREATE TABLE): the changes replace its rows
    changed: bool  # columns differ from gold's
    values: dict[str, pa.Scalar]  # added columns: the value the rows already there get
    # Each column's name in gold before the segment (None: a new column; absent: as named).
    sources: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class WidthLimit:
    """limits.max_table_columns: no gold table grows past it."""

    max_columns: int

    def check(self, schema: pa.Schema | None, adding: int = 0) -> None:
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


def folded_shape(item: TableWork, segment: Segment, zones: dict[str, str]) -> Shape:
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
                for name, value in added_columns(effect, barrier, zones, schema.names).items():
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


def added_columns(
    effect: AddColumns,
    barrier: Barrier,
    zones: dict[str, str],
    existing: Container[str] = (),
) -> dict[str, pa.Scalar]:
    """The columns ``effect`` adds (those not ``existing``), each with the value the rows
    already there get, typed as gold's column."""
    specs = dict(effect.columns)
    where = barrier.ddl.record.describe()
    return {
        value.name: value.gold_value(gold_arrow(specs[value.name]), where)
        for value in barrier.added_values(effect, zones)
        if value.name not in existing
    }


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
    check_free(schema, effect)
    index = schema.get_field_index(effect.old_name)
    arrow = schema.field(index).type if effect.spec is None else gold_arrow(effect.spec)
    schema = schema.set(index, pa.field(effect.new_name, arrow))
    values = dict(values)
    if effect.old_name in values:  # added by the segment: its value widened and renamed
        values[effect.new_name] = values.pop(effect.old_name).cast(arrow)
    return schema, values


def check_free(schema: pa.Schema, effect: AlterColumn) -> None:
    """A column renamed onto one gold holds already (a change carried the name after the DDL
    had taken it away) would leave two columns of one name."""
    if effect.new_name != effect.old_name and effect.new_name in schema.names:
        raise GoldError(
            f"cannot rename column {effect.old_name!r} to {effect.new_name!r}: gold has a "
            f"column {effect.new_name!r} already (changes carried it after the DDL)"
        )


def _columns(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [(f.name, f.type) for f in schema]


def gold_arrow(spec: ColumnSpec) -> pa.DataType:
    return gold_type(spec).arrow


def create_schema(columns: tuple[tuple[str, ColumnSpec], ...]) -> pa.Schema:
    """The gold columns of a CREATE TABLE."""
    fields = [pa.field(n, gold_arrow(spec)) for n, spec in columns]
    return pa.schema([*fields, pa.field(COMMIT_TS, pa.int64())])
