"""A barrier's effect carried out on one gold table: the DDLs a merge cannot carry (a CREATE
over an existing table, column drops and rewrites, TRUNCATE, DROP, RENAME, partition drops)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

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
    TableName,
    Truncate,
)
from ticdc_lake.gold.plan import Barrier
from ticdc_lake.gold.shape import WidthLimit, added_columns, check_free, create_schema, gold_arrow
from ticdc_lake.gold.tables import GoldDDL, alter_column, delete_rows

if TYPE_CHECKING:
    from ticdc_lake.gold.steps import TableWork

# Effects that change rows, named for a reason: without a TS they are misplaced in time.
ROW_EFFECTS = {
    Truncate: "TRUNCATE",
    Drop: "DROP TABLE",
    Move: "RENAME",
    DeleteRows: "partition DDL deleting rows",
}


def carry_out(
    effect: Effect,
    item: TableWork,
    work: dict[TableName, TableWork],
    barrier: Barrier,
    version: int,
    zones: dict[str, str],
    width: WidthLimit,
) -> None:
    """``effect`` of ``barrier`` on ``item``'s gold table, committed at ``version``."""
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
        _create(effect, gold, item, version, width)
    elif isinstance(effect, AddColumns):
        added = added_columns(effect, barrier, zones)
        fields = [pa.field(name, value.type) for name, value in added.items()]
        width.check(gold.schema(), len(fields))
        item.commits += gold.add_columns(fields, version, added)
    elif isinstance(effect, DropColumns):
        present = gold.schema()
        if present is not None and any(n in present.names for n in effect.names):
            item.commits += gold.drop_columns(effect.names, version)
    elif isinstance(effect, AlterColumn):
        _alter(effect, gold, item, version)
    elif isinstance(effect, Truncate):
        item.commits += gold.empty(version)
    elif isinstance(effect, Drop):
        item.commits += gold.empty(version)
        item.dropped = True
    elif isinstance(effect, Move):
        _move(effect, gold, item, work, version)
    elif isinstance(effect, DeleteRows):
        item.commits += gold.rewrite(delete_rows(effect.rows), version)


def _create(
    effect: Create, gold: GoldDDL, item: TableWork, version: int, width: WidthLimit
) -> None:
    """CREATE TABLE: over a table gold has (not OR REPLACE), its columns added."""
    item.dropped = False
    if not effect.replace and gold.exists():
        fields = [pa.field(n, gold_arrow(spec)) for n, spec in effect.columns]
        width.check(gold.schema(), len(fields))
        item.commits += gold.add_columns(fields, version)
    elif effect.columns:
        schema = create_schema(effect.columns)
        width.check(schema)
        item.commits += gold.create(schema, version)
    else:
        item.commits += gold.empty(version)


def _alter(effect: AlterColumn, gold: GoldDDL, item: TableWork, version: int) -> None:
    present = gold.schema()
    if present is None or effect.old_name not in present.names:
        return
    check_free(present, effect)
    current = present.field(effect.old_name).type
    target = gold_arrow(effect.spec) if effect.spec is not None else current
    if target == current and effect.new_name == effect.old_name:
        return  # the gold type is the same (VARCHAR(10) → VARCHAR(20), new ENUM members)
    item.commits += gold.rewrite(
        alter_column(effect.old_name, effect.new_name, None if target == current else target),
        version,
    )


def _move(
    effect: Move,
    gold: GoldDDL,
    item: TableWork,
    work: dict[TableName, TableWork],
    version: int,
) -> None:
    """RENAME TABLE: the rows copied to the new name's table (when this run has it), the old
    one emptied and dropped."""
    target = work.get(effect.new)
    if target is not None and not target.failed:
        target.commits += gold.copy_to(target.ddl_gold(), version)
        target.dropped = False
        target.ddl += 1
    item.commits += gold.empty(version)
    item.dropped = True
