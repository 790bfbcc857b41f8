"""TiCDC's Avro protocol: Confluent-framed Avro records, one row change per Kafka message (§5).

Wire format. Key and value are framed separately: byte 0 is the magic 0x00, bytes 1–4 the writer
schema id (unsigned, big-endian), then the Avro binary record. The key record holds the handle-key
columns; the value record every column plus, with the TiDB extension, `_tidb_op` ("c", "u", or
with ticdc's before-value option "d"), `_tidb_commit_ts` and `_tidb_commit_physical_time`. A
DELETE is a tombstone: the key and a null value. With `avro-enable-watermark` (test-only) a value
may instead start with 0x01 (DDL JSON), 0x02 (8-byte big-endian checkpoint TS) or, from ticdc,
0x03 (8-byte big-endian commit TS of a delete, in place of the tombstone's null value).

Values. The writer schema says everything: `connect.parameters.tidb_type` names the TiDB type,
`allowed` the ENUM/SET members (commas inside a member escaped as `\\,`), `length` the BIT width.
Decoded values follow the event model, so every protocol gives the same value for the same row:
DECIMAL bytes become the exact text with `scale` digits, BIGINT UNSIGNED written as a wrapped
`long` gets 2**64 added back, BIT bytes become the big-endian integer, ENUM/SET names become the
1-based index / bitmask.

Without the TiDB extension a value carries no commit TS (commit_ts stays None) and no operation.
Such a record is decoded as an `update` without an old image: it is the full new row of a key,
which is what an upsert applies, and it claims nothing about whether the row existed before,
which an `insert` would.

Logical types are read here, not by fastavro: TIME as a signed duration (MySQL's spans
±838:59:59), timestamps as text (a TIMESTAMP instant ends in `Z`), decimals as exact text.

The 2022 layout: TiCDC up to v6.0 (tiflow `cdc/sink/codec/avro.go` before v6.1) wrote no
namespace, no `connect.parameters` and no `_tidb_*` fields, and registered its schemas under
`<schema>_<table>-key`/`-value`. A record none of whose fields carries `connect.parameters` is
read as that layout: its columns are typed from their Avro types (`_reading_by_avro_type`),
refined by the topic's `column-types`; its upstream schema is the topic's `schema:`, else the
one its schema id's subjects name, else a ConfigError (an empty schema must not reach gold). Its
temporal values are read back through its encoder's overflows (`ticdc_2022_time`,
`ticdc_2022_moment`). What it cannot carry: the operation (every value reads as an `update`),
the commit TS, DDL and watermarks, old values, sub-millisecond digits, the sign of a TIME
above -01:00:00, and which integer width, string family, DATE/DATETIME/TIMESTAMP, or DECIMAL
precision a column had where column-types does not say.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import re
import struct
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import fastavro
import orjson

from ticdc_lake.errors import ConfigError, DecodeError
from ticdc_lake.limits import Limits, check_limit
from ticdc_lake.protocols.base import (
    MALFORMED_INPUT_ERRORS,
    CodecSettings,
    Decoder,
    Encoder,
    KafkaMessage,
)
from ticdc_lake.records import KafkaRecord
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import (
    DELETE,
    INSERT,
    UPDATE,
    Column,
    DdlEvent,
    Event,
    ResolvedEvent,
    RowEvent,
)
from ticdc_lake.silver.schema_registry import SchemaSource, WriterSchema, subject_for

MAGIC_BYTE = 0x00
DDL_BYTE = 0x01
CHECKPOINT_BYTE = 0x02
DELETE_MARKER_BYTE = 0x03
HEADER_SIZE = 5

OP_FIELD = "_tidb_op"
COMMIT_TS_FIELD = "_tidb_commit_ts"
PHYSICAL_TIME_FIELD = "_tidb_commit_physical_time"
BEFORE_FIELD = "_ticdc_before"
CHECKSUM_FIELDS = ("_tidb_row_level_checksum", "_tidb_corrupted", "_tidb_checksum_version")
EXTENSION_FIELDS = frozenset({OP_FIELD, COMMIT_TS_FIELD, PHYSICAL_TIME_FIELD, *CHECKSUM_FIELDS})
OPERATIONS = {"c": INSERT, "u": UPDATE, "d": DELETE, "": UPDATE}

KEY_FLAGS = mysql.FLAG_HANDLE_KEY | mysql.FLAG_PRIMARY_KEY
_UINT64 = 1 << 64
_TS = struct.Struct(">Q")
_SCHEMA_ID = struct.Struct(">I")

# tidb_type → MySQL type code, as tiflow's decoder maps it: the Avro schema does not say which
# integer width or which string family a column had, so INT is Long and TEXT is Varchar.
TIDB_TYPE_CODES = {
    "INT": mysql.TYPE_LONG,
    "INT UNSIGNED": mysql.TYPE_LONG,
    "BIGINT": mysql.TYPE_LONGLONG,
    "BIGINT UNSIGNED": mysql.TYPE_LONGLONG,
    "FLOAT": mysql.TYPE_FLOAT,
    "DOUBLE": mysql.TYPE_DOUBLE,
    "BIT": mysql.TYPE_BIT,
    "DECIMAL": mysql.TYPE_NEWDECIMAL,
    "TEXT": mysql.TYPE_VARCHAR,
    "BLOB": mysql.TYPE_LONG_BLOB,
    "ENUM": mysql.TYPE_ENUM,
    "SET": mysql.TYPE_SET,
    "JSON": mysql.TYPE_JSON,
    "DATE": mysql.TYPE_DATE,
    "DATETIME": mysql.TYPE_DATETIME,
    "TIMESTAMP": mysql.TYPE_TIMESTAMP,
    "TIME": mysql.TYPE_DURATION,
    "YEAR": mysql.TYPE_YEAR,
    "TiDBVECTORFloat32": mysql.TYPE_VECTOR_FLOAT32,
}


# --- wire primitives -------------------------------------------------------------------------


def read_confluent_header(data: bytes, part: str) -> int:
    """The schema id of a Confluent-framed `part` (key or value).

    Byte rule: byte 0 is the magic 0x00; bytes 1–4 are the schema id, unsigned big-endian.
    """
    if len(data) < HEADER_SIZE:
        raise DecodeError(
            f"{part}: a Confluent header needs {HEADER_SIZE} bytes (magic 0x00 + 4-byte schema "
            f"id), got {len(data)}",
            byte_offset=len(data),
        )
    if data[0] != MAGIC_BYTE:
        raise DecodeError(
            f"{part}: expected the Confluent magic byte 0x00, got 0x{data[0]:02x}", byte_offset=0
        )
    return _SCHEMA_ID.unpack_from(data, 1)[0]


def confluent_header(schema_id: int) -> bytes:
    return bytes([MAGIC_BYTE]) + _SCHEMA_ID.pack(schema_id)


def read_ts_message(value: bytes, what: str) -> int:
    """The TS of a 0x02 checkpoint or 0x03 delete marker: 1 type byte + 8 bytes big-endian."""
    if len(value) != 9:
        raise DecodeError(
            f"value: a {what} is 9 bytes (0x{value[0]:02x} + 8-byte big-endian TS), "
            f"got {len(value)}",
            byte_offset=min(len(value), 9),
        )
    return _TS.unpack_from(value, 1)[0]


def read_ddl_message(value: bytes) -> dict[str, Any]:
    """A 0x01 DDL value: the type byte, then JSON {query, type, schema, table, commitTs}."""
    try:
        ddl = orjson.loads(value[1:])
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"value: DDL message JSON after byte 0x01 is invalid: {exc}") from exc
    if not isinstance(ddl, dict):
        raise DecodeError("value: DDL message must be a JSON object after byte 0x01")
    expected = {"query": str, "type": int, "schema": str, "table": str, "commitTs": int}
    for name, kind in expected.items():
        if not isinstance(ddl.get(name), kind) or isinstance(ddl.get(name), bool):
            raise DecodeError(
                f"value: DDL message needs {kind.__name__} `{name}`, got {ddl!r:.200}"
            )
    if not 0 <= ddl["commitTs"] <= mysql.UINT64_MAX:
        raise DecodeError(f"value: DDL commitTs {ddl['commitTs']} is not a uint64")
    return ddl


def decimal_text(unscaled: bytes, scale: int) -> str:
    """Avro decimal bytes (big-endian two's complement unscaled integer) as exact text.

    The text has exactly `scale` fraction digits, as TiDB prints the column: `129012.1230000`.
    """
    number = int.from_bytes(unscaled, "big", signed=True)
    if scale <= 0:
        return str(number)
    digits = str(abs(number)).rjust(scale + 1, "0")
    sign = "-" if number < 0 else ""
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def decimal_bytes(text: str, scale: int) -> bytes:
    """The inverse of `decimal_text`: minimal two's complement of the value times 10**scale."""
    body = text.strip()
    negative = body.startswith("-")
    whole, _, fraction = body.lstrip("+-").partition(".")
    if len(fraction) > scale or not (whole + fraction).isdigit() or not body.isascii():
        raise ValueError(f"{text!r} is not a decimal with at most {scale} fraction digits")
    number = int(whole + fraction.ljust(scale, "0"))
    number = -number if negative else number
    return number.to_bytes(number.bit_length() // 8 + 1, "big", signed=True)


def bit_value(data: bytes) -> int:
    """BIT bytes as an integer: big-endian, any length (tiflow writes the minimal length)."""
    return int.from_bytes(data, "big")


def bit_bytes(value: int) -> bytes:
    """An integer as BIT bytes the way tiflow writes them: big-endian, minimal, at least one."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def split_allowed(text: str) -> tuple[str, ...]:
    """The ENUM/SET members of `connect.parameters.allowed`: comma-separated, `\\,` inside one.

    TiCDC escapes only commas, so a member ending in a backslash cannot be told apart; such
    members do not occur in practice.
    """
    members, current, i = [], [], 0
    while i < len(text):
        char = text[i]
        if char == "\\" and text[i + 1 : i + 2] == ",":
            current.append(",")
            i += 2
            continue
        if char == ",":
            members.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    members.append("".join(current))
    return tuple(members)


def join_allowed(members: Sequence[str]) -> str:
    return ",".join(member.replace(",", "\\,") for member in members)


def sql_type_list(base: str, members: Sequence[str]) -> str:
    quoted = ("'" + member.replace("\\", "\\\\").replace("'", "''") + "'" for member in members)
    return f"{base}({','.join(quoted)})"


def sanitize_name(name: str) -> str:
    """An Avro name as TiCDC makes it: characters outside [A-Za-z0-9_] become `_`; a leading
    character that cannot start a name gets `_` in front if it is a digit, else is replaced."""
    out = []
    for i, char in enumerate(name):
        valid_first = char.isascii() and (char.isalpha() or char == "_")
        if i == 0 and not valid_first:
            out.append("_" + char if char.isascii() and char.isdigit() else "_")
        elif not (valid_first or (char.isascii() and char.isdigit())):
            out.append("_")
        else:
            out.append(char)
    return "".join(out)


# --- reading schemas -------------------------------------------------------------------------


class FieldPlan(NamedTuple):
    """How one column field of a writer schema becomes a Column (a tuple: unpacked per row)."""

    name: str
    type_code: int | None
    flags: int
    mysql_type: str | None
    convert: Callable[[Any], Any] | None


@dataclass(frozen=True)
class RecordPlan:
    """A writer schema compiled once: the fastavro reader schema and the per-column plans."""

    schema_id: int
    schema: str | None  # None: the writer schema names no namespace (TiCDC up to v6.0)
    table: str
    reader: Any  # fastavro-parsed schema without logical types: values as written
    columns: tuple[FieldPlan, ...]
    has_before: bool  # ticdc's `_ticdc_before` record (the old row) follows the columns
    layout_2022: bool = False  # no field says its TiDB type: TiCDC up to v6.0 wrote it


def _unwrap_union(avro_type: Any) -> tuple[Any, bool]:
    """(the non-null branch, nullable) of a field type; either branch order is accepted."""
    if not isinstance(avro_type, list):
        return avro_type, False
    branches = [branch for branch in avro_type if branch != "null"]
    if len(branches) != 1:
        return avro_type, "null" in avro_type
    return branches[0], len(branches) != len(avro_type)


def _unsigned_long(value: int) -> int:
    return value + _UINT64 if value < 0 else value


def _unsigned_text(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or int(value) > mysql.UINT64_MAX:
        raise ValueError(f"{value!r} is not a BIGINT UNSIGNED")
    return int(value)


def _decimal_reader(scale: int) -> Callable[[bytes], str]:
    return lambda unscaled: decimal_text(unscaled, scale)


def _enum_reader(members: tuple[str, ...]) -> Callable[[str], int]:
    indexes = {member: i for i, member in enumerate(members, 1)}

    def enum_index(name: str) -> int:
        index = indexes.get(name)
        if index is None:
            if name == "":  # TiDB's invalid-value marker, index 0
                return 0
            raise ValueError(f"ENUM value {name!r} is not one of {list(members)}")
        return index

    return enum_index


def _set_reader(members: tuple[str, ...]) -> Callable[[str], int]:
    bits = {member: 1 << i for i, member in enumerate(members)}

    def set_bitmask(names: str) -> int:
        mask = 0
        for name in names.split(",") if names else ():
            bit = bits.get(name)
            if bit is None:
                raise ValueError(f"SET member {name!r} is not one of {list(members)}")
            mask |= bit
        return mask

    return set_bitmask


# --- TiCDC up to v6.0: the 2022 layout ---------------------------------------------------------
#
# Before v6.1, TiCDC's Avro (tiflow cdc/sink/codec/avro.go, v4.0.3 to v6.0.0) wrote no namespace,
# no `connect.parameters` and no `_tidb_*` fields (it refused the TiDB extension for Avro), so a
# column's TiDB type is only what its Avro type implies (`_reading_by_avro_type`), refined where
# the topic's `column-types` says more. Its value rules, read back below:
#   DATE, DATETIME, TIMESTAMP  long timestamp-millis: the text parsed as a Go time.Time (DATE
#                              and DATETIME in UTC, TIMESTAMP in the TiCDC zone; v4.0.3-v4.0.12
#                              and v5.0.0-v5.0.1 parsed all in UTC), then goavro's
#                              UnixNano() / 1e6; the zero date is Go's zero time.Time
#   TIME                       int time-millis: `[-]H:M:S[.f]` scanned as signed hours plus
#                              unsigned minutes, seconds and fraction, whole ms, cut to int32
#   BIGINT UNSIGNED, BIT       bytes decimal, precision 64, scale 0 (up to v5.4: precision 8,
#                              and ENUM and SET too, as their index and bitmask)
#   DECIMAL, ENUM, SET, JSON   string: the exact text; from v6.0 the ENUM and SET member names
#   CHAR to TEXT, BINARY..BLOB string or bytes by the binary flag (up to v5.4: CHAR/VARCHAR/
#                              BINARY/VARBINARY string, TEXT and BLOB bytes)
#   YEAR                       long

_GO_ZERO_TIME_NANOS = -62_135_596_800 * 10**9  # Go's time.Time{}: 0001-01-01 00:00:00 UTC
_NANOS_PER_MILLI = 10**6
_MILLIS_PER_HOUR = 3_600_000
_TIME_LIMIT_MILLIS = 838 * _MILLIS_PER_HOUR + 59 * 60_000 + 59_000  # MySQL: ±838:59:59
_DAY_NANOS = 86_400 * 10**9
_SECOND_NANOS = 10**9
_YEARS_1_TO_9999_NANOS = (_GO_ZERO_TIME_NANOS, 253_402_300_800 * 10**9 - 1)


def go_int64(number: int) -> int:
    """`number` as Go's int64 arithmetic leaves it: wrapped to 64 bits, two's complement."""
    return (number + (1 << 63)) % (1 << 64) - (1 << 63)


def go_int32(number: int) -> int:
    """`number` converted with Go's int32(): its low 32 bits, two's complement."""
    return (number + (1 << 31)) % (1 << 32) - (1 << 31)


def go_quotient(dividend: int, divisor: int) -> int:
    """Go's integer division, which truncates toward zero (Python's // floors)."""
    quotient = abs(dividend) // divisor
    return quotient if dividend >= 0 else -quotient


def go_timestamp_millis(nanos: int) -> int:
    """goavro's timestamp-millis of a time.Time `nanos` ns from 1970: `UnixNano() / 1e6`, whose
    UnixNano wraps past int64, outside 1677-09-21 00:12:43.145224192 – 2262-04-11 UTC."""
    return go_quotient(go_int64(nanos), _NANOS_PER_MILLI)


ZERO_DATE_MILLIS_2022 = go_timestamp_millis(_GO_ZERO_TIME_NANOS)  # 1754-08-30 22:43:41.129


def ticdc_2022_time(millis: int, fsp: int | None = None) -> str:
    """The TIME a time-millis value of TiCDC up to v6.0 holds, as `[-]HH:MM:SS[.f]`.

    That encoder added signed hours to unsigned minutes, seconds and fraction, so `-01:30:00`
    was written as -1 h + 30 min; it kept whole milliseconds (toward zero) and cut them to 32
    bits, so past ±596:31:23.647 a TIME wrapped around. A negative TIME under one hour (-00:MM:SS)
    lost its sign, and reads as positive. The readings left are the value as written and as
    wrapped. Both lie within ±838:59:59 for about 355 h to 596 h either side (838:59:59 was
    written as -1274568296, which also reads -355:57:11.704): then the one on the column's
    precision is the TIME, 10^(3 - fsp) ms for a TIME(0) to TIME(2) (`fsp` from column-types),
    else whole seconds, as most TIMEs hold; a value neither or both readings of which are on it
    is refused rather than guessed.
    """
    wrapped = millis - (1 << 32) if millis >= 0 else millis + (1 << 32)
    readings = [
        reading
        for reading in (_with_negative_hours(millis), _with_negative_hours(wrapped))
        if abs(reading) <= _TIME_LIMIT_MILLIS
    ]
    if len(readings) == 2:
        step = 10 ** (3 - fsp) if fsp is not None and fsp < 3 else 1000
        on_step = [reading for reading in readings if reading % step == 0]
        if len(on_step) != 1:
            shown = " or ".join(time_text(reading, 3) for reading in readings)
            raise ValueError(
                f"time-millis {millis} is {shown}: TiCDC up to v6.0 cut TIME to 32 bits of ms; "
                "the column's time(fsp) in the topic's column-types may tell them apart"
            )
        readings = on_step
    if not readings:
        raise ValueError(f"time-millis {millis} is no TIME within ±838:59:59")
    return time_text(readings[0], 3, fsp)


def _with_negative_hours(millis: int) -> int:
    """The TIME in ms of a written duration: a negative one was -hours + (minutes, seconds,
    fraction), the part under an hour added instead of subtracted."""
    if millis >= 0:
        return millis
    hours, under_an_hour = divmod(millis, _MILLIS_PER_HOUR)  # hours < 0, 0 <= under < 1 h
    return hours * _MILLIS_PER_HOUR - under_an_hour


def ticdc_2022_moment(millis: int, type_code: int, fsp: int | None = None) -> str:
    """The DATE, DATETIME or TIMESTAMP text of a timestamp-millis value of TiCDC up to v6.0.

    A TIMESTAMP is an instant, given in UTC (`...Z`); a DATE or DATETIME the wall-clock time
    written as if in UTC. Go's zero time stands for the zero date. A DATE or DATETIME outside
    1677-09-21 to 2262-04-11 overflowed (`go_timestamp_millis`): declared a DATE or a
    DATETIME(0) (column-types), it is found again as the one whole day or second the dropped
    bits and wraps allow, and refused if there is none or more than one; else it cannot be told
    from a value inside those years, and reads as the wrong time.
    """
    if millis == ZERO_DATE_MILLIS_2022:
        return "0000-00-00" if type_code == mysql.TYPE_DATE else "0000-00-00 00:00:00"
    if type_code == mysql.TYPE_DATE:
        return moment_text(_overflowed(millis, _DAY_NANOS), 9, utc=False)[:10]
    if type_code == mysql.TYPE_DATETIME and fsp in (None, 0):
        return moment_text(_overflowed(millis, _SECOND_NANOS), 9, 0, utc=False)
    return moment_text(millis, 3, fsp, utc=type_code == mysql.TYPE_TIMESTAMP)


def _overflowed(millis: int, step: int) -> int:
    """The ns since 1970, on a whole `step` ns, that TiCDC up to v6.0 wrote as `millis`.

    A value on a whole step reads as written. Else it overflowed: the true ns are millis × 1e6,
    plus the part of a ms the division dropped (toward zero), plus some multiple of 2^64, and
    lie within the years 1 to 9999.
    """
    nanos = millis * _NANOS_PER_MILLI
    if nanos % step == 0:
        return nanos
    low = nanos - (_NANOS_PER_MILLI - 1 if millis <= 0 else 0)
    high = nanos + (_NANOS_PER_MILLI - 1 if millis >= 0 else 0)
    first, last = _YEARS_1_TO_9999_NANOS
    found = []
    for wraps in range((first >> 64) - 1, (last >> 64) + 2):  # N - wraps·2^64 is an int64
        shift = wraps * (1 << 64)
        candidate = -(-(low + shift) // step) * step  # the first whole step from the low end
        if candidate <= high + shift and first <= candidate <= last:
            found.append(candidate)
    if len(found) != 1:
        unit = "day" if step == _DAY_NANOS else "second"
        raise ValueError(
            f"timestamp-millis {millis} is not on a whole {unit}, and {len(found)} of the "
            "values TiCDC up to v6.0 overflowed outside 1677-2262 could be it"
        )
    return found[0]


# --- logical types ---------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1)
_UNIT_DIGITS = {"millis": 3, "micros": 6}


def _fraction(units: int, unit_digits: int, fsp: int | None) -> str:
    """`.fff` of `units` (10**-unit_digits s): all `unit_digits` digits when `fsp` is None and
    there is a fraction, else exactly `fsp` digits, which must hold all of it."""
    if fsp is None:
        return f".{units:0{unit_digits}d}" if units else ""
    digits = f"{units:0{unit_digits}d}".ljust(fsp, "0")
    if digits[fsp:].strip("0"):
        raise ValueError(f"the fraction .{digits.rstrip('0')} has more than {fsp} digits")
    return f".{digits[:fsp]}" if fsp else ""


def time_text(amount: int, unit_digits: int, fsp: int | None = None) -> str:
    """A signed duration of `amount` × 10**-unit_digits s as MySQL prints a TIME:
    `[-]HH:MM:SS[.f]`, hours past 24 and the sign kept (`-838:59:59`, `100:00:00.5`)."""
    sign = "-" if amount < 0 else ""
    seconds, units = divmod(abs(amount), 10**unit_digits)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}{_fraction(units, unit_digits, fsp)}"


def moment_text(amount: int, unit_digits: int, fsp: int | None = None, *, utc: bool) -> str:
    """`amount` × 10**-unit_digits s since 1970-01-01 00:00 as `YYYY-MM-DD HH:MM:SS[.f]`, and a
    `Z` when it is an instant in UTC (silver's TIMESTAMP text is otherwise local time in the
    TiCDC zone). ValueError outside the years 1 to 9999."""
    seconds, units = divmod(amount, 10**unit_digits)  # floor: before 1970 counts back
    try:
        moment = _EPOCH + dt.timedelta(seconds=seconds)
    except OverflowError:
        unit = {3: "ms", 6: "µs", 9: "ns"}[unit_digits]
        raise ValueError(f"{amount} {unit} from 1970 is outside the years 1 to 9999") from None
    text = moment.isoformat(sep=" ") + _fraction(units, unit_digits, fsp)
    return text + "Z" if utc else text


def date_text(days: int) -> str:
    """Avro's `date`: days since 1970-01-01."""
    try:
        return (_EPOCH + dt.timedelta(days=days)).date().isoformat()
    except OverflowError:
        raise ValueError(f"{days} days from 1970 is outside the years 1 to 9999") from None


class _Reading(NamedTuple):
    """What a field's Avro type says of its column, and how its values are read."""

    type_code: int | None
    flags: int
    convert: Callable[[Any], Any] | None
    mysql_type: str | None = None


def _logical_reading(branch: Any) -> _Reading | None:
    """The reading of an Avro logical type, or None for a type without one we read. A logical
    type on another primitive than its own is ignored, as the Avro specification says."""
    if not isinstance(branch, dict):
        return None
    logical, primitive = branch.get("logicalType"), branch.get("type")
    if logical == "decimal" and primitive == "bytes":
        precision, scale = branch.get("precision"), int(branch.get("scale", 0))
        return _Reading(
            mysql.TYPE_NEWDECIMAL, 0, _decimal_reader(scale), f"decimal({precision},{scale})"
        )
    if logical == "date" and primitive == "int":
        return _Reading(mysql.TYPE_DATE, 0, date_text, "date")
    kind, _, unit = str(logical).rpartition("-")
    digits = _UNIT_DIGITS.get(unit)
    if digits is None:
        return None
    if kind == "time" and primitive == ("int" if unit == "millis" else "long"):
        return _Reading(mysql.TYPE_DURATION, 0, lambda amount: time_text(amount, digits))
    if kind == "timestamp" and primitive == "long":
        return _Reading(
            mysql.TYPE_TIMESTAMP, 0, lambda amount: moment_text(amount, digits, utc=True)
        )
    if kind == "local-timestamp" and primitive == "long":
        return _Reading(
            mysql.TYPE_DATETIME, 0, lambda amount: moment_text(amount, digits, utc=False)
        )
    return None


# The TiDB type an Avro type implies where the field does not say it (TiCDC up to v6.0): int
# holds TINYINT to INT and the unsigned TINYINT to MEDIUMINT, long INT UNSIGNED, BIGINT and
# YEAR, string CHAR to TEXT, DECIMAL, ENUM, SET and JSON, bytes BINARY to BLOB.
_AVRO_TYPE_CODES = {
    "int": mysql.TYPE_LONG,
    "long": mysql.TYPE_LONGLONG,
    "float": mysql.TYPE_FLOAT,
    "double": mysql.TYPE_DOUBLE,
    "string": mysql.TYPE_VARCHAR,
    "bytes": mysql.TYPE_LONG_BLOB,
    "boolean": mysql.TYPE_TINY,
}
# TiCDC up to v6.0 wrote BIGINT UNSIGNED and BIT (v5.x also ENUM and SET) as these decimals.
_UNSIGNED_DECIMAL_PRECISIONS = (64, 8)


def _reading_by_avro_type(branch: Any, layout_2022: bool) -> _Reading:
    """A field's reading when it does not say its TiDB type. A type TiCDC never writes (a
    record, enum, fixed or several-branch union) keeps no type code and its value as read."""
    primitive = branch.get("type") if isinstance(branch, dict) else branch
    logical = branch.get("logicalType") if isinstance(branch, dict) else None
    if layout_2022 and (primitive, logical) == ("bytes", "decimal"):
        unsigned = branch.get("precision") in _UNSIGNED_DECIMAL_PRECISIONS
        if unsigned and branch.get("scale", 0) == 0:
            return _Reading(mysql.TYPE_LONGLONG, mysql.FLAG_UNSIGNED, _unsigned_decimal)
    if layout_2022 and (primitive, logical) == ("long", "timestamp-millis"):
        return _Reading(mysql.TYPE_TIMESTAMP, 0, _timestamp_2022)
    if layout_2022 and (primitive, logical) == ("int", "time-millis"):
        return _Reading(mysql.TYPE_DURATION, 0, ticdc_2022_time)
    logical_reading = _logical_reading(branch)
    if logical_reading is not None:
        return logical_reading
    code = _AVRO_TYPE_CODES.get(primitive) if isinstance(primitive, str) else None
    flags = mysql.FLAG_BINARY if code == mysql.TYPE_LONG_BLOB else 0
    return _Reading(code, flags, int if primitive == "boolean" else None)


def _unsigned_decimal(unscaled: bytes) -> int:
    """A BIGINT UNSIGNED or BIT of TiCDC up to v6.0: a uint64 in at most 9 bytes (the top bit
    of a 9th is the sign); anything longer is refused before it becomes a huge integer."""
    if len(unscaled) > 9:
        raise ValueError(f"a decimal of {len(unscaled)} bytes holds no uint64 (at most 9)")
    return int.from_bytes(unscaled, "big", signed=True)


def _timestamp_2022(millis: int) -> str:
    return ticdc_2022_moment(millis, mysql.TYPE_TIMESTAMP)


# What the topic's column-types may declare a 2022-layout column, by what its Avro type implies
# (type code, unsigned): only what that type can hold.
_DECLARABLE = {
    (mysql.TYPE_VARCHAR, False): ("decimal", "json"),
    (mysql.TYPE_LONG, False): ("tinyint", "smallint", "mediumint", "int"),
    (mysql.TYPE_LONGLONG, False): ("int", "bigint", "year"),
    (mysql.TYPE_LONGLONG, True): ("bigint", "bit"),
    (mysql.TYPE_TIMESTAMP, False): ("date", "datetime", "timestamp"),
    (mysql.TYPE_DURATION, False): ("time",),
}
DECLARABLE_TYPES = frozenset(base for bases in _DECLARABLE.values() for base in bases)
_DECLARED_CODES = {
    "tinyint": mysql.TYPE_TINY,
    "smallint": mysql.TYPE_SHORT,
    "mediumint": mysql.TYPE_INT24,
    "int": mysql.TYPE_LONG,
    "bigint": mysql.TYPE_LONGLONG,
    "year": mysql.TYPE_YEAR,
    "date": mysql.TYPE_DATE,
    "datetime": mysql.TYPE_DATETIME,
    "timestamp": mysql.TYPE_TIMESTAMP,
}
DECIMAL_DEFAULT = (10, 0)  # MySQL's DECIMAL without (M,D) is DECIMAL(10,0)


def _declared_reading(column: str, reading: _Reading, declared: str) -> _Reading:
    """`reading` refined by the type column-types declares, which its Avro type must hold."""
    parsed = mysql.parse_column_type(declared)
    base = parsed.base
    kind = (reading.type_code, bool(reading.flags & mysql.FLAG_UNSIGNED))
    allowed = _DECLARABLE.get(kind, ())
    if base not in allowed:
        can = f"one of {', '.join(allowed)}" if allowed else "nothing: its Avro type says it"
        raise ConfigError(
            f"column-types declares column {column!r} {declared!r}, which its Avro field "
            f"({_described(reading)}) cannot hold; it may be declared {can}"
        )
    if base == "decimal":
        precision = parsed.length or DECIMAL_DEFAULT[0]
        scale = parsed.scale if parsed.scale is not None else DECIMAL_DEFAULT[1]
        return _Reading(mysql.TYPE_NEWDECIMAL, 0, None, f"decimal({precision},{scale})")
    if base == "json":
        return _Reading(mysql.TYPE_JSON, 0, None, "json")
    if base == "bit":
        flags = mysql.FLAG_UNSIGNED | mysql.FLAG_BINARY
        return _Reading(mysql.TYPE_BIT, flags, _unsigned_decimal, f"bit({parsed.length or 1})")
    if base == "time":
        fsp = parsed.length or 0
        return _Reading(mysql.TYPE_DURATION, 0, lambda millis: ticdc_2022_time(millis, fsp))
    code = _DECLARED_CODES[base]
    if code in (mysql.TYPE_DATE, mysql.TYPE_DATETIME, mysql.TYPE_TIMESTAMP):
        fsp = None if code == mysql.TYPE_DATE else parsed.length or 0
        return _Reading(code, 0, lambda millis: ticdc_2022_moment(millis, code, fsp))
    unsigned = parsed.unsigned or code == mysql.TYPE_YEAR or kind[1]
    return _Reading(code, mysql.FLAG_UNSIGNED if unsigned else 0, reading.convert)


def _described(reading: _Reading) -> str:
    names = {
        (mysql.TYPE_VARCHAR, False): "string",
        (mysql.TYPE_LONG, False): "int",
        (mysql.TYPE_LONGLONG, False): "long",
        (mysql.TYPE_LONGLONG, True): "bytes decimal, scale 0",
        (mysql.TYPE_TIMESTAMP, False): "long timestamp-millis",
        (mysql.TYPE_DURATION, False): "int time-millis",
    }
    kind = (reading.type_code, bool(reading.flags & mysql.FLAG_UNSIGNED))
    return names.get(kind, f"of type code {reading.type_code}")


def compile_field(
    name: str, avro_type: Any, *, layout_2022: bool = False, declared: str | None = None
) -> FieldPlan:
    """The plan of one column field, from its Avro type and `connect.parameters`; in the 2022
    layout (`layout_2022`) from its Avro type, or from `declared`, the type the topic's
    column-types gives it."""
    branch, nullable = _unwrap_union(avro_type)
    flags = mysql.FLAG_NULLABLE if nullable else 0
    params = branch.get("connect.parameters") if isinstance(branch, dict) else None
    primitive = branch.get("type") if isinstance(branch, dict) else branch
    tidb_type = params.get("tidb_type") if isinstance(params, dict) else None
    if tidb_type is None:
        reading = _reading_by_avro_type(branch, layout_2022)
        if declared is not None:
            reading = _declared_reading(name, reading, declared)
        code, more_flags, convert, mysql_type = reading
        return FieldPlan(name, code, flags | more_flags, mysql_type, _keep_null(convert))
    convert, mysql_type = None, None
    logical = _logical_reading(branch)
    if logical is not None:
        _, _, convert, mysql_type = logical
    if tidb_type not in TIDB_TYPE_CODES:
        raise DecodeError(f"field {name!r} has an unknown tidb_type {tidb_type!r}")
    if tidb_type.endswith("UNSIGNED"):
        flags |= mysql.FLAG_UNSIGNED
    if tidb_type == "BIGINT UNSIGNED":
        convert = _unsigned_long if primitive == "long" else _unsigned_text
    elif tidb_type == "FLOAT" and primitive == "double":
        # Before v7.0 FLOAT was written as a double. A float field needs no rounding: fastavro
        # widens the float32 it read, which is exactly what mysql.float32 gives.
        convert = mysql.float32
    elif tidb_type == "BIT":
        convert = bit_value
        mysql_type = f"bit({params['length']})" if "length" in params else None
    elif tidb_type == "BLOB":
        flags |= mysql.FLAG_BINARY
    elif tidb_type in ("ENUM", "SET"):
        members = split_allowed(params.get("allowed", ""))
        convert = (_enum_reader if tidb_type == "ENUM" else _set_reader)(members)
        mysql_type = sql_type_list(tidb_type.lower(), members)
    elif tidb_type == "JSON":
        mysql_type = "json"
    return FieldPlan(name, TIDB_TYPE_CODES[tidb_type], flags, mysql_type, _keep_null(convert))


def _keep_null(convert: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """`convert` passing NULL through, so rows are built without a per-value None test."""
    if convert is None:
        return None
    return lambda value: None if value is None else convert(value)


def _without_logical_types(schema: Any) -> Any:
    """A copy of `schema` without logical types, so fastavro hands us the values as written.

    We read them ourselves (`_logical_reading`): decimals into exact text, faster than
    fastavro's Decimal and never rounded to the declared precision; times as signed durations,
    where fastavro's `datetime.time` refuses every TIME that is negative or 24 hours or more
    (MySQL's TIME spans -838:59:59 to 838:59:59); timestamps into text, where fastavro's
    `datetime` cannot hold the years TiCDC's overflows produce.
    """
    if isinstance(schema, list):
        return [_without_logical_types(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    copied = {key: _without_logical_types(value) for key, value in schema.items()}
    copied.pop("logicalType", None)
    return copied


def _names(definition: dict) -> tuple[str | None, str]:
    """(schema, table) from the record's namespace `<changefeed namespace>.<schema>` and name;
    the schema is None when the record has no namespace (TiCDC up to v6.0 wrote none)."""
    name = definition.get("name")
    if not isinstance(name, str):
        raise DecodeError("the writer schema record has no name")
    namespace = definition.get("namespace") or ""
    if "." in name:
        namespace, _, name = name.rpartition(".")
    _, dot, schema = namespace.partition(".")
    return (schema if dot else namespace) or None, name


def schema_in_subject(subject: str, table: str) -> str | None:
    """The upstream schema in a subject TiCDC up to v6.0 registered: `<schema>_<table>-key` or
    `-value` (TopicNameStrategy came with v6.1). None for a subject not of that form."""
    for suffix in ("-key", "-value"):
        ending = f"_{table}{suffix}"
        if subject.endswith(ending) and len(subject) > len(ending):
            return subject[: -len(ending)]
    return None


def _says_tidb_types(fields: list) -> bool:
    """Whether any field carries `connect.parameters` (TiCDC from v6.1 gives every column one)."""
    for field in fields:
        branch, _ = _unwrap_union(field["type"])
        if isinstance(branch, dict) and "connect.parameters" in branch:
            return True
    return False


class _ShapeCheck:
    """Refuses writer schemas a hostile registry could use to make reading a record unbounded.

    fastavro reads nested and recursive types by recursion in C (a record nested a few
    thousand levels deep crashes the process), and reads an array or map block of any count it
    is given (2^40 items of `null` take no bytes). TiCDC writes neither: a flat record of
    columns, at most one nested record (`_ticdc_before`), no arrays, maps or self-reference.
    So a schema whose types nest deeper than `limits.max_nesting_depth`, that holds an array
    or a map, or whose named type contains itself is refused when its id is first compiled,
    and no record of it is ever read.
    """

    def __init__(self, schema_id: int, limits: Limits):
        self.schema_id = schema_id
        self.limits = limits
        self.heights: dict[str, int] = {}  # named types defined so far → levels they nest
        self.open: set[str] = set()  # records being defined: a reference to one recurses

    def height(self, avro_type: Any, namespace: str, depth: int) -> int:
        """How many levels `avro_type`, found `depth` levels down, nests (a primitive is one)."""
        self._check_depth(depth)
        if isinstance(avro_type, list):  # a union
            return 1 + max((self.height(b, namespace, depth + 1) for b in avro_type), default=0)
        kind = avro_type.get("type") if isinstance(avro_type, dict) else avro_type
        if isinstance(kind, (dict, list)):  # a type object whose type is a type
            return 1 + self.height(kind, namespace, depth + 1)
        if not isinstance(kind, str) or kind in _PRIMITIVES:
            return 1  # a primitive, or no type at all (which fastavro's parse refuses)
        if kind in ("array", "map"):
            raise DecodeError(
                f"schema id {self.schema_id} holds an Avro {kind}, whose item counts the message "
                "gives with no bound (limits.max-collection-count cannot be checked while "
                "reading); TiCDC never writes one, so this is not a TiCDC schema"
            )
        if isinstance(avro_type, dict) and kind in ("record", "error", "enum", "fixed"):
            return self._named(avro_type, namespace, depth)
        return self._reference(kind, namespace, depth)

    def _named(self, named: dict, namespace: str, depth: int) -> int:
        name = str(named.get("name"))
        if "." not in name and named.get("namespace", namespace):
            name = f"{named.get('namespace', namespace)}.{name}"
        fields = named.get("fields") if named["type"] in ("record", "error") else None
        self.open.add(name)
        height = 1 + max(
            (
                self.height(field.get("type"), name.rpartition(".")[0], depth + 1)
                for field in (fields if isinstance(fields, list) else ())
                if isinstance(field, dict)
            ),
            default=0,
        )
        self.open.discard(name)
        self.heights[name] = height
        return height

    def _reference(self, name: str, namespace: str, depth: int) -> int:
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        if full in self.open or name in self.open:
            raise DecodeError(
                f"schema id {self.schema_id}: the named type {name!r} contains itself, so its "
                "records may nest without bound, past limits.max-nesting-depth; TiCDC never "
                "writes one, so this is not a TiCDC schema"
            )
        height = self.heights.get(full, self.heights.get(name, 1))  # unknown: fastavro says so
        self._check_depth(depth + height - 1)
        return height

    def _check_depth(self, depth: int) -> None:
        what = f"schema id {self.schema_id}: type nesting depth"
        check_limit(what, self.limits, "max_nesting_depth", depth)


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def compile_record(
    writer: WriterSchema,
    limits: Limits,
    column_types: Mapping[tuple[str, str], str] | None = None,
) -> RecordPlan:
    """The plan of a writer schema, once its shape is known to be safe to read (_ShapeCheck).

    A record none of whose fields says its TiDB type is TiCDC's 2022 layout (up to v6.0): its
    columns are typed from their Avro types, and from `column_types` ((table, column) → the
    column's type) where given.
    """
    definition = writer.definition
    if not isinstance(definition, dict) or definition.get("type") != "record":
        raise DecodeError(f"schema id {writer.schema_id} is not an Avro record schema")
    fields = definition.get("fields")
    if not isinstance(fields, list):
        raise DecodeError(f"schema id {writer.schema_id} has no field list")
    what = f"schema id {writer.schema_id}: field count"
    check_limit(what, limits, "max_collection_count", len(fields))
    _ShapeCheck(writer.schema_id, limits).height(definition, "", 1)
    try:
        reader = fastavro.parse_schema(_without_logical_types(definition))
    except (fastavro.schema.SchemaParseException, fastavro.schema.UnknownType) as exc:
        raise DecodeError(
            f"schema id {writer.schema_id} is not a valid Avro schema: {exc}"
        ) from exc
    schema, table = _names(definition)
    layout_2022 = not _says_tidb_types(fields)
    declared = {
        column: text
        for (of_table, column), text in (column_types or {}).items()
        if of_table == table and layout_2022
    }
    columns, before = [], None
    for field in fields:
        name = field["name"]
        if name == BEFORE_FIELD:
            before, _ = _unwrap_union(field["type"])
        elif name not in EXTENSION_FIELDS:
            plan = compile_field(
                name, field["type"], layout_2022=layout_2022, declared=declared.get(name)
            )
            columns.append(plan)
    if before is not None:
        _check_before_record(writer.schema_id, before, columns)
    return RecordPlan(
        writer.schema_id, schema, table, reader, tuple(columns), before is not None, layout_2022
    )


def _check_before_record(schema_id: int, before: Any, columns: list[FieldPlan]) -> None:
    """The old row is read with the columns' plans, so its record must have the same fields."""
    names = [f.get("name") for f in before.get("fields", ())] if isinstance(before, dict) else None
    if names != [column.name for column in columns]:
        raise DecodeError(
            f"schema id {schema_id}: {BEFORE_FIELD} must be a record of the row's columns"
        )


# --- decoder ---------------------------------------------------------------------------------


class _RecordPlans:
    """The compiled plan of each writer schema id, fetched from the schema source once."""

    def __init__(self, source: SchemaSource, settings: CodecSettings):
        self.source = source
        self.settings = settings
        self._column_types = {
            tuple(name.split(".", 1)): text for name, text in settings.column_types
        }
        self._plans: dict[int, RecordPlan] = {}

    def of(self, schema_id: int, topic: str) -> RecordPlan:
        plan = self._plans.get(schema_id)
        if plan is None:
            writer = self.source.get_schema(schema_id)
            plan = compile_record(writer, self.settings.limits, self._column_types)
            if plan.schema is None:
                plan = dataclasses.replace(plan, schema=self._schema_not_named(plan, topic))
            self._plans[schema_id] = plan
        return plan

    def _schema_not_named(self, plan: RecordPlan, topic: str) -> str:
        """The upstream schema of a record that names none (TiCDC up to v6.0): the topic's
        `schema:`, else the one schema the subjects of its id give (`schema_in_subject`).
        A ConfigError otherwise: every record of the topic would fail alike, and an empty
        schema must never reach gold."""
        if self.settings.upstream_schema:
            return self.settings.upstream_schema
        subjects = self.source.subjects_of(plan.schema_id)
        schemas = sorted({schema_in_subject(subject, plan.table) for subject in subjects} - {None})
        if len(schemas) == 1:
            return schemas[0]
        if len(schemas) > 1:  # the same table in several schemas: one schema text, one id
            found = f"its subjects name the table in schemas {', '.join(schemas)}"
        elif subjects:
            found = f"its subjects ({', '.join(sorted(subjects))}) are not <schema>_<table>-value"
        else:
            found = f"{self.source.description} gives no subject for it"
        raise ConfigError(
            f"topic {topic}: schema id {plan.schema_id} (table {plan.table}) has no namespace, "
            f"as TiCDC up to v6.0 wrote it, so it names no upstream schema, and {found}; set "
            "`schema:` for the topic in the pipeline config"
        )


def _read_record(plan: RecordPlan, data: bytes, part: str) -> dict:
    """The Avro record after the Confluent header of `data`, read with its schema's plan."""
    stream = io.BytesIO(data)
    stream.seek(HEADER_SIZE)
    try:
        record = fastavro.schemaless_reader(stream, plan.reader, None)
    except MALFORMED_INPUT_ERRORS as exc:
        at = stream.tell()
        what = "ends early" if at >= len(data) else "is malformed"
        if isinstance(exc, IndexError) and at < len(data):
            what += " (a union branch index is out of range)"
        raise DecodeError(
            f"{part}: the Avro record of schema id {plan.schema_id} {what} "
            f"(stopped at byte {at} of {len(data)}): {type(exc).__name__}: {exc}",
            byte_offset=at,
        ) from exc
    if stream.tell() != len(data):
        raise DecodeError(
            f"{part}: {len(data) - stream.tell()} bytes left after the Avro record of schema "
            f"id {plan.schema_id}",
            byte_offset=stream.tell(),
        )
    return record


class AvroDecoder(Decoder):
    """Decodes TiCDC Avro records with writer schemas from `settings.schema_source`.

    Each schema id is fetched and compiled once. Bad records raise DecodeError (an unknown id
    raises its subclass SchemaNotFoundError). A registry that is down or refuses the credentials
    raises SchemaRegistryUnavailableError or ConfigError instead, on purpose: that is no fault of
    the record, and the run should stop rather than quarantine every record of the topic.
    """

    protocol = "avro"

    def __init__(self, settings: CodecSettings | None = None):
        super().__init__(settings)
        if self.settings.schema_source is None:
            raise ConfigError("avro needs a schema source (registry, directory or _schemas export)")
        if self.settings.compression != "none":
            raise ConfigError(
                "TiCDC never compresses Avro values; set compression none for Avro topics"
            )
        self.source: SchemaSource = self.settings.schema_source
        self._plans = _RecordPlans(self.source, self.settings)
        self._keyed: dict[tuple[int, int], tuple[FieldPlan, ...]] = {}

    def _read(self, data: bytes, part: str, topic: str) -> tuple[RecordPlan, dict]:
        plan = self._plans.of(read_confluent_header(data, part), topic)
        return plan, _read_record(plan, data, part)

    def _tables_named(self, record: KafkaRecord) -> frozenset[tuple[str, str]] | None:
        """The table the writer schema of the value (or key) is for, or a DDL message's."""
        value, key = record.value or b"", record.key or b""
        if value[:1] == bytes([DDL_BYTE]):
            ddl = read_ddl_message(value)
            return frozenset([(ddl["schema"], ddl["table"])])
        if value[:1] == bytes([CHECKPOINT_BYTE]):
            return frozenset()
        data = value if value[:1] == bytes([MAGIC_BYTE]) else key
        schema_id = read_confluent_header(data, "value" if data is value else "key")
        plan = self._plans.of(schema_id, record.topic)
        return frozenset([(plan.schema, plan.table)])

    def _decode(self, record: KafkaRecord) -> list[Event]:
        key, value = record.key or None, record.value or None
        if value is not None and value[0] != MAGIC_BYTE:
            return [self._special(value, key, record)]
        if key is None and value is None:
            raise DecodeError("record has neither key nor value")
        topic = record.topic
        key_plan, key_record = self._read(key, "key", topic) if key is not None else (None, None)
        if value is None:
            return [self._key_only_delete(key_plan, key_record, None, record)]
        plan, values = self._read(value, "value", topic)
        if key_plan is not None and (key_plan.schema, key_plan.table) != (plan.schema, plan.table):
            raise DecodeError(
                f"key schema id {key_plan.schema_id} is for {key_plan.schema}.{key_plan.table} "
                f"but value schema id {plan.schema_id} is for {plan.schema}.{plan.table}"
            )
        return [self._row(plan, values, key_plan, record)]

    def _special(self, value: bytes, key: bytes | None, record: KafkaRecord) -> Event:
        kind = value[0]
        where = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
        if kind == CHECKPOINT_BYTE:
            return ResolvedEvent(read_ts_message(value, "checkpoint message"), **where)
        if kind == DDL_BYTE:
            ddl = read_ddl_message(value)
            return DdlEvent(
                commit_ts=ddl["commitTs"],
                schema=ddl["schema"],
                table=ddl["table"],
                query=ddl["query"],
                ddl_type=ddl["type"] or None,  # 0 is TiDB's ActionNone: no type given
                **where,
            )
        if kind == DELETE_MARKER_BYTE:
            commit_ts = read_ts_message(value, "delete marker")
            if key is None:
                raise DecodeError("a delete marker (value 0x03) needs a key holding the row")
            key_plan, key_record = self._read(key, "key", record.topic)
            return self._key_only_delete(key_plan, key_record, commit_ts, record)
        raise DecodeError(
            f"value: expected the Confluent magic byte 0x00 (or TiCDC's test-only 0x01 DDL, "
            f"0x02 checkpoint, 0x03 delete marker), got 0x{kind:02x}",
            byte_offset=0,
        )

    def _key_only_delete(
        self, plan: RecordPlan, values: dict, commit_ts: int | None, record: KafkaRecord
    ) -> RowEvent:
        """A tombstone's delete: only the handle-key columns are known, and no commit TS."""
        image = _image(plan.columns, values, KEY_FLAGS)
        return _row_event(plan, DELETE, commit_ts, None, image, record, handle_key_only=True)

    def _keyed_columns(self, key_plan: RecordPlan | None, plan: RecordPlan) -> tuple:
        """The value's column plans with the key's columns flagged handle key and primary key."""
        ids = (key_plan.schema_id if key_plan else -1, plan.schema_id)
        columns = self._keyed.get(ids)
        if columns is None:
            names = {f.name for f in key_plan.columns} if key_plan else set()
            columns = tuple(
                FieldPlan(f.name, f.type_code, f.flags | KEY_FLAGS, f.mysql_type, f.convert)
                if f.name in names
                else f
                for f in plan.columns
            )
            self._keyed[ids] = columns
        return columns

    def _row(
        self, plan: RecordPlan, values: dict, key_plan: RecordPlan | None, record: KafkaRecord
    ) -> RowEvent:
        columns = self._keyed_columns(key_plan, plan)
        operation = values.get(OP_FIELD, "")
        op = OPERATIONS.get(operation)
        if op is None:
            raise DecodeError(f"value: unknown {OP_FIELD} {operation!r}; expected c, u or d")
        commit_ts = values.get(COMMIT_TS_FIELD)
        if commit_ts is not None:
            commit_ts &= mysql.UINT64_MAX  # written as a signed long
        before = values.get(BEFORE_FIELD)
        old = _image(columns, before, 0) if before is not None else None
        if op == DELETE:
            if old is None:
                raise DecodeError(f"value: {OP_FIELD} is d but {BEFORE_FIELD} is missing")
            return _row_event(plan, DELETE, commit_ts, None, old, record)
        return _row_event(plan, op, commit_ts, _image(columns, values, 0), old, record)


def _row_event(
    plan: RecordPlan,
    op: str,
    commit_ts: int | None,
    columns: dict | None,
    old_columns: dict | None,
    record: KafkaRecord,
    handle_key_only: bool = False,
) -> RowEvent:
    return RowEvent(
        commit_ts=commit_ts,
        schema=plan.schema,
        table=plan.table,
        op=op,
        columns=columns,
        old_columns=old_columns,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        handle_key_only=handle_key_only,
    )


def _image(columns: tuple[FieldPlan, ...], values: dict, extra_flags: int) -> dict[str, Column]:
    """The row image of a decoded record: one comprehension, the hot loop of the decoder."""
    try:
        return {
            name: Column(
                type_code,
                flags | extra_flags,
                values[name] if convert is None else convert(values[name]),
                mysql_type,
            )
            for name, type_code, flags, mysql_type, convert in columns
        }
    except (ValueError, TypeError, OverflowError):
        raise _column_error(columns, values) from None


def _column_error(columns: tuple[FieldPlan, ...], values: dict) -> DecodeError:
    """The error of the first column whose value cannot be converted (the slow path)."""
    for plan in columns:
        try:
            if plan.convert is not None:
                plan.convert(values[plan.name])
        except (ValueError, TypeError, OverflowError) as exc:
            return DecodeError(f"column {plan.name!r}: {exc}")
    return DecodeError("a column value could not be converted")


# --- encoder ---------------------------------------------------------------------------------

_NO_DEFAULT = object()
_INT64_MAX = (1 << 63) - 1
DECIMAL_MODES = ("precise", "string")
BIGINT_UNSIGNED_MODES = ("long", "string")

# MySQL type code → tidb_type, as tiflow's encoder names them (unsigned and binary refine it).
_TIDB_TYPES = {
    mysql.TYPE_TINY: "INT",
    mysql.TYPE_SHORT: "INT",
    mysql.TYPE_INT24: "INT",
    mysql.TYPE_LONG: "INT",
    mysql.TYPE_LONGLONG: "BIGINT",
    mysql.TYPE_FLOAT: "FLOAT",
    mysql.TYPE_DOUBLE: "DOUBLE",
    mysql.TYPE_BIT: "BIT",
    mysql.TYPE_NEWDECIMAL: "DECIMAL",
    **dict.fromkeys(mysql.STRING_TYPES | mysql.BLOB_TYPES, "TEXT"),
    mysql.TYPE_ENUM: "ENUM",
    mysql.TYPE_SET: "SET",
    mysql.TYPE_JSON: "JSON",
    mysql.TYPE_DATE: "DATE",
    mysql.TYPE_DATETIME: "DATETIME",
    mysql.TYPE_TIMESTAMP: "TIMESTAMP",
    mysql.TYPE_DURATION: "TIME",
    mysql.TYPE_YEAR: "YEAR",
    mysql.TYPE_VECTOR_FLOAT32: "TiDBVECTORFloat32",
}


def go_json(document: Any) -> str:
    """Compact JSON as Go's encoding/json writes it, HTML characters escaped (schema text)."""
    import json

    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


@dataclass(frozen=True)
class AvroOptions:
    """The Avro knobs of CodecSettings.options (TiCDC's sink-URI parameters in brackets)."""

    decimal_handling: str = "precise"  # precise | string   [avro-decimal-handling-mode]
    bigint_unsigned_handling: str = "long"  # long | string [avro-bigint-unsigned-handling-mode]
    enable_watermark: bool = False  # test-only DDL/checkpoint messages [avro-enable-watermark]
    include_before_value: bool = False  # ticdc `_ticdc_before` [avro-include-before-value]
    namespace: str = "default"  # changefeed namespace (tiflow) or keyspace (ticdc)
    column_defaults: tuple[tuple[str, Any], ...] = ()  # column name → DEFAULT (event-model value)
    # "2022": TiCDC up to v6.0 (tiflow cdc/sink/codec/avro.go before v6.1), none of the above
    layout: str = "current"
    time_zone: str = "UTC"  # 2022 layout: the TiCDC zone its TIMESTAMP text is parsed in [tz]

    @classmethod
    def from_settings(cls, settings: CodecSettings) -> AvroOptions:
        options = cls(
            decimal_handling=settings.option("decimal_handling", "precise"),
            bigint_unsigned_handling=settings.option("bigint_unsigned_handling", "long"),
            enable_watermark=bool(settings.option("enable_watermark", False)),
            include_before_value=bool(settings.option("include_before_value", False)),
            namespace=settings.option("namespace", "default"),
            column_defaults=tuple(dict(settings.option("column_defaults", None) or {}).items()),
            layout=str(settings.option("layout", "current")),
            time_zone=settings.option("time_zone", "UTC"),
        )
        if options.layout not in LAYOUTS:
            raise ConfigError(f"layout must be current or 2022, not {options.layout!r}")
        if options.layout == "2022":
            options._check_2022(settings)
        if options.decimal_handling not in DECIMAL_MODES:
            raise ConfigError(
                f"decimal_handling must be precise or string, not {options.decimal_handling!r}"
            )
        if options.bigint_unsigned_handling not in BIGINT_UNSIGNED_MODES:
            raise ConfigError(
                "bigint_unsigned_handling must be long or string, "
                f"not {options.bigint_unsigned_handling!r}"
            )
        return options

    def _check_2022(self, settings: CodecSettings) -> None:
        """TiCDC up to v6.0 had none of the later options, and refused the TiDB extension."""
        later = [
            name
            for name, value in vars(self).items()
            if name not in ("layout", "time_zone") and value != getattr(AvroOptions, name)
        ]
        if settings.enable_tidb_extension:
            later.append("enable_tidb_extension")
        if later:
            raise ConfigError(
                f"the 2022 layout (TiCDC up to v6.0) has no {', '.join(later)}: its Avro "
                "refuses enable-tidb-extension, and the rest came later"
            )


@dataclass(frozen=True)
class _ColumnWriter:
    """How one column is written: its Avro field and the value conversion."""

    column: str  # name in the event
    field: dict  # the schema's field object, in Go's key order
    to_avro: Callable[[Any], Any] | None


def _wrap_unsigned(value: int) -> int:
    return value - (1 << 64) if value > _INT64_MAX else value


def _enum_writer(members: tuple[str, ...]) -> Callable[[int], str]:
    def enum_name(index: int) -> str:
        if index == 0:
            return ""  # TiDB's invalid value; tiflow refuses it, Debezium writes ""
        if not 0 < index <= len(members):
            raise ValueError(f"ENUM index {index} is outside 1..{len(members)}")
        return members[index - 1]

    return enum_name


def _set_writer(members: tuple[str, ...]) -> Callable[[int], str]:
    def set_names(mask: int) -> str:
        if mask >> len(members):
            raise ValueError(f"SET bitmask {mask:#x} has bits beyond its {len(members)} members")
        return ",".join(member for i, member in enumerate(members) if mask >> i & 1)

    return set_names


def member_names(type_code: int, members: tuple[str, ...], value: int) -> str:
    """An ENUM index or SET bitmask as Avro writes it: the member, or the members joined."""
    writer = _enum_writer if type_code == mysql.TYPE_ENUM else _set_writer
    return writer(members)(value)


def _avro_type(column: Column, options: AvroOptions) -> tuple[dict, Callable | None]:
    """(Avro type object, value conversion) of a column, as tiflow's columnToAvroSchema."""
    code, flags = column.type_code, column.flags
    unsigned, binary = bool(flags & mysql.FLAG_UNSIGNED), bool(flags & mysql.FLAG_BINARY)
    tidb_type = _TIDB_TYPES.get(code)
    if tidb_type is None:
        raise ValueError(f"MySQL type code {code} has no Avro mapping in TiCDC")
    if tidb_type in ("INT", "BIGINT") and unsigned:
        tidb_type += " UNSIGNED"
    elif tidb_type == "TEXT" and binary:
        tidb_type = "BLOB"
    params: dict[str, str] = {"tidb_type": tidb_type}
    parsed = mysql.parse_column_type(column.mysql_type) if column.mysql_type else None
    avro, convert, extra = "string", None, {}
    if tidb_type.startswith("INT"):
        avro = "long" if code == mysql.TYPE_LONG and unsigned else "int"
    elif tidb_type == "BIGINT":
        avro = "long"
    elif tidb_type == "BIGINT UNSIGNED":
        string = options.bigint_unsigned_handling == "string"
        avro, convert = ("string", str) if string else ("long", _wrap_unsigned)
    elif tidb_type in ("FLOAT", "DOUBLE"):
        avro = tidb_type.lower()
    elif tidb_type == "BIT":
        params = {"length": str(parsed.length if parsed and parsed.length else 1), **params}
        avro, convert = "bytes", bit_bytes
    elif tidb_type == "DECIMAL" and options.decimal_handling == "precise":
        precision = parsed.length if parsed and parsed.length else 10
        scale = parsed.scale if parsed and parsed.scale is not None else 0
        extra = {"logicalType": "decimal", "precision": precision, "scale": scale}
        avro, convert = "bytes", lambda text, scale=scale: decimal_bytes(text, scale)
    elif tidb_type == "BLOB":
        avro = "bytes"
    elif tidb_type in ("ENUM", "SET"):
        if parsed is None or parsed.elements is None:
            raise ValueError(f"{tidb_type} needs its members: give mysql_type, e.g. enum('a','b')")
        params = {"allowed": join_allowed(parsed.elements), **params}
        convert = (_enum_writer if tidb_type == "ENUM" else _set_writer)(parsed.elements)
    elif tidb_type == "YEAR":
        avro = "int"
    return {"type": avro, "connect.parameters": params, **extra}, convert


def _avro_default(value: Any) -> Any:
    """A default in Avro's JSON form: bytes are a string of code points 0–255."""
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _column_writer(name: str, column: Column, options: AvroOptions) -> _ColumnWriter:
    try:
        avro_type, convert = _avro_type(column, options)
    except ValueError as exc:
        raise ValueError(f"column {name!r}: {exc}") from exc
    nullable = bool(column.flags & mysql.FLAG_NULLABLE)
    default = dict(options.column_defaults).get(name, _NO_DEFAULT)
    if default is not _NO_DEFAULT and default is not None and convert is not None:
        default = convert(default)
    field: dict[str, Any] = {}
    if "logicalType" in avro_type:  # goavro cannot take a logical-type default: never written
        if nullable:
            field = {"default": None, "name": sanitize_name(name), "type": ["null", avro_type]}
        else:
            field = {"name": sanitize_name(name), "type": avro_type}
    elif nullable:
        if default is _NO_DEFAULT or default is None:
            field = {"default": None, "name": sanitize_name(name), "type": ["null", avro_type]}
        else:
            field = {
                "default": _avro_default(default),
                "name": sanitize_name(name),
                "type": [avro_type, "null"],
            }
    elif default is not _NO_DEFAULT and default is not None:
        field = {"default": _avro_default(default), "name": sanitize_name(name), "type": avro_type}
    else:
        field = {"name": sanitize_name(name), "type": avro_type}
    return _ColumnWriter(name, field, convert)


def _extension_fields(options: AvroOptions, enabled: bool) -> list[dict]:
    op = {"default": "", "name": OP_FIELD, "type": "string"}
    if not enabled:
        return [op] if options.include_before_value else []
    return [
        op,
        {"default": 0, "name": COMMIT_TS_FIELD, "type": "long"},
        {"default": 0, "name": PHYSICAL_TIME_FIELD, "type": "long"},
    ]


@dataclass
class _TableWriter:
    """The registered key and value schemas of one table version, and their writers."""

    key_columns: tuple[_ColumnWriter, ...]
    value_columns: tuple[_ColumnWriter, ...]
    key_header: bytes
    key_schema: Any
    value_header: bytes
    value_schema: Any

    @staticmethod
    def native(columns: tuple[_ColumnWriter, ...], image: dict[str, Column]) -> dict[str, Any]:
        record = {}
        for writer in columns:
            column = image.get(writer.column)
            if column is None:
                raise ValueError(f"the row image has no column {writer.column!r}")
            value = column.value
            if value is not None and writer.to_avro is not None:
                value = writer.to_avro(value)
            record[writer.field["name"]] = value
        return record


def _write(schema: Any, header: bytes, record: dict) -> bytes:
    stream = io.BytesIO()
    stream.write(header)
    fastavro.schemaless_writer(stream, schema, record)
    return stream.getvalue()


# --- encoder: TiCDC up to v6.0 (the 2022 layout) ----------------------------------------------

LAYOUTS = ("current", "2022")
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIME_TEXT = re.compile(r"(-?\d+):(\d+):(\d+)(?:\.(\d+))?")
_MOMENT_TEXT = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?)?")
_UNSIGNED_DECIMAL_2022 = {"type": "bytes", "logicalType": "decimal", "precision": 64, "scale": 0}
_TIMESTAMP_MILLIS = {"type": "long", "logicalType": "timestamp-millis"}
_TIME_MILLIS = {"type": "int", "logicalType": "time-millis"}


def subject_2022(schema: str, table: str, part: str) -> str:
    """The subject TiCDC up to v6.0 registered a table's key or value schema under."""
    return f"{schema}_{table}-{part}"


def go_time_millis(text: str) -> int:
    """A TIME as TiCDC up to v6.0 wrote it (`ticdc_2022_time` reads it back): `fmt.Sscanf` of
    `%d:%d:%d.%s`, `types.NewDuration(hours, minutes, seconds, micros)`, which puts the sign
    on the hours alone, then goavro's `int32(ns / 1e6)`."""
    match = _TIME_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a TIME")
    hours, minutes, seconds = (int(part) for part in match.group(1, 2, 3))  # int("-00") is 0
    fraction = match.group(4) or "0"
    micros = int(fraction) * 10 ** (6 - len(fraction))
    nanos = ((hours * 3600 + minutes * 60 + seconds) * 10**6 + micros) * 1000
    return go_int32(go_quotient(nanos, _NANOS_PER_MILLI))


def go_moment_millis(text: str, type_code: int, zone: str) -> int:
    """A DATE, DATETIME or TIMESTAMP as TiCDC up to v6.0 wrote it (`ticdc_2022_moment` reads it
    back): Go's zero time for the zero date, else the text parsed by `time.ParseInLocation`
    (TIMESTAMP in the TiCDC zone, the others in UTC), then `go_timestamp_millis`. A time the
    zone skips or repeats is resolved as Python's zoneinfo does (fold 0), which may differ
    from Go by the hour of the change. Text Go cannot parse (a zero date with a fraction, a
    zero month or day) stopped its changefeed: ValueError here."""
    zero = "0000-00-00" if type_code == mysql.TYPE_DATE else "0000-00-00 00:00:00"
    if text == zero:
        return go_timestamp_millis(_GO_ZERO_TIME_NANOS)
    match = _MOMENT_TEXT.fullmatch(text)
    try:
        if match is None:
            raise ValueError("not a date and time")
        parts = [int(part or 0) for part in match.group(1, 2, 3, 4, 5, 6)]
        wall_clock = dt.datetime(*parts)
    except ValueError as exc:
        raise ValueError(
            f"TiCDC up to v6.0 cannot write {text!r} as timestamp-millis ({exc}): its "
            "changefeed stops there"
        ) from None
    fraction = match.group(7) or ""
    seconds = (wall_clock - _EPOCH) // dt.timedelta(seconds=1)
    if type_code == mysql.TYPE_TIMESTAMP:
        offset = zoneinfo.ZoneInfo(zone).utcoffset(wall_clock)
        seconds -= offset // dt.timedelta(seconds=1)
    return go_timestamp_millis(seconds * 10**9 + int(fraction.ljust(9, "0")))


def unsigned_decimal_bytes(value: int) -> bytes:
    """goavro's decimal bytes of a non-negative integer: big-endian two's complement, minimal
    (a leading 0x00 when the top bit is set)."""
    return value.to_bytes(value.bit_length() // 8 + 1, "big")


def _avro_type_2022(column: Column, zone: str) -> tuple[Any, Callable | None]:
    """(Avro type, value conversion) of a column as TiCDC up to v6.0 wrote it (its
    getAvroDataTypeFromColumn and columnToAvroNativeData)."""
    code, flags = column.type_code, column.flags
    unsigned, binary = bool(flags & mysql.FLAG_UNSIGNED), bool(flags & mysql.FLAG_BINARY)
    if code in (mysql.TYPE_FLOAT, mysql.TYPE_DOUBLE):
        return ("float" if code == mysql.TYPE_FLOAT else "double"), None
    if code in mysql.STRING_TYPES or code in mysql.BLOB_TYPES:
        return ("bytes" if binary else "string"), None
    if code in (mysql.TYPE_DATE, mysql.TYPE_DATETIME, mysql.TYPE_TIMESTAMP):
        return dict(_TIMESTAMP_MILLIS), lambda text: go_moment_millis(text, code, zone)
    if code == mysql.TYPE_DURATION:
        return dict(_TIME_MILLIS), go_time_millis
    if code in (mysql.TYPE_ENUM, mysql.TYPE_SET):
        parsed = mysql.parse_column_type(column.mysql_type) if column.mysql_type else None
        if parsed is None or parsed.elements is None:
            raise ValueError("ENUM and SET need their members: give mysql_type, e.g. enum('a')")
        return "string", (_enum_writer if code == mysql.TYPE_ENUM else _set_writer)(parsed.elements)
    if code == mysql.TYPE_BIT or (code == mysql.TYPE_LONGLONG and unsigned):
        return dict(_UNSIGNED_DECIMAL_2022), unsigned_decimal_bytes
    if code in (mysql.TYPE_NEWDECIMAL, mysql.TYPE_JSON):
        return "string", None
    if code in (mysql.TYPE_TINY, mysql.TYPE_SHORT, mysql.TYPE_INT24):
        return "int", None
    if code == mysql.TYPE_LONG:
        return ("long" if unsigned else "int"), None
    if code in (mysql.TYPE_LONGLONG, mysql.TYPE_YEAR):
        return "long", None
    if code == mysql.TYPE_NULL:
        return "null", None
    raise ValueError(f"TiCDC up to v6.0 cannot write MySQL type code {code} in Avro")


def _column_writer_2022(name: str, column: Column, zone: str) -> _ColumnWriter:
    """A column's field as TiCDC up to v6.0 wrote it: the name as it is (goavro refuses one
    that is not an Avro name), `["null", T]` with a null default when nullable, no other
    default, and no `connect.parameters`."""
    if not _AVRO_NAME.fullmatch(name):
        raise ValueError(f"TiCDC up to v6.0 cannot write column {name!r}: not an Avro name")
    try:
        avro_type, convert = _avro_type_2022(column, zone)
    except ValueError as exc:
        raise ValueError(f"column {name!r}: {exc}") from exc
    if column.flags & mysql.FLAG_NULLABLE:
        field = {"default": None, "name": name, "type": ["null", avro_type]}
    else:
        field = {"name": name, "type": avro_type}
    return _ColumnWriter(name, field, convert)


class _TableWriters:
    """The writers of each table version, whose key and value schemas are registered on first
    use: a version is its topic, schema, table and the names and types of its columns."""

    def __init__(self, registry: Any, options: AvroOptions, enable_tidb_extension: bool):
        self.registry = registry
        self.options = options
        self.enable_tidb_extension = enable_tidb_extension
        self._by_version: dict[tuple, _TableWriter] = {}

    def of(self, event: RowEvent, image: dict[str, Column]) -> _TableWriter:
        signature = tuple((n, c.type_code, c.flags, c.mysql_type) for n, c in image.items())
        cache_key = (event.topic, event.schema, event.table, signature)
        writer = self._by_version.get(cache_key)
        if writer is None:
            writer = self._by_version[cache_key] = self._register(event, image)
        return writer

    def _register_2022(self, event: RowEvent, image: dict[str, Column]) -> _TableWriter:
        """The schemas of a table version as TiCDC up to v6.0 registered them: a record named
        after the table, no namespace, under `<schema>_<table>-value` and then `-key`. A table
        without a handle key has a key record of no fields, which goavro refused."""
        if not _AVRO_NAME.fullmatch(event.table):
            raise ValueError(
                f"TiCDC up to v6.0 cannot write table {event.table!r}: not an Avro name"
            )
        zone = self.options.time_zone
        columns = tuple(_column_writer_2022(n, c, zone) for n, c in image.items())
        keys = tuple(
            w
            for w, c in zip(columns, image.values(), strict=True)
            if c.flags & mysql.FLAG_HANDLE_KEY
        )
        if not keys:
            raise ValueError(
                f"TiCDC up to v6.0 cannot write {event.schema}.{event.table} in Avro: it has no "
                "handle key, and a key record of no fields is refused"
            )

        def registered(part: str, fields: list[dict]) -> tuple[bytes, Any]:
            definition = {"type": "record", "name": event.table, "fields": fields}
            subject = subject_2022(event.schema, event.table, part)
            schema_id = self.registry.register(subject, go_json(definition))
            return confluent_header(schema_id), fastavro.parse_schema(
                _without_logical_types(definition)
            )

        value_header, value_schema = registered("value", [w.field for w in columns])
        key_header, key_schema = registered("key", [w.field for w in keys])
        return _TableWriter(keys, columns, key_header, key_schema, value_header, value_schema)

    def _register(self, event: RowEvent, image: dict[str, Column]) -> _TableWriter:
        """Build and register the key and value schemas of a table version (key first)."""
        if self.options.layout == "2022":
            return self._register_2022(event, image)
        columns = tuple(_column_writer(n, c, self.options) for n, c in image.items())
        names = [writer.field["name"] for writer in columns]
        if len(set(names)) != len(names):
            raise ValueError(f"{event.table}: column names collide once sanitized: {names}")
        keys = tuple(
            w
            for w, c in zip(columns, image.values(), strict=True)
            if c.flags & mysql.FLAG_HANDLE_KEY
        )
        namespace = sanitize_name(self.options.namespace)
        if sanitize_name(event.schema):
            namespace += "." + sanitize_name(event.schema)
        table = sanitize_name(event.table)

        def record(name: str, fields: list[dict]) -> dict:
            return {"type": "record", "name": name, "namespace": namespace, "fields": fields}

        value_fields = [w.field for w in columns]
        if self.options.include_before_value:
            before = record(f"{table}_before", [w.field for w in columns])
            value_fields.append({"default": None, "name": BEFORE_FIELD, "type": ["null", before]})
        value_fields += _extension_fields(self.options, self.enable_tidb_extension)
        key_header, key_schema = b"", None
        if keys:
            key_header, key_schema = self._schema(
                event.topic, "key", record(table, [w.field for w in keys])
            )
        value_header, value_schema = self._schema(event.topic, "value", record(table, value_fields))
        return _TableWriter(keys, columns, key_header, key_schema, value_header, value_schema)

    def _schema(self, topic: str, part: str, definition: dict) -> tuple[bytes, Any]:
        schema_id = self.registry.register(subject_for(topic, part), go_json(definition))
        return confluent_header(schema_id), fastavro.parse_schema(
            _without_logical_types(definition)
        )


class AvroEncoder(Encoder):
    """Encodes row events as tiflow does, registering schemas in `settings.schema_source`.

    The schema source must be an InMemorySchemaRegistry (anything with `register(subject,
    schema_text) -> id`). DDL and resolved events are written only with the test-only option
    `enable_watermark` and the TiDB extension; otherwise TiCDC's Avro does not carry them and
    they are left out. A DELETE of a table without a handle key has no key to rebuild it from
    and is left out too, unless `include_before_value` writes the old row as a value.

    With the option `layout: "2022"` it writes as TiCDC up to v6.0 did
    (`_TableWriters._register_2022`, `_avro_type_2022`), the encoder the lake reads back as the
    2022 layout; what that version could not write (a zero DATETIME with a fraction, a table
    without a handle key, a name that is not an Avro name) raises ValueError, as it stopped the
    changefeed there.
    """

    protocol = "avro"

    def __init__(self, settings: CodecSettings | None = None):
        super().__init__(settings)
        self.registry = self.settings.schema_source
        if not callable(getattr(self.registry, "register", None)):
            raise ConfigError(
                "the Avro encoder registers its schemas: settings.schema_source must be an "
                "InMemorySchemaRegistry"
            )
        self.options = AvroOptions.from_settings(self.settings)
        self._watermarks = self.options.enable_watermark and self.settings.enable_tidb_extension
        self._writers = _TableWriters(
            self.registry, self.options, self.settings.enable_tidb_extension
        )

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        messages = []
        for event in events:
            if isinstance(event, RowEvent):
                message = self._encode_row(event)
            elif isinstance(event, ResolvedEvent):
                message = self._encode_checkpoint(event) if self._watermarks else None
            else:
                message = self._encode_ddl(event) if self._watermarks else None
            if message is not None:
                messages.append(message)
        return messages

    def _encode_checkpoint(self, event: ResolvedEvent) -> KafkaMessage:
        return KafkaMessage(None, bytes([CHECKPOINT_BYTE]) + _TS.pack(event.ts))

    def _encode_ddl(self, event: DdlEvent) -> KafkaMessage:
        ddl = {
            "query": event.query,
            "type": event.ddl_type or 0,
            "schema": event.schema,
            "table": event.table,
            "commitTs": event.commit_ts or 0,
        }
        return KafkaMessage(None, bytes([DDL_BYTE]) + go_json(ddl).encode("utf-8"))

    def _encode_row(self, event: RowEvent) -> KafkaMessage | None:
        image = event.old_columns if event.op == DELETE else event.columns
        if not image:
            raise ValueError(f"{event.op} of {event.schema}.{event.table} has no row image")
        writer = self._writers.of(event, image)
        if self.options.layout == "2022":  # only the columns: no operation, no commit TS
            key = _write(
                writer.key_schema, writer.key_header, writer.native(writer.key_columns, image)
            )
            if event.op == DELETE:
                return KafkaMessage(key, None)
            record = writer.native(writer.value_columns, image)
            return KafkaMessage(key, _write(writer.value_schema, writer.value_header, record))
        key = None
        if writer.key_columns:
            key = _write(
                writer.key_schema, writer.key_header, writer.native(writer.key_columns, image)
            )
        if event.op == DELETE and not self.options.include_before_value:
            return None if key is None else KafkaMessage(key, None)
        record = writer.native(writer.value_columns, image)
        if self.options.include_before_value:
            old = event.old_columns if event.op != INSERT else None
            record[BEFORE_FIELD] = writer.native(writer.value_columns, old) if old else None
        if self.settings.enable_tidb_extension:
            if event.commit_ts is None:
                raise ValueError("the TiDB extension needs the commit TS, and the event has none")
            record[OP_FIELD] = {INSERT: "c", UPDATE: "u", DELETE: "d"}[event.op]
            record[COMMIT_TS_FIELD] = _wrap_unsigned(event.commit_ts)
            record[PHYSICAL_TIME_FIELD] = event.commit_ts >> 18
        elif self.options.include_before_value:
            record[OP_FIELD] = {INSERT: "c", UPDATE: "u", DELETE: "d"}[event.op]
        return KafkaMessage(key, _write(writer.value_schema, writer.value_header, record))
