"""Partitioning: PARTITION BY RANGE/LIST [COLUMNS]/HASH/KEY and partition definitions."""

from __future__ import annotations

import re

from ticdc_lake.gold.ddl.actions import PartitionDef, Partitioning
from ticdc_lake.gold.ddl.cursor import Cursor
from ticdc_lake.gold.ddl.tokens import END

_BARE_COLUMN = re.compile(r"^\s*`?([A-Za-z0-9_$\u0080-\uffff]+)`?\s*$")


def partition_by(cursor: Cursor) -> Partitioning:
    """What follows PARTITION BY."""
    cursor.accept("LINEAR")
    kind = cursor.expect("RANGE", "LIST", "HASH", "KEY").lower()
    use_columns = False
    if kind == "key":
        if cursor.accept("ALGORITHM"):
            cursor.expect_punct("=")
            cursor.advance()
        expression = cursor.skip_balanced()
        columns = tuple(_bare_columns(expression) or ())
    else:
        use_columns = cursor.accept("COLUMNS") is not None
        expression = cursor.skip_balanced()
        bare = _bare_columns(expression)
        columns = tuple(bare) if bare and (use_columns or len(bare) == 1) else ()
    count = None
    if cursor.accept("PARTITIONS"):
        count = cursor.count("partitions")
    if cursor.accept("SUBPARTITION"):
        raise cursor.fail("no SUBPARTITION (subpartitions are not supported by TiDB)")
    definitions: tuple[PartitionDef, ...] = ()
    if cursor.is_punct("("):
        definitions = partition_definitions(cursor)
    return Partitioning(kind, columns, expression, definitions, count, use_columns)


def partition_definitions(cursor: Cursor) -> tuple[PartitionDef, ...]:
    """``(PARTITION p0 VALUES ..., ...)``."""
    cursor.expect_punct("(")
    definitions = []
    while True:
        definitions.append(_partition_definition(cursor))
        if cursor.accept_punct(","):
            continue
        cursor.expect_punct(")")
        return tuple(definitions)


def _partition_definition(cursor: Cursor) -> PartitionDef:
    cursor.expect("PARTITION")
    name = cursor.identifier("a partition name")
    less_than = values_in = None
    if cursor.accept("VALUES"):
        if cursor.accept("LESS"):
            cursor.expect("THAN")
            less_than = ("MAXVALUE",) if cursor.accept("MAXVALUE") else tuple(_value_list(cursor))
        else:
            cursor.expect("IN")
            values_in = tuple(_list_values(cursor))
    while not cursor.is_punct(",") and not cursor.is_punct(")"):
        if cursor.is_punct("("):
            cursor.skip_balanced()
        else:
            cursor.advance()  # partition options (COMMENT, placement, ...)
        if cursor.token.kind == END:
            raise cursor.fail("',' or ')' after a partition definition")
    return PartitionDef(name, less_than, values_in)


def _value_list(cursor: Cursor) -> list[str]:
    """``(v, ...)``: each value as a literal text, or the raw text of an expression."""
    text = cursor.skip_balanced()
    return [part.strip() for part in _split_top_level(text)]


def _list_values(cursor: Cursor) -> list[tuple[str, ...]]:
    text = cursor.skip_balanced()
    values = []
    for part in _split_top_level(text):
        part = part.strip()
        if part.startswith("(") and part.endswith(")"):
            values.append(tuple(p.strip() for p in _split_top_level(part[1:-1])))
        else:
            values.append((part,))
    return values


def _bare_columns(expression: str) -> list[str] | None:
    """``a``, `` `a`, `b` ``: the plain column names of a partitioning expression, else None."""
    names = []
    for part in _split_top_level(expression):
        match = _BARE_COLUMN.match(part)
        if match is None:
            return None
        names.append(match.group(1))
    return names or None


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses and quotes."""
    parts, depth, start, quote = [], 0, 0, None
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = None
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [part for part in parts if part.strip()]
