"""ALTER TABLE, clause by clause: columns, keys, the table's name and its partitions; table
options and other ALTERs are no-ops."""

from __future__ import annotations

from collections.abc import Callable

from ticdc_lake.gold.ddl.actions import (
    Action,
    AddColumns,
    AddPartitions,
    AddUniqueKey,
    DropColumns,
    DropPartitions,
    ExchangePartition,
    ModifyColumn,
    NoOp,
    RenameColumn,
    RenameTable,
    ReorganizePartitions,
    Repartition,
    SetPrimaryKey,
    TableName,
    TruncatePartitions,
)
from ticdc_lake.gold.ddl.columns import column_definition, column_position
from ticdc_lake.gold.ddl.cursor import Cursor
from ticdc_lake.gold.ddl.keys import constraint_name, index_rest
from ticdc_lake.gold.ddl.partitions import partition_by, partition_definitions
from ticdc_lake.gold.ddl.tokens import END, WORD

_ALTER_NOOPS = (
    "DATABASE", "SCHEMA", "VIEW", "SEQUENCE", "PLACEMENT", "RESOURCE", "USER", "INSTANCE",
    "ALGORITHM", "DEFINER", "SQL",
)  # fmt: skip
# ALTER TABLE clauses that change neither columns, rows nor the table's name.
_ALTER_OPTIONS = frozenset(
    {"ENGINE", "AUTO_INCREMENT", "AUTO_ID_CACHE", "AUTO_RANDOM_BASE", "AVG_ROW_LENGTH",
     "DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "CHECKSUM", "COMMENT", "COMPRESSION",
     "CONNECTION", "DATA", "INDEX", "DELAY_KEY_WRITE", "ENCRYPTION", "INSERT_METHOD",
     "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS", "PASSWORD", "ROW_FORMAT",
     "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "STATS_BUCKETS",
     "STATS_TOPN", "STATS_COL_CHOICE", "STATS_COL_LIST", "STATS_SAMPLE_RATE", "TABLESPACE",
     "UNION", "SHARD_ROW_ID_BITS", "PRE_SPLIT_REGIONS", "TTL", "TTL_ENABLE", "TTL_JOB_INTERVAL",
     "PLACEMENT", "ATTRIBUTES", "SECONDARY_ENGINE", "ALGORITHM", "LOCK", "FORCE", "ORDER",
     "WITH", "WITHOUT", "ENABLE", "DISABLE", "DISCARD", "IMPORT", "OPTIMIZE", "REBUILD",
     "REPAIR", "CHECK", "ANALYZE", "CACHE", "NOCACHE", "COMPACT", "SET", "CONVERT"}
)  # fmt: skip


def alter(cursor: Cursor) -> list[Action]:
    """What follows ALTER: one or more actions per ALTER TABLE, a no-op for other ALTERs."""
    cursor.accept("ONLINE", "OFFLINE")
    cursor.accept("IGNORE")
    if not cursor.accept("TABLE"):
        word = cursor.accept(*_ALTER_NOOPS)
        if word is None:
            raise cursor.fail("TABLE, DATABASE or another ALTER target")
        cursor.skip_rest()
        return [NoOp(None, f"ALTER {word}")]
    table = cursor.table_name()
    actions: list[Action] = []
    while cursor.token.kind != END and not cursor.is_punct(";"):
        actions.extend(_alter_specification(cursor, table))
        if not cursor.accept_punct(","):
            break
    return actions or [NoOp(table, "ALTER TABLE without changes")]


def _alter_specification(cursor: Cursor, table: TableName) -> list[Action]:
    """One comma-separated clause of ALTER TABLE."""
    if cursor.is_word("PARTITION") and cursor.is_word("BY", token=cursor.peek()):
        cursor.at += 2
        return [Repartition(table, partitioning=partition_by(cursor))]
    verb = cursor.token.text.upper() if cursor.token.kind == WORD else ""
    clause = _CLAUSES.get(verb)
    if clause is not None:
        cursor.advance()
        return clause(cursor, table)
    if verb in _ALTER_OPTIONS:
        cursor.skip_to_clause_end()
        return [NoOp(table, f"table option {verb}")]
    raise cursor.fail(
        "an ALTER TABLE clause (ADD, DROP, MODIFY, CHANGE, RENAME, a partition clause or a "
        "table option)"
    )


def _add(cursor: Cursor, table: TableName) -> list[Action]:
    constraint_name(cursor)
    if cursor.accept("PRIMARY"):
        cursor.expect("KEY")
        return [SetPrimaryKey(table, columns=index_rest(cursor))]
    if cursor.accept("UNIQUE"):
        cursor.accept("KEY", "INDEX")
        return [AddUniqueKey(table, columns=index_rest(cursor))]
    if cursor.is_word("INDEX", "KEY", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK", "VECTOR"):
        word = cursor.advance().text.upper()
        cursor.skip_to_clause_end()
        return [NoOp(table, f"ADD {word}")]
    if cursor.accept("PARTITION"):
        if cursor.accept("PARTITIONS"):
            return [AddPartitions(table, count=cursor.count("partitions"))]
        return [AddPartitions(table, definitions=partition_definitions(cursor))]
    return _add_columns(cursor, table)


def _add_columns(cursor: Cursor, table: TableName) -> list[Action]:
    """``ADD [COLUMN] c ... [FIRST | AFTER x]`` or ``ADD [COLUMN] (c ..., d ...)``."""
    cursor.accept("COLUMN")
    cursor.accept_sequence("IF", "NOT", "EXISTS")
    if cursor.accept_punct("("):
        columns = [column_definition(cursor)]
        while cursor.accept_punct(","):
            columns.append(column_definition(cursor))
        cursor.expect_punct(")")
    else:
        columns = [column_definition(cursor)]
        column_position(cursor)
    return [AddColumns(table, columns=tuple(c.build() for c in columns))]


def _drop(cursor: Cursor, table: TableName) -> list[Action]:
    if cursor.accept("PRIMARY"):
        cursor.expect("KEY")
        return [SetPrimaryKey(table, columns=None)]
    if cursor.is_word("INDEX", "KEY", "FOREIGN", "CHECK", "CONSTRAINT"):
        word = cursor.advance().text.upper()
        cursor.accept("KEY")
        cursor.accept_sequence("IF", "EXISTS")
        cursor.identifier()
        return [NoOp(table, f"DROP {word}")]
    if cursor.accept("PARTITION"):
        cursor.accept_sequence("IF", "EXISTS")
        return [DropPartitions(table, names=cursor.name_list())]
    cursor.accept("COLUMN")
    cursor.accept_sequence("IF", "EXISTS")
    name = cursor.identifier("a column name")
    cursor.accept("RESTRICT", "CASCADE")
    return [DropColumns(table, names=(name,))]


def _modify(cursor: Cursor, table: TableName) -> list[Action]:
    cursor.accept("COLUMN")
    cursor.accept_sequence("IF", "EXISTS")
    column = column_definition(cursor)
    column_position(cursor)
    return [ModifyColumn(table, old_name=column.name, column=column.build())]


def _change(cursor: Cursor, table: TableName) -> list[Action]:
    cursor.accept("COLUMN")
    cursor.accept_sequence("IF", "EXISTS")
    old_name = cursor.identifier("a column name")
    column = column_definition(cursor)
    column_position(cursor)
    return [ModifyColumn(table, old_name=old_name, column=column.build())]


def _rename(cursor: Cursor, table: TableName) -> list[Action]:
    if cursor.accept("COLUMN"):
        old = cursor.identifier("a column name")
        cursor.expect("TO")
        return [RenameColumn(table, old_name=old, new_name=cursor.identifier("a column name"))]
    if cursor.accept("INDEX", "KEY"):
        cursor.identifier()
        cursor.expect("TO")
        cursor.identifier()
        return [NoOp(table, "RENAME INDEX")]
    cursor.accept("TO", "AS")
    return [RenameTable(table, new=cursor.table_name())]


def _alter(cursor: Cursor, table: TableName) -> list[Action]:
    word = cursor.accept("INDEX", "CHECK", "CONSTRAINT") or "COLUMN"
    cursor.skip_to_clause_end()
    return [NoOp(table, f"ALTER {word}")]


def _truncate(cursor: Cursor, table: TableName) -> list[Action]:
    cursor.expect("PARTITION")
    if cursor.accept("ALL"):
        return [TruncatePartitions(table, names=())]
    return [TruncatePartitions(table, names=cursor.name_list())]


def _reorganize(cursor: Cursor, table: TableName) -> list[Action]:
    cursor.expect("PARTITION")
    names = cursor.name_list()
    cursor.expect("INTO")
    return [ReorganizePartitions(table, names=names, definitions=partition_definitions(cursor))]


def _exchange(cursor: Cursor, table: TableName) -> list[Action]:
    cursor.expect("PARTITION")
    name = cursor.identifier("a partition name")
    cursor.expect("WITH")
    cursor.expect("TABLE")
    other = cursor.table_name()
    if cursor.accept("WITH", "WITHOUT"):
        cursor.expect("VALIDATION")
    return [ExchangePartition(table, name=name, other=other)]


def _coalesce(cursor: Cursor, table: TableName) -> list[Action]:
    cursor.expect("PARTITION")
    return [Repartition(table, partitioning=None, coalesce=cursor.count("partitions"))]


def _remove(cursor: Cursor, table: TableName) -> list[Action]:
    if cursor.accept("TTL"):
        return [NoOp(table, "REMOVE TTL")]
    cursor.expect("PARTITIONING")
    return [Repartition(table, partitioning=None)]


# ALTER TABLE's clauses by their first word (the word itself already read).
_CLAUSES: dict[str, Callable[[Cursor, TableName], list[Action]]] = {
    "ADD": _add,
    "DROP": _drop,
    "MODIFY": _modify,
    "CHANGE": _change,
    "RENAME": _rename,
    "ALTER": _alter,
    "TRUNCATE": _truncate,
    "REORGANIZE": _reorganize,
    "EXCHANGE": _exchange,
    "COALESCE": _coalesce,
    "REMOVE": _remove,
}
