"""Gold column types: from a MySQL column (type code, flags, full type text) to an Arrow/Delta type.

A column is described by a ``ColumnSpec``, built either from a DDL column definition (CREATE TABLE
or ALTER, the most complete source: DECIMAL precision, ENUM/SET members, BIT width) or from what
a change row carries (type code, TiCDC flags, and the full type text when the protocol sends
it). ``gold_type(spec)`` decides the gold type:

| MySQL                               | gold (Delta)                                            |
|-------------------------------------|---------------------------------------------------------|
| TINYINT / SMALLINT / MEDIUMINT / INT | byte / short / integer / integer; unsigned one size up |
| INT UNSIGNED, BIGINT                | long                                                    |
| BIGINT UNSIGNED                     | decimal(20,0)                                           |
| FLOAT / DOUBLE                      | float / double                                          |
| DECIMAL(p,s), p <= 38               | decimal(p,s)                                            |
| DECIMAL(p,s), p > 38, or p unknown  | string, the exact text (Delta decimals stop at 38)      |
| DATE                                | date (zero dates such as 0000-00-00 become NULL)        |
| DATETIME                            | timestamp_ntz (a wall-clock time without a zone)        |
| TIMESTAMP                           | timestamp: the TiCDC zone's local text, normalised to UTC |
|                                     | (text ending in Z is in UTC already: Avro's instants)   |
| TIME                                | string as MySQL prints it (`-838:59:59.00`): no Delta |
|                                     | interval type exists                                    |
| YEAR                                | integer                                                 |
| ENUM / SET with known members       | string: the member / the members joined by ','          |
| ENUM / SET without members          | integer index / long bitmask, as TiCDC sent them        |
| BIT(M), M <= 63 / M = 64 or unknown | long / decimal(20,0)                                    |
| CHAR/VARCHAR/TEXT, JSON, VECTOR     | string                                                  |
| BINARY/VARBINARY/BLOB, GEOMETRY     | binary                                                  |
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ticdc_lake.gold.ddl import ColumnDef
from ticdc_lake.silver import mysql

MAX_DECIMAL_PRECISION = 38

# Base type names (as `mysql.parse_column_type` returns them) → MySQL type code.
_BASE_CODES = {
    "tinyint": mysql.TYPE_TINY,
    "smallint": mysql.TYPE_SHORT,
    "mediumint": mysql.TYPE_INT24,
    "int": mysql.TYPE_LONG,
    "integer": mysql.TYPE_LONG,
    "bigint": mysql.TYPE_LONGLONG,
    "float": mysql.TYPE_FLOAT,
    "double": mysql.TYPE_DOUBLE,
    "decimal": mysql.TYPE_NEWDECIMAL,
    "date": mysql.TYPE_DATE,
    "time": mysql.TYPE_DURATION,
    "datetime": mysql.TYPE_DATETIME,
    "timestamp": mysql.TYPE_TIMESTAMP,
    "year": mysql.TYPE_YEAR,
    "char": mysql.TYPE_STRING,
    "varchar": mysql.TYPE_VARCHAR,
    "binary": mysql.TYPE_STRING,
    "varbinary": mysql.TYPE_VARCHAR,
    "tinytext": mysql.TYPE_TINY_BLOB,
    "text": mysql.TYPE_BLOB,
    "mediumtext": mysql.TYPE_MEDIUM_BLOB,
    "longtext": mysql.TYPE_LONG_BLOB,
    "tinyblob": mysql.TYPE_TINY_BLOB,
    "blob": mysql.TYPE_BLOB,
    "mediumblob": mysql.TYPE_MEDIUM_BLOB,
    "longblob": mysql.TYPE_LONG_BLOB,
    "enum": mysql.TYPE_ENUM,
    "set": mysql.TYPE_SET,
    "bit": mysql.TYPE_BIT,
    "json": mysql.TYPE_JSON,
    "vector": mysql.TYPE_VECTOR_FLOAT32,
}
_BINARY_BASES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_GEOMETRY_BASES = {
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
    "multipolygon", "geometrycollection",
}  # fmt: skip


@dataclass(frozen=True)
class ColumnSpec:
    """An upstream column as far as it is known."""

    type_code: int | None
    unsigned: bool = False
    binary: bool = False  # BINARY/VARBINARY/BLOB: values are bytes
    length: int | None = None  # DECIMAL precision, BIT width, fsp, string length
    scale: int | None = None  # DECIMAL scale
    elements: tuple[str, ...] | None = None  # ENUM/SET members
    mysql_type: str | None = None  # the type text it was built from, for the record
    defined: bool = False  # from a DDL column definition

    @classmethod
    def from_ddl(cls, column: ColumnDef) -> ColumnSpec:
        parsed = mysql.parse_column_type(column.type_text)
        base = parsed.base
        code = _BASE_CODES.get(base, mysql.TYPE_GEOMETRY if base in _GEOMETRY_BASES else None)
        binary = base in _BINARY_BASES or base in _GEOMETRY_BASES
        if column.binary_charset and code in mysql.STRING_TYPES | mysql.BLOB_TYPES:
            binary = True  # VARCHAR(10) CHARACTER SET binary is a VARBINARY
        return cls(
            type_code=code,
            unsigned=parsed.unsigned,
            binary=binary,
            length=parsed.length,
            scale=parsed.scale,
            elements=parsed.elements,
            mysql_type=column.type_text,
            defined=True,
        )

    @classmethod
    def from_row(cls, type_code: int | None, flags: int | None, mysql_type: str | None):
        """What a change row tells: its type code and flags, and the full type if it was sent
        (Canal-JSON's bare `mysqlType` such as `decimal` or `enum` carries no parameters)."""
        flags = flags or 0
        parsed = mysql.parsed_column_type_or_none(mysql_type)
        if type_code is None and parsed is not None:
            type_code = _BASE_CODES.get(parsed.base)
        unsigned = bool(flags & mysql.FLAG_UNSIGNED) or bool(parsed and parsed.unsigned)
        binary = type_code is not None and mysql.is_binary_string(type_code, flags)
        if parsed is not None and parsed.base in _BINARY_BASES:
            binary = True
        return cls(
            type_code=type_code,
            unsigned=unsigned,
            binary=binary,
            length=parsed.length if parsed else None,
            scale=parsed.scale if parsed else None,
            elements=parsed.elements if parsed else None,
            mysql_type=mysql_type,
        )

    def describe(self) -> str:
        if self.mysql_type:
            return self.mysql_type
        return f"type code {self.type_code}{' unsigned' if self.unsigned else ''}"


# Conversion kinds (convert.py implements one per kind).
INTEGER = "integer"
DECIMAL = "decimal"
FLOAT = "float"
DATE = "date"
DATETIME = "datetime"
TIMESTAMP = "timestamp"
TEXT = "text"
BYTES = "bytes"
ENUM_NAME = "enum_name"
SET_NAMES = "set_names"


@dataclass(frozen=True)
class GoldType:
    """A gold column's Arrow type and how silver's text/binary becomes it."""

    kind: str
    arrow: pa.DataType
    members: tuple[str, ...] | None = None  # ENUM/SET names

    @property
    def delta(self) -> str:
        return delta_type_name(self.arrow)


_SIGNED_INTS = {
    mysql.TYPE_TINY: pa.int8(),
    mysql.TYPE_SHORT: pa.int16(),
    mysql.TYPE_INT24: pa.int32(),
    mysql.TYPE_LONG: pa.int32(),
    mysql.TYPE_LONGLONG: pa.int64(),
}
_UNSIGNED_INTS = {
    mysql.TYPE_TINY: pa.int16(),
    mysql.TYPE_SHORT: pa.int32(),
    mysql.TYPE_INT24: pa.int32(),
    mysql.TYPE_LONG: pa.int64(),
    mysql.TYPE_LONGLONG: pa.decimal128(20, 0),
}
UINT64 = pa.decimal128(20, 0)
UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")
WALL_CLOCK = pa.timestamp("us")


def gold_type(spec: ColumnSpec) -> GoldType:
    code = spec.type_code
    if code in _SIGNED_INTS:
        arrow = (_UNSIGNED_INTS if spec.unsigned else _SIGNED_INTS)[code]
        return GoldType(DECIMAL if pa.types.is_decimal(arrow) else INTEGER, arrow)
    if code == mysql.TYPE_YEAR:
        return GoldType(INTEGER, pa.int32())
    if code == mysql.TYPE_FLOAT:
        return GoldType(FLOAT, pa.float32())
    if code == mysql.TYPE_DOUBLE:
        return GoldType(FLOAT, pa.float64())
    if code in (mysql.TYPE_NEWDECIMAL, mysql.TYPE_DECIMAL_OLD):
        if spec.length is not None and spec.length <= MAX_DECIMAL_PRECISION:
            return GoldType(DECIMAL, pa.decimal128(spec.length, spec.scale or 0))
        return GoldType(TEXT, pa.string())  # exact text: no Delta decimal holds it
    if code in (mysql.TYPE_DATE, mysql.TYPE_NEWDATE):
        return GoldType(DATE, pa.date32())
    if code == mysql.TYPE_DATETIME:
        return GoldType(DATETIME, WALL_CLOCK)
    if code == mysql.TYPE_TIMESTAMP:
        return GoldType(TIMESTAMP, UTC_TIMESTAMP)
    if code == mysql.TYPE_ENUM:
        if spec.elements is not None:
            return GoldType(ENUM_NAME, pa.string(), spec.elements)
        return GoldType(INTEGER, pa.int32())
    if code == mysql.TYPE_SET:
        if spec.elements is not None:
            return GoldType(SET_NAMES, pa.string(), spec.elements)
        return GoldType(INTEGER, pa.int64())
    if code == mysql.TYPE_BIT:
        if spec.length is not None and spec.length <= 63:
            return GoldType(INTEGER, pa.int64())
        return GoldType(DECIMAL, UINT64)
    if code == mysql.TYPE_GEOMETRY or spec.binary:
        return GoldType(BYTES, pa.binary())
    # Strings, TEXT, JSON, TIME, VECTOR, NULL-typed and unknown columns: the text as sent.
    return GoldType(TEXT, pa.string())


_INTEGER_CODES = frozenset(_SIGNED_INTS)
# Gold's integer types, each holding every value of those before it.
_INTEGER_WIDTHS = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), UINT64)


def widens(before: ColumnSpec, after: ColumnSpec) -> bool:
    """Whether every value of ``before`` reads the same under ``after``: TiCDC sends it as the
    same text, and typing that text by ``after`` gives what Spark's cast of the old gold value
    gives. Integers to wider integers of the same signedness or from unsigned to signed (INT
    to BIGINT), and decimals to more digits at the same scale (DECIMAL(10,2) to (12,2))."""
    old, new = gold_type(before), gold_type(after)
    if before.type_code in _INTEGER_CODES and after.type_code in _INTEGER_CODES:
        if after.unsigned and not before.unsigned:
            return False  # a negative value would read differently
        return _INTEGER_WIDTHS.index(new.arrow) >= _INTEGER_WIDTHS.index(old.arrow)
    decimals = (mysql.TYPE_NEWDECIMAL, mysql.TYPE_DECIMAL_OLD)
    if before.type_code not in decimals or after.type_code not in decimals:
        return False
    if not (pa.types.is_decimal(old.arrow) and pa.types.is_decimal(new.arrow)):
        return False  # more than 38 digits: gold holds the text
    return new.arrow.scale == old.arrow.scale and new.arrow.precision >= old.arrow.precision


def delta_type_name(arrow: pa.DataType) -> str:
    """The Delta (Spark) type name of an Arrow type that gold uses."""
    if pa.types.is_int8(arrow):
        return "byte"
    if pa.types.is_int16(arrow):
        return "short"
    if pa.types.is_int32(arrow):
        return "integer"
    if pa.types.is_int64(arrow):
        return "long"
    if pa.types.is_float32(arrow):
        return "float"
    if pa.types.is_float64(arrow):
        return "double"
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    if pa.types.is_date32(arrow):
        return "date"
    if pa.types.is_timestamp(arrow):
        return "timestamp" if arrow.tz else "timestamp_ntz"
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return "binary"
    if pa.types.is_boolean(arrow):
        return "boolean"
    return "string"
