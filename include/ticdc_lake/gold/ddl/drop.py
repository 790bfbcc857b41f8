"""DROP and TRUNCATE: tables, databases and rows gone; other DROPs are no-ops."""

from __future__ import annotations

from ticdc_lake.gold.ddl.actions import Action, DropSchema, DropTable, NoOp, TruncateTable
from ticdc_lake.gold.ddl.cursor import Cursor

_DROP_NOOPS = (
    "INDEX", "VIEW", "SEQUENCE", "PLACEMENT", "RESOURCE", "USER", "ROLE", "BINDING", "STATS",
)  # fmt: skip


def drop(cursor: Cursor) -> list[Action]:
    """What follows DROP."""
    if cursor.accept("TEMPORARY"):
        cursor.skip_rest()
        return [NoOp(None, "DROP TEMPORARY TABLE (not replicated)")]
    if cursor.accept("TABLE", "TABLES"):
        cursor.accept_sequence("IF", "EXISTS")
        tables = [cursor.table_name()]
        while cursor.accept_punct(","):
            tables.append(cursor.table_name())
        cursor.accept("RESTRICT", "CASCADE")
        return [DropTable(table) for table in tables]
    if cursor.accept("DATABASE", "SCHEMA"):
        cursor.accept_sequence("IF", "EXISTS")
        return [DropSchema(None, schema=cursor.identifier("a database name"))]
    word = cursor.accept(*_DROP_NOOPS)
    if word is None:
        raise cursor.fail("TABLE, DATABASE, INDEX, VIEW or another DROP target")
    cursor.skip_rest()
    return [NoOp(None, f"DROP {word}")]


def truncate(cursor: Cursor) -> list[Action]:
    """What follows TRUNCATE."""
    cursor.accept("TABLE")
    return [TruncateTable(cursor.table_name())]
