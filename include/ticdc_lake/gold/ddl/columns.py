"""Column definitions: a name, a type and the attributes gold keeps (nullability, keys,
character set, DEFAULT, generation); the other attributes are read past."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ticdc_lake.gold.ddl.actions import (
    EXPRESSION,
    LITERAL,
    NOW,
    NULL_DEFAULT,
    ColumnDef,
    DefaultValue,
)
from ticdc_lake.gold.ddl.column_types import column_type
from ticdc_lake.gold.ddl.cursor import Cursor
from ticdc_lake.gold.ddl.tokens import END, NUMBER, STRING, WORD
from ticdc_lake.gold.exceptions import DdlParseError

_NOW_WORDS = {"current_timestamp", "now", "localtime", "localtimestamp"}
_COLUMN_FLAG_WORDS = (
    "VISIBLE", "INVISIBLE", "VIRTUAL", "STORED", "PERSISTENT", "CLUSTERED", "NONCLUSTERED",
)  # fmt: skip


@dataclass
class ColumnDraft:
    """A column definition being read; CREATE TABLE marks its key columns NOT NULL later."""

    name: str
    type_text: str
    nullable: bool = True
    primary_key: bool = False
    unique: bool = False
    binary_charset: bool = False
    generated: bool = False
    default: DefaultValue | None = None

    def build(self) -> ColumnDef:
        return ColumnDef(
            self.name,
            self.type_text,
            nullable=self.nullable and not self.primary_key,
            primary_key=self.primary_key,
            unique=self.unique,
            binary_charset=self.binary_charset,
            generated=self.generated,
            default=self.default,
        )


def column_definition(cursor: Cursor) -> ColumnDraft:
    name = cursor.identifier("a column name")
    column = ColumnDraft(name, column_type(cursor))
    _column_attributes(cursor, column)
    return column


def column_position(cursor: Cursor) -> None:
    """ALTER TABLE's ``FIRST`` or ``AFTER column`` after a column definition."""
    if cursor.accept("FIRST"):
        return
    if cursor.accept("AFTER"):
        cursor.identifier("a column name")


def _column_attributes(cursor: Cursor, column: ColumnDraft) -> None:
    while not cursor.at_clause_end() and not cursor.is_punct(")"):
        if cursor.is_word("FIRST", "AFTER"):  # ALTER TABLE's column position follows
            return
        if not _kept_attribute(cursor, column) and not _skipped_attribute(cursor):
            raise cursor.fail("a column attribute (NOT NULL, DEFAULT, COMMENT, ...)")


def _kept_attribute(cursor: Cursor, column: ColumnDraft) -> bool:
    """Read an attribute gold keeps into ``column``; False if the next one is not such."""
    if cursor.accept("NOT"):
        cursor.expect("NULL")
        column.nullable = False
    elif cursor.accept("NULL"):
        column.nullable = True
    elif cursor.accept("PRIMARY"):
        cursor.expect("KEY")
        column.primary_key = True
    elif cursor.accept("KEY"):  # a bare KEY on a column means PRIMARY KEY
        column.primary_key = True
    elif cursor.accept("UNIQUE"):
        cursor.accept("KEY", "INDEX")
        column.unique = True
    elif cursor.accept("CHARACTER", "CHARSET"):
        cursor.accept("SET")
        cursor.accept_punct("=")
        column.binary_charset = cursor.identifier("a character set").lower() == "binary"
    elif cursor.accept("DEFAULT"):
        column.default = _default_value(cursor)
    elif cursor.accept("AS"):
        cursor.skip_balanced()
        column.generated = True
    else:
        return False
    return True


def _skipped_attribute(cursor: Cursor) -> bool:
    """Read past an attribute gold has no use for; False if the next one is not such."""
    if cursor.accept("COLLATE"):
        cursor.accept_punct("=")
        cursor.identifier("a collation")
    elif cursor.accept_sequence("ON", "UPDATE"):
        _default_value(cursor)
    elif cursor.accept("COMMENT"):
        cursor.accept_punct("=")
        cursor.advance()
    elif cursor.accept("GENERATED"):
        cursor.expect("ALWAYS")
    elif cursor.accept("CHECK"):
        cursor.skip_balanced()
    elif cursor.accept("REFERENCES"):
        cursor.table_name()
        if cursor.is_punct("("):
            cursor.skip_balanced()
        cursor.skip_to_clause_end()
    elif cursor.accept("AUTO_RANDOM", "AUTO_INCREMENT"):
        if cursor.is_punct("("):
            cursor.skip_balanced()
    elif cursor.accept("SERIAL"):
        cursor.accept_sequence("DEFAULT", "VALUE")
    elif cursor.accept("COLUMN_FORMAT", "STORAGE") or cursor.is_word(*_COLUMN_FLAG_WORDS):
        cursor.advance()
    elif cursor.accept("CONSTRAINT"):
        if not cursor.is_word("CHECK"):
            cursor.identifier("a constraint name")
    elif cursor.accept("BINARY"):  # CHAR(10) BINARY: a binary collation, still text
        pass
    else:
        return False
    return True


def _default_value(cursor: Cursor) -> DefaultValue:
    """A DEFAULT or ON UPDATE value: a literal, a function call or an expression in ()."""
    sign = ""
    while cursor.is_punct("-") or cursor.is_punct("+"):
        if cursor.advance().text == "-":
            sign = "" if sign else "-"
    if cursor.is_punct("("):
        cursor.skip_balanced()
        return DefaultValue(EXPRESSION)
    token = cursor.advance()
    word = token.text.lower() if token.kind == WORD else None
    if token.kind == END:
        raise DdlParseError(cursor.query, token.position, "a value", token.describe())
    if token.kind == STRING:
        return DefaultValue(LITERAL, token.text)
    if token.kind == NUMBER:
        return DefaultValue(LITERAL, sign + token.text)
    if word is None:
        return DefaultValue(EXPRESSION)
    if cursor.token.kind == STRING and (
        word.startswith("_") or word in ("n", "date", "time", "timestamp")
    ):
        return DefaultValue(LITERAL, cursor.advance().text)  # _utf8mb4'a', N'a', DATE '...'
    if cursor.token.kind == STRING and word in ("b", "x"):
        return DefaultValue(LITERAL, binary=_bytes_literal(word, cursor.advance().text))
    if re.fullmatch(r"0x[0-9a-f]+|0b[01]+", word):
        return DefaultValue(LITERAL, binary=_bytes_literal(word[1], word[2:]))
    if word == "null":
        return DefaultValue(NULL_DEFAULT)
    if word in ("true", "false"):
        return DefaultValue(LITERAL, "1" if word == "true" else "0")
    if cursor.is_punct("("):
        cursor.skip_balanced()  # CURRENT_TIMESTAMP(3), NOW(), UUID()
    return DefaultValue(NOW if word in _NOW_WORDS else EXPRESSION)


def _bytes_literal(base: str, digits: str) -> bytes:
    """The bytes of b'0101' or x'ff' (also 0b0101, 0xff): big-endian, as MySQL stores them."""
    if base == "x":
        return bytes.fromhex(digits if len(digits) % 2 == 0 else "0" + digits)
    value = int(digits or "0", 2)
    return value.to_bytes(max(1, (len(digits) + 7) // 8), "big")
