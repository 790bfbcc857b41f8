"""Canonical upstream columns: every TiDB type the pipeline handles, with realistic values.

The generator builds its tables from these, the tests build their property strategies from
them, and every protocol must decode them to the same values (up to what it loses).
Values follow the event model (events.py). VECTOR and GEOMETRY are not covered: TiCDC does not
replicate GEOMETRY, and VECTOR decoding is broken upstream in Craft (PROTOCOLS.md §3.3).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass

from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import Column
from ticdc_lake.silver.values import integer_bounds

BIN = mysql.FLAG_BINARY
UNS = mysql.FLAG_UNSIGNED


@dataclass(frozen=True)
class ColumnType:
    name: str  # column name in the canonical tables
    mysql_type: str  # the type as TiDB prints it
    type_code: int
    flags: int  # what the type alone implies (binary charset, unsigned); no key/nullable bits

    @property
    def parsed(self) -> mysql.ParsedColumnType:
        return mysql.parse_column_type(self.mysql_type)


COLUMN_TYPES: tuple[ColumnType, ...] = (
    ColumnType("c_tinyint", "tinyint(4)", mysql.TYPE_TINY, BIN),
    ColumnType("c_tinyint_unsigned", "tinyint(3) unsigned", mysql.TYPE_TINY, BIN | UNS),
    ColumnType("c_bool", "tinyint(1)", mysql.TYPE_TINY, BIN),
    ColumnType("c_smallint", "smallint(6)", mysql.TYPE_SHORT, BIN),
    ColumnType("c_smallint_unsigned", "smallint(5) unsigned", mysql.TYPE_SHORT, BIN | UNS),
    ColumnType("c_mediumint", "mediumint(9)", mysql.TYPE_INT24, BIN),
    ColumnType("c_mediumint_unsigned", "mediumint(8) unsigned", mysql.TYPE_INT24, BIN | UNS),
    ColumnType("c_int", "int(11)", mysql.TYPE_LONG, BIN),
    ColumnType("c_int_unsigned", "int(10) unsigned", mysql.TYPE_LONG, BIN | UNS),
    ColumnType("c_bigint", "bigint(20)", mysql.TYPE_LONGLONG, BIN),
    ColumnType("c_bigint_unsigned", "bigint(20) unsigned", mysql.TYPE_LONGLONG, BIN | UNS),
    ColumnType("c_float", "float", mysql.TYPE_FLOAT, BIN),
    ColumnType("c_double", "double", mysql.TYPE_DOUBLE, BIN),
    ColumnType("c_decimal", "decimal(20,6)", mysql.TYPE_NEWDECIMAL, BIN),
    ColumnType("c_decimal_int", "decimal(10,0)", mysql.TYPE_NEWDECIMAL, BIN),
    ColumnType("c_decimal_wide", "decimal(65,30)", mysql.TYPE_NEWDECIMAL, BIN),
    ColumnType("c_date", "date", mysql.TYPE_DATE, BIN),
    ColumnType("c_datetime", "datetime", mysql.TYPE_DATETIME, BIN),
    ColumnType("c_datetime6", "datetime(6)", mysql.TYPE_DATETIME, BIN),
    ColumnType("c_timestamp", "timestamp(3)", mysql.TYPE_TIMESTAMP, BIN),
    ColumnType("c_time", "time(2)", mysql.TYPE_DURATION, BIN),
    ColumnType("c_year", "year(4)", mysql.TYPE_YEAR, BIN | UNS),  # TiDB marks YEAR unsigned
    ColumnType("c_char", "char(10)", mysql.TYPE_STRING, 0),
    ColumnType("c_varchar", "varchar(64)", mysql.TYPE_VARCHAR, 0),
    ColumnType("c_tinytext", "tinytext", mysql.TYPE_TINY_BLOB, 0),
    ColumnType("c_text", "text", mysql.TYPE_BLOB, 0),
    ColumnType("c_mediumtext", "mediumtext", mysql.TYPE_MEDIUM_BLOB, 0),
    ColumnType("c_longtext", "longtext", mysql.TYPE_LONG_BLOB, 0),
    ColumnType("c_binary", "binary(8)", mysql.TYPE_STRING, BIN),
    ColumnType("c_varbinary", "varbinary(64)", mysql.TYPE_VARCHAR, BIN),
    ColumnType("c_tinyblob", "tinyblob", mysql.TYPE_TINY_BLOB, BIN),
    ColumnType("c_blob", "blob", mysql.TYPE_BLOB, BIN),
    ColumnType("c_mediumblob", "mediumblob", mysql.TYPE_MEDIUM_BLOB, BIN),
    ColumnType("c_longblob", "longblob", mysql.TYPE_LONG_BLOB, BIN),
    ColumnType("c_enum", "enum('a','b','c')", mysql.TYPE_ENUM, 0),
    ColumnType("c_set", "set('x','y','z')", mysql.TYPE_SET, 0),
    ColumnType("c_bit", "bit(10)", mysql.TYPE_BIT, BIN | UNS),  # TiDB marks BIT unsigned
    ColumnType("c_json", "json", mysql.TYPE_JSON, BIN),
)
BY_NAME = {column_type.name: column_type for column_type in COLUMN_TYPES}

_INT_BITS = frozenset(mysql.INTEGER_TYPES)


def integer_range(column_type: ColumnType) -> tuple[int, int]:
    """Inclusive value range of an integer, YEAR or BIT column (YEAR also holds 0)."""
    if column_type.type_code == mysql.TYPE_YEAR:
        return 1901, 2155
    if column_type.type_code == mysql.TYPE_BIT:
        return 0, (1 << column_type.parsed.length) - 1
    if column_type.mysql_type == "tinyint(1)":
        return 0, 1
    return integer_bounds(column_type.type_code, bool(column_type.flags & UNS))


def format_decimal(unscaled: int, scale: int) -> str:
    """DECIMAL text as TiCDC prints it: always exactly `scale` fraction digits."""
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    if scale == 0:
        return sign + digits
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def fraction(fsp: int | None, micros: int) -> str:
    """The `.fff` part of a temporal value with `fsp` digits (none when fsp is 0)."""
    return f".{micros:06d}"[: fsp + 1] if fsp else ""


def make_column(
    column_type: ColumnType, value, *, key: bool = False, nullable: bool = True
) -> Column:
    """A Column with the flags TiCDC gives it (PROTOCOLS.md §1.3)."""
    flags = column_type.flags
    if key:
        flags |= mysql.FLAG_HANDLE_KEY | mysql.FLAG_PRIMARY_KEY
    elif nullable:
        flags |= mysql.FLAG_NULLABLE
    return Column(column_type.type_code, flags, value, column_type.mysql_type)


# Values people get wrong: the extremes, the empties, the zero dates, the unicode.
EDGE_STRINGS = ("", "a", "Ünïcödé ✓", "中文", "emoji 🎉", 'quote " back \\ slash', "tab\tnl\n")
_EPOCH_2038 = 2147483647


def random_value(column_type: ColumnType, rng: random.Random):
    """A valid, non-NULL value for `column_type`, edge cases over-represented."""
    code = column_type.type_code
    parsed = column_type.parsed
    edge = rng.random() < 0.2
    if code in _INT_BITS or code in (mysql.TYPE_YEAR, mysql.TYPE_BIT):
        low, high = integer_range(column_type)
        zero = 0 if low <= 0 or code == mysql.TYPE_YEAR else low
        return rng.choice((low, high, zero)) if edge else rng.randint(low, high)
    if code == mysql.TYPE_FLOAT:
        return mysql.float32(
            rng.choice((0.0, 3.4028234663852886e38, -1.5)) if edge else rng.uniform(-1e6, 1e6)
        )
    if code == mysql.TYPE_DOUBLE:
        return (
            rng.choice((0.0, 1.7976931348623157e308, 5e-324, -2.5))
            if edge
            else rng.uniform(-1e12, 1e12)
        )
    if code == mysql.TYPE_NEWDECIMAL:
        limit = 10**parsed.length - 1
        unscaled = (
            rng.choice((0, limit, -limit))
            if edge
            else rng.randint(-limit, limit) // rng.choice((1, 10**6))
        )
        return format_decimal(unscaled, parsed.scale or 0)
    if code in (mysql.TYPE_DATE, mysql.TYPE_DATETIME, mysql.TYPE_TIMESTAMP):
        return _random_datetime_text(column_type, rng, edge)
    if code == mysql.TYPE_DURATION:
        hours = rng.choice((838, 0)) if edge else rng.randint(0, 838)
        sign = "-" if rng.random() < 0.3 else ""
        minutes, seconds, micros = rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999999)
        if hours == 838:  # TIME stops at 838:59:59 (drawn anyway: a seed keeps its workload)
            micros = 0
            if edge:  # MySQL's very extremes, ±838:59:59, which Avro up to TiCDC v6.0 wraps
                minutes = seconds = 59
        return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}" + fraction(parsed.length, micros)
    if code == mysql.TYPE_ENUM:
        return rng.randint(1, len(parsed.elements))
    if code == mysql.TYPE_SET:
        return rng.randint(0, (1 << len(parsed.elements)) - 1)
    if code == mysql.TYPE_JSON:
        document = {
            rng.choice(EDGE_STRINGS) or "k": rng.randint(-1000, 1000),
            "list": [1, "two", None],
        }
        return json.dumps(document, ensure_ascii=False, separators=(", ", ": "))
    if mysql.is_binary_string(code, column_type.flags):
        if code == mysql.TYPE_STRING:  # BINARY(n) is right-padded to n bytes by TiDB
            return rng.randbytes(parsed.length)
        return rng.randbytes(rng.choice((0, 1, 16, 64)) if edge else rng.randint(0, 64))
    limit = parsed.length or 200
    if edge:
        return rng.choice(EDGE_STRINGS)[:limit].rstrip(" ")
    text = "".join(
        rng.choice("abcdefghij klmnopqrstuvwxyzÅß中🎉")
        for _ in range(rng.randint(0, min(limit, 40)))
    )
    return text.rstrip(" ") if code == mysql.TYPE_STRING else text  # TiDB trims CHAR padding


def _random_datetime_text(column_type: ColumnType, rng: random.Random, edge: bool) -> str:
    fsp = None if column_type.type_code == mysql.TYPE_DATE else column_type.parsed.length or 0
    if edge and column_type.type_code != mysql.TYPE_TIMESTAMP and rng.random() < 0.5:
        return "0000-00-00" if fsp is None else "0000-00-00 00:00:00" + fraction(fsp, 0)
    if column_type.type_code == mysql.TYPE_TIMESTAMP:
        moment = dt.datetime.fromtimestamp(rng.randint(1, _EPOCH_2038 - 1), dt.UTC)
    else:
        moment = dt.datetime(
            rng.randint(1000, 9999),
            rng.randint(1, 12),
            rng.randint(1, 28),
            rng.randint(0, 23),
            rng.randint(0, 59),
            rng.randint(0, 59),
        )
    if fsp is None:
        return moment.strftime("%Y-%m-%d")
    return moment.strftime("%Y-%m-%d %H:%M:%S") + fraction(fsp, rng.randint(0, 999999))
