"""CREATE: CREATE TABLE's columns, keys and partitioning; other CREATEs are no-ops."""

from __future__ import annotations

from dataclasses import dataclass, field

from ticdc_lake.gold.ddl.actions import Action, CreateTable, NoOp, Partitioning, TableName
from ticdc_lake.gold.ddl.columns import ColumnDraft, column_definition
from ticdc_lake.gold.ddl.cursor import Cursor
from ticdc_lake.gold.ddl.keys import constraint_name, index_rest
from ticdc_lake.gold.ddl.partitions import partition_by
from ticdc_lake.gold.ddl.tokens import END

_CREATE_NOOPS = (
    "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "VECTOR", "VIEW", "ALGORITHM", "DEFINER", "SQL",
    "SEQUENCE", "PLACEMENT", "RESOURCE", "USER", "ROLE", "BINDING", "SESSION",
)  # fmt: skip


def create(cursor: Cursor) -> list[Action]:
    """What follows CREATE."""
    cursor.accept_sequence("OR", "REPLACE")
    if cursor.accept("TEMPORARY", "GLOBAL", "LOCAL"):
        cursor.accept("TEMPORARY")
        cursor.skip_rest()
        return [NoOp(None, "temporary table (not replicated)")]
    if cursor.accept("TABLE"):
        return [_create_table(cursor)]
    if cursor.accept("DATABASE", "SCHEMA"):
        cursor.skip_rest()
        return [NoOp(None, "CREATE DATABASE")]
    word = cursor.accept(*_CREATE_NOOPS)
    if word is None:
        raise cursor.fail("TABLE, DATABASE, INDEX, VIEW or another CREATE target")
    cursor.skip_rest()
    return [NoOp(None, f"CREATE {word}")]


@dataclass
class _TableElements:
    """What CREATE TABLE's parentheses define: the columns and the keys."""

    columns: list[ColumnDraft] = field(default_factory=list)
    primary_key: tuple[str, ...] | None = None
    unique_keys: list[tuple[str, ...]] = field(default_factory=list)

    def add_column_keys(self) -> None:
        """Add the keys written on a column itself; a primary key's columns are NOT NULL."""
        for column in self.columns:
            if column.primary_key:
                self.primary_key = (column.name,)
            elif column.unique:
                self.unique_keys.append((column.name,))
        if self.primary_key:
            for column in self.columns:
                if column.name in self.primary_key:
                    column.nullable = False


def _create_table(cursor: Cursor) -> CreateTable:
    if_not_exists = cursor.accept_sequence("IF", "NOT", "EXISTS")
    table = cursor.table_name()
    like = _like(cursor)
    if like is not None:
        return CreateTable(table, like=like, if_not_exists=if_not_exists)
    if not cursor.is_punct("("):
        raise cursor.fail("'(' and column definitions, or LIKE (CREATE TABLE ... SELECT is "
                          "not supported)")  # fmt: skip
    cursor.advance()
    elements = _table_elements(cursor)
    partitioning = _table_options(cursor)
    elements.add_column_keys()
    if cursor.is_word("AS", "SELECT", "IGNORE", "REPLACE") or cursor.is_punct("("):
        raise cursor.fail("the end of CREATE TABLE (CREATE TABLE ... SELECT is not supported)")
    return CreateTable(
        table,
        columns=tuple(c.build() for c in elements.columns),
        primary_key=elements.primary_key,
        unique_keys=tuple(elements.unique_keys),
        partitioning=partitioning,
        if_not_exists=if_not_exists,
    )


def _like(cursor: Cursor) -> TableName | None:
    """``LIKE other`` or ``(LIKE other)``: the table whose columns the new one takes."""
    if cursor.accept("LIKE"):
        return cursor.table_name()
    if cursor.is_punct("(") and cursor.is_word("LIKE", token=cursor.peek()):
        cursor.advance()
        cursor.advance()
        like = cursor.table_name()
        cursor.expect_punct(")")
        return like
    return None


def _table_elements(cursor: Cursor) -> _TableElements:
    """The columns and keys inside CREATE TABLE's parentheses, up to the closing ')'."""
    elements = _TableElements()
    while True:
        _table_element(cursor, elements)
        if cursor.accept_punct(","):
            continue
        cursor.expect_punct(")")
        return elements


def _table_element(cursor: Cursor, elements: _TableElements) -> None:
    """One element inside CREATE TABLE's parentheses: a column or a key/constraint."""
    constraint_name(cursor)
    if cursor.accept("PRIMARY"):
        cursor.expect("KEY")
        elements.primary_key = index_rest(cursor)
    elif cursor.accept("UNIQUE"):
        cursor.accept("KEY", "INDEX")
        keys = index_rest(cursor)
        if keys:  # () when a key part is an expression: no columns to key on
            elements.unique_keys.append(keys)
    # KEY, INDEX, FULLTEXT, ... are reserved words: a column with such a name is quoted.
    elif cursor.is_word("KEY", "INDEX", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK") or (
        cursor.is_word("VECTOR", "COLUMNAR") and cursor.is_word("INDEX", "KEY", token=cursor.peek())
    ):
        cursor.skip_to_clause_end()
    else:
        elements.columns.append(column_definition(cursor))


def _table_options(cursor: Cursor) -> Partitioning | None:
    """Table options after CREATE TABLE's ')' (ignored) and the partitioning, if any."""
    partitioning = None
    while cursor.token.kind != END and not cursor.is_punct(";"):
        if cursor.is_word("PARTITION") and cursor.is_word("BY", token=cursor.peek()):
            cursor.at += 2
            partitioning = partition_by(cursor)
        elif cursor.is_word("AS", "SELECT"):
            raise cursor.fail("table options (CREATE TABLE ... SELECT is not supported)")
        elif cursor.is_punct("("):
            cursor.skip_balanced()
        else:
            cursor.advance()  # ENGINE=InnoDB, COMMENT='x', TTL=..., SHARD_ROW_ID_BITS=4, ...
    return partitioning
