"""MySQL/TiDB facts shared by every protocol: type codes, TiCDC column flags, DDL action types.

See PROTOCOLS.md §1.2–1.4. Names follow TiDB's own (`mysql.TypeLonglong`, `model.ActionAddColumn`).
"""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass, replace

# Column type codes (§1.2), as carried in Open Protocol `t` and Craft `types`.
TYPE_DECIMAL_OLD = 0
TYPE_TINY = 1
TYPE_SHORT = 2
TYPE_LONG = 3
TYPE_FLOAT = 4
TYPE_DOUBLE = 5
TYPE_NULL = 6
TYPE_TIMESTAMP = 7
TYPE_LONGLONG = 8
TYPE_INT24 = 9
TYPE_DATE = 10
TYPE_DURATION = 11
TYPE_DATETIME = 12
TYPE_YEAR = 13
TYPE_NEWDATE = 14
TYPE_VARCHAR = 15
TYPE_BIT = 16
TYPE_VECTOR_FLOAT32 = 225
TYPE_JSON = 245
TYPE_NEWDECIMAL = 246
TYPE_ENUM = 247
TYPE_SET = 248
TYPE_TINY_BLOB = 249
TYPE_MEDIUM_BLOB = 250
TYPE_LONG_BLOB = 251
TYPE_BLOB = 252
TYPE_VAR_STRING = 253
TYPE_STRING = 254
TYPE_GEOMETRY = 255

INTEGER_TYPES = frozenset({TYPE_TINY, TYPE_SHORT, TYPE_INT24, TYPE_LONG, TYPE_LONGLONG})
STRING_TYPES = frozenset({TYPE_VARCHAR, TYPE_VAR_STRING, TYPE_STRING})
BLOB_TYPES = frozenset({TYPE_TINY_BLOB, TYPE_MEDIUM_BLOB, TYPE_LONG_BLOB, TYPE_BLOB})
TEMPORAL_TEXT_TYPES = frozenset(
    {TYPE_DATE, TYPE_DATETIME, TYPE_TIMESTAMP, TYPE_NEWDATE, TYPE_DURATION}
)

# TiCDC column flags (§1.3), as carried in Open Protocol `f` and Craft `flags`.
FLAG_BINARY = 0x01
FLAG_HANDLE_KEY = 0x02
FLAG_GENERATED = 0x04
FLAG_PRIMARY_KEY = 0x08
FLAG_UNIQUE_KEY = 0x10
FLAG_MULTIPLE_KEY = 0x20
FLAG_NULLABLE = 0x40
FLAG_UNSIGNED = 0x80

# DDL action types (§1.4) that the pipeline treats specially.
ACTION_CREATE_SCHEMA = 1
ACTION_DROP_SCHEMA = 2
ACTION_CREATE_TABLE = 3
ACTION_DROP_TABLE = 4
ACTION_ADD_COLUMN = 5
ACTION_DROP_COLUMN = 6
ACTION_ADD_INDEX = 7
ACTION_DROP_INDEX = 8
ACTION_TRUNCATE_TABLE = 11
ACTION_MODIFY_COLUMN = 12
ACTION_RENAME_TABLE = 14
ACTION_ADD_PARTITION = 19
ACTION_DROP_PARTITION = 20
ACTION_TRUNCATE_PARTITION = 23
ACTION_EXCHANGE_PARTITION = 42
ACTION_RENAME_TABLES = 47
ACTION_MULTI_SCHEMA_CHANGE = 61
ACTION_REORGANIZE_PARTITION = 64
ACTION_ALTER_PARTITIONING = 71
ACTION_REMOVE_PARTITIONING = 72

UINT64_MAX = (1 << 64) - 1


def is_binary_string(type_code: int, flags: int) -> bool:
    """True for BINARY/VARBINARY/BLOB: byte values rather than text.

    TiDB sets the binary flag on every numeric and temporal column too (their charset is
    `binary`), so the flag only means "bytes" for the string and blob type codes.
    """
    return bool(flags & FLAG_BINARY) and (type_code in STRING_TYPES or type_code in BLOB_TYPES)


_FLOAT32 = struct.Struct("<f")


def float32(value: float) -> float:
    """The float32 nearest to `value`, widened back to a Python float.

    FLOAT columns hold float32 values; protocols print them at float32 precision (Open
    Protocol, Canal-JSON) or widen them to float64 (Craft). Rounding through float32 makes every
    protocol decode the same column to the same Python float.
    """
    return _FLOAT32.unpack(_FLOAT32.pack(value))[0]


@dataclass(frozen=True)
class ParsedColumnType:
    """A column type as TiDB prints it (`SHOW CREATE TABLE`, Canal-JSON content-compatible)."""

    base: str  # bare lower-case name: "int", "decimal", "enum", "varbinary", "timestamp"
    length: int | None = None  # M: display width, char length, precision, bit width or fsp
    scale: int | None = None  # D of decimal(M,D)
    elements: tuple[str, ...] | None = None  # ENUM/SET members, unescaped
    unsigned: bool = False
    zerofill: bool = False


_TYPE_TEXT = re.compile(r"\s*([a-z_]+)\s*(?:\((.*)\))?\s*((?:unsigned|zerofill|signed|\s)*)\s*$")


def _quoted_elements(text: str) -> tuple[str, ...]:
    """'a','b''c','d\\'e' → ("a", "b'c", "d'e"): SQL quoting with doubled quotes or backslashes."""
    elements, i = [], 0
    while i < len(text):
        while i < len(text) and text[i] in " ,":
            i += 1
        if i == len(text):
            break
        if text[i] != "'":
            raise ValueError(f"expected a quoted element at position {i} of {text!r}")
        i += 1
        chars = []
        while True:
            if i >= len(text):
                raise ValueError(f"unterminated element in {text!r}")
            char = text[i]
            if char == "\\" and i + 1 < len(text):
                chars.append(text[i + 1])
                i += 2
            elif char == "'" and text[i + 1 : i + 2] == "'":
                chars.append("'")
                i += 2
            elif char == "'":
                i += 1
                break
            else:
                chars.append(char)
                i += 1
        elements.append("".join(chars))
    return tuple(elements)


@functools.lru_cache(maxsize=4096)  # tables have few distinct types; rows repeat them
def parse_column_type(text: str) -> ParsedColumnType:
    """Parse `bigint(20) unsigned`, `decimal(10,4)`, `enum('a','b')`, `varbinary(64)`, `text`."""
    match = _TYPE_TEXT.fullmatch(_lowercase_keywords(text))
    if match is None:
        raise ValueError(f"not a column type: {text!r}")
    base, arguments, modifiers = match.groups()
    words = modifiers.split()
    parsed = ParsedColumnType(
        base=base, unsigned="unsigned" in words or "zerofill" in words, zerofill="zerofill" in words
    )
    if arguments is None:
        return parsed
    if base in ("enum", "set"):
        return replace(parsed, elements=_quoted_elements(arguments))
    numbers = [int(part) for part in arguments.split(",")]
    return replace(parsed, length=numbers[0], scale=numbers[1] if len(numbers) > 1 else None)


def parsed_column_type_or_none(text: str | None) -> ParsedColumnType | None:
    """The parsed type, or None when there is no text or it is not a column type (a type a
    protocol sends only as a hint must not stop the row)."""
    if not text:
        return None
    try:
        return parse_column_type(text)
    except ValueError:
        return None


def _lowercase_keywords(text: str) -> str:
    """Lower-case the type name and modifiers but not the ENUM/SET members between the parens."""
    head, paren, rest = text.partition("(")
    if not paren:
        return text.lower()
    tail_at = rest.rfind(")")
    return f"{head.lower()}({rest[:tail_at]}){rest[tail_at + 1 :].lower()}"
