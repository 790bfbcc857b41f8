"""Keys and constraints, as CREATE TABLE and ALTER TABLE ... ADD write them."""

from __future__ import annotations

from ticdc_lake.gold.ddl.cursor import Cursor


def constraint_name(cursor: Cursor) -> None:
    """``CONSTRAINT [symbol]`` before a key: the symbol is optional."""
    if cursor.accept("CONSTRAINT") and not cursor.is_word("PRIMARY", "UNIQUE", "FOREIGN", "CHECK"):
        cursor.identifier("a constraint name")


def index_rest(cursor: Cursor) -> tuple[str, ...]:
    """After PRIMARY KEY / UNIQUE [KEY]: [name] [USING x] (columns) [options]."""
    if not cursor.is_punct("(") and not cursor.is_word("USING"):
        cursor.identifier("an index name")
    if cursor.accept("USING"):
        cursor.advance()
    keys = key_columns(cursor)
    cursor.skip_to_clause_end()
    return keys


def key_columns(cursor: Cursor) -> tuple[str, ...]:
    """``(a, b(10), c DESC)``: the column names of a key; () if a part is an expression."""
    cursor.expect_punct("(")
    columns: list[str] | None = []
    while True:
        if cursor.is_punct("("):  # a functional key part: no plain column
            cursor.skip_balanced()
            columns = None
        else:
            name = cursor.identifier("a key column")
            if columns is not None:
                columns.append(name)
            if cursor.is_punct("("):  # prefix length
                cursor.skip_balanced()
        cursor.accept("ASC", "DESC")
        if cursor.accept_punct(","):
            continue
        cursor.expect_punct(")")
        return tuple(columns) if columns is not None else ()
