"""TiCDC Craft: the binary, columnar batch protocol (PROTOCOLS.md §3; tiflow only).

One Kafka value is one craft message; the key is always null and the value is never compressed.

    [version uvarint = 1][headers][body_0 .. body_{n-1}][term dictionary][size tables][trailer]

The trailer is the byte length of the size tables as a uvarint whose bytes are reversed, read
backwards from the last byte. The size tables give the header and dictionary sizes, each event's
body size and, for row messages, each event's column-group sizes; together they must tile the
message exactly. Headers and column groups are columnar "chunks" of varints; schema, table and
column names are ids into a term dictionary local to the message.

`CraftDecoder` is the pure-Python reference. When the compiled `native._craft_speedups` extension
is importable, it decodes the same bytes to the same events (or the same DecodeError) many times
faster; the pure-Python path is the fallback and the specification the extension is tested
against.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from ticdc_lake.engines import native
from ticdc_lake.errors import ConfigError, DecodeError
from ticdc_lake.protocols.base import CodecSettings, Decoder, Encoder, KafkaMessage
from ticdc_lake.records import KafkaRecord
from ticdc_lake.silver import events as model
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import Column, DdlEvent, Event, Image, ResolvedEvent, RowEvent

VERSION = 1

EVENT_ROW = 1
EVENT_DDL = 2
EVENT_RESOLVED = 3

GROUP_NEW = 0x01  # new values: insert, update
GROUP_OLD = 0x02  # old values: update, delete

NULL_ID = -1  # "no term" (schema/table of resolved events) and "no partition"

# Option names (CodecSettings.options).
OPTION_DELETE_HANDLE_KEY_ONLY = "delete_only_output_handle_key_columns"
OPTION_MAX_MESSAGE_BYTES = "max_message_bytes"
DEFAULT_MAX_MESSAGE_BYTES = 10 * 1024 * 1024  # TiCDC's max-message-bytes default

_U64 = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_MIN_BYTES_PER_COLUMN = 4  # name id, type, flags and value length are at least a byte each

# How a column value is laid out, by type code (§3.3).
_SIGNED_OR_UNSIGNED = 1  # integers: uvarint if the unsigned flag is set, else zigzag varint
_ZIGZAG = 2  # YEAR
_UVARINT = 3  # ENUM index, SET bitmask, BIT
_FLOAT = 4  # float32 widened to float64, 8 bytes little-endian
_DOUBLE = 5  # float64, 8 bytes little-endian
_STRING_BYTES = 6  # raw bytes: bytes if binary (mysql.is_binary_string), else UTF-8 text
_TEXT = 7  # UTF-8 text: DECIMAL, temporal types, JSON, VECTOR
_NO_VALUE = 8  # NULL type, GEOMETRY, unspecified: always written as NULL

VALUE_LAYOUT: dict[int, int] = {
    **dict.fromkeys(mysql.INTEGER_TYPES, _SIGNED_OR_UNSIGNED),
    mysql.TYPE_YEAR: _ZIGZAG,
    mysql.TYPE_ENUM: _UVARINT,
    mysql.TYPE_SET: _UVARINT,
    mysql.TYPE_BIT: _UVARINT,
    mysql.TYPE_FLOAT: _FLOAT,
    mysql.TYPE_DOUBLE: _DOUBLE,
    **dict.fromkeys(mysql.STRING_TYPES | mysql.BLOB_TYPES, _STRING_BYTES),
    **dict.fromkeys(
        mysql.TEMPORAL_TEXT_TYPES
        | {mysql.TYPE_NEWDECIMAL, mysql.TYPE_JSON, mysql.TYPE_VECTOR_FLOAT32},
        _TEXT,
    ),
    mysql.TYPE_DECIMAL_OLD: _NO_VALUE,  # TiDB's TypeUnspecified
    mysql.TYPE_NULL: _NO_VALUE,
    mysql.TYPE_GEOMETRY: _NO_VALUE,
}

_FLOAT64 = struct.Struct("<d")


# ---------------------------------------------------------------------------------------------
# Primitive encoders


def zigzag(value: int) -> int:
    """Map int64 to uint64 so small magnitudes stay small: 0→0, −1→1, 1→2, −2→3 (Go PutVarint)."""
    return ((value << 1) ^ (value >> 63)) & _U64


def unzigzag(value: int) -> int:
    """Inverse of `zigzag`: even → value/2, odd → −(value+1)/2."""
    return (value >> 1) ^ -(value & 1)


def wrap_int64(value: int) -> int:
    """Two's-complement wrap into int64, as Go's int64 arithmetic does on overflow."""
    if _I64_MIN <= value <= _I64_MAX:
        return value
    return ((value - _I64_MIN) & _U64) + _I64_MIN


def encode_uvarint(out: bytearray, value: int) -> None:
    """LEB128: 7 bits per byte, least-significant group first, 0x80 set on all but the last."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_varint(out: bytearray, value: int) -> None:
    """A signed int64 as the uvarint of its zigzag form."""
    encode_uvarint(out, zigzag(value))


def encode_uvarint_reversed(value: int) -> bytes:
    """The uvarint bytes of `value` in reverse order: the message trailer, read from the end."""
    out = bytearray()
    encode_uvarint(out, value)
    out.reverse()
    return bytes(out)


def encode_uvarint_chunk(out: bytearray, values: Iterable[int]) -> None:
    """n uvarints back to back; the count is not stored."""
    for value in values:
        encode_uvarint(out, value)


def encode_delta_uvarint_chunk(out: bytearray, values: Sequence[int]) -> None:
    """The first value as a uvarint, then each difference to the previous one modulo 2**64."""
    last = 0
    for index, value in enumerate(values):
        encode_uvarint(out, value if index == 0 else (value - last) & _U64)
        last = value


def encode_delta_varint_chunk(out: bytearray, values: Sequence[int]) -> None:
    """The first value as a zigzag varint, then each int64-wrapped difference to the previous."""
    last = 0
    for index, value in enumerate(values):
        encode_varint(out, value if index == 0 else wrap_int64(value - last))
        last = value


def encode_string_chunk(out: bytearray, values: Sequence[bytes]) -> None:
    """All lengths as uvarints, then all the bytes concatenated."""
    for value in values:
        encode_uvarint(out, len(value))
    for value in values:
        out += value


def encode_nullable_bytes_chunk(out: bytearray, values: Sequence[bytes | None]) -> None:
    """All lengths as zigzag varints (−1 = NULL), then the bytes of the non-NULL entries."""
    for value in values:
        encode_varint(out, -1 if value is None else len(value))
    for value in values:
        if value is not None:
            out += value


def encode_size_tables(out: bytearray, tables: Sequence[Sequence[int]]) -> None:
    """Each table as its uvarint entry count plus a delta-varint chunk, then the reversed-uvarint
    byte length of all the tables."""
    start = len(out)
    for table in tables:
        encode_uvarint(out, len(table))
        encode_delta_varint_chunk(out, table)
    out += encode_uvarint_reversed(len(out) - start)


# ---------------------------------------------------------------------------------------------
# Primitive decoders


class _Reader:
    """Bounds-checked reads of `buf[pos:end]`; `region` names the span in error messages.

    Positions are absolute byte offsets in the Kafka value, so every error can say where.
    """

    __slots__ = ("buf", "end", "pos", "region")

    def __init__(self, buf: bytes, pos: int, end: int, region: str):
        self.buf = buf
        self.pos = pos
        self.end = end
        self.region = region

    def fail(self, reason: str, byte: int | None) -> DecodeError:
        return DecodeError(reason, byte_offset=byte)

    def uvarint(self, what: str, kind: str = "uvarint") -> int:
        """LEB128 uint64: at most 10 bytes, the 10th no larger than 1 (Go binary.Uvarint)."""
        buf, pos, end = self.buf, self.pos, self.end
        if pos < end and buf[pos] < 0x80:  # one-byte values are the common case
            self.pos = pos + 1
            return buf[pos]
        start = pos
        result = 0
        shift = 0
        while True:
            if pos >= end:
                raise self.fail(
                    f"{what}: {kind} starting at byte {start} runs past the end of the "
                    f"{self.region} (byte {end})",
                    start,
                )
            byte = buf[pos]
            pos += 1
            if shift == 63 and byte > 1:
                raise self.fail(f"{what}: {kind} starting at byte {start} overflows 64 bits", start)
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return result
            shift += 7

    def varint(self, what: str) -> int:
        """A zigzag-encoded int64."""
        return unzigzag(self.uvarint(what, "varint"))

    def byte(self, what: str) -> int:
        if self.pos >= self.end:
            raise self.fail(
                f"{what}: byte {self.pos} is past the end of the {self.region} (byte {self.end})",
                self.pos,
            )
        self.pos += 1
        return self.buf[self.pos - 1]

    def count(self, what: str, min_bytes_each: int = 1) -> int:
        """A uvarint element count, refused when its elements could not fit in what is left."""
        start = self.pos
        count = self.uvarint(what)
        left = self.end - self.pos
        if count * min_bytes_each > left:
            raise self.fail(
                f"{what} {count} at byte {start} cannot fit in the {left} bytes left in the "
                f"{self.region}",
                start,
            )
        return count

    def uvarint_chunk(self, count: int, what: str) -> list[int]:
        """`count` uvarints back to back."""
        return [self.uvarint(what) for _ in range(count)]

    def delta_uvarint_chunk(self, count: int, what: str) -> list[int]:
        """A uvarint, then uvarint differences; the running sum wraps modulo 2**64."""
        values = []
        last = 0
        for _ in range(count):
            last = (last + self.uvarint(what)) & _U64
            values.append(last)
        return values

    def delta_varint_chunk(self, count: int, what: str) -> list[int]:
        """A zigzag varint, then zigzag differences; the running sum wraps like Go int64."""
        values = []
        last = 0
        for _ in range(count):
            last = wrap_int64(last + self.varint(what))
            values.append(last)
        return values

    def take(self, length: int, what: str) -> tuple[int, int]:
        """(start, end) of the next `length` bytes, which must lie inside the region."""
        start = self.pos
        if length > self.end - start:
            raise self.fail(
                f"{what} ({length} bytes at byte {start}) runs past the end of the "
                f"{self.region} (byte {self.end})",
                start,
            )
        self.pos = start + length
        return start, self.pos

    def text(self, start: int, end: int, what: str) -> str:
        try:
            return self.buf[start:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(
                f"{what} at byte {start} is not valid UTF-8 (bad byte at {start + exc.start})",
                start + exc.start,
            ) from None

    def expect_end(self) -> None:
        if self.pos != self.end:
            raise self.fail(
                f"{self.end - self.pos} unread bytes at byte {self.pos} at the end of the "
                f"{self.region}",
                self.pos,
            )


def read_uvarint_reversed(buf: bytes, floor: int) -> tuple[int, int]:
    """(value, byte count) of the trailer: uvarint bytes stored in reverse at the end of `buf`.

    The last byte holds the least-significant 7 bits; walking backwards, each byte with 0x80 set
    says another, more significant, byte precedes it. The walk may not go below `floor`.
    """
    last = len(buf) - 1
    pos = last
    result = 0
    shift = 0
    while True:
        if pos < floor:
            raise DecodeError(
                f"size-tables length: reversed uvarint ending at byte {last} runs past the "
                f"start of the message body (byte {floor})",
                byte_offset=last,
            )
        byte = buf[pos]
        if shift == 63 and byte > 1:
            raise DecodeError(
                f"size-tables length: reversed uvarint ending at byte {last} overflows 64 bits",
                byte_offset=last,
            )
        result |= (byte & 0x7F) << shift
        pos -= 1
        if byte < 0x80:
            return result, last - pos
        shift += 7


# ---------------------------------------------------------------------------------------------
# Column values (§3.3)


def encode_value(type_code: int, flags: int, value: Any) -> bytes | None:
    """The bytes of one column value inside a nullable-bytes chunk; None is NULL."""
    if value is None:
        return None
    layout = VALUE_LAYOUT.get(type_code)
    out = bytearray()
    if layout == _SIGNED_OR_UNSIGNED:
        if flags & mysql.FLAG_UNSIGNED:
            _check_int(value, 0, _U64, type_code)
            encode_uvarint(out, value)
        else:
            _check_int(value, _I64_MIN, _I64_MAX, type_code)
            encode_varint(out, value)
    elif layout == _ZIGZAG:
        _check_int(value, _I64_MIN, _I64_MAX, type_code)
        encode_varint(out, value)
    elif layout == _UVARINT:
        _check_int(value, 0, _U64, type_code)
        encode_uvarint(out, value)
    elif layout == _FLOAT:
        return _FLOAT64.pack(mysql.float32(value))  # TiCDC widens the float32 to float64
    elif layout == _DOUBLE:
        return _FLOAT64.pack(value)
    elif layout in (_STRING_BYTES, _TEXT):
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise ValueError(f"craft carries type {type_code} as text or bytes, not {value!r}")
    elif layout == _NO_VALUE:
        return None  # TiCDC writes NULL for these types whatever the value
    else:
        raise ValueError(f"type code {type_code} has no craft value encoding")
    return bytes(out)


def _check_int(value: Any, low: int, high: int, type_code: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(
            f"craft type {type_code} needs an integer in [{low}, {high}], not {value!r}"
        )


def _varint_value(buf: bytes, start: int, end: int, name: str, label: str, signed: bool) -> int:
    """A value that must be exactly one (zigzag) varint filling `buf[start:end]`."""
    if end - start == 1 and buf[start] < 0x80:  # one-byte values are the common case
        value = buf[start]
    else:
        reader = _Reader(buf, start, end, f"value of column {name!r}")
        value = reader.uvarint(label, "varint" if signed else "uvarint")
        reader.expect_end()
    return unzigzag(value) if signed else value


def decode_value(buf: bytes, start: int, end: int, name: str, type_code: int, flags: int) -> Any:
    """The event-model value of the non-NULL column bytes `buf[start:end]`."""
    layout = VALUE_LAYOUT.get(type_code)
    if layout == _STRING_BYTES:
        if mysql.is_binary_string(type_code, flags):
            return buf[start:end]
        return _utf8_value(buf, start, end, name)
    if layout == _SIGNED_OR_UNSIGNED:
        unsigned = flags & mysql.FLAG_UNSIGNED
        label = "unsigned integer" if unsigned else "signed integer"
        return _varint_value(buf, start, end, name, label, not unsigned)
    if layout == _TEXT:
        return _utf8_value(buf, start, end, name)
    if layout in (_FLOAT, _DOUBLE):
        label = "FLOAT" if layout == _FLOAT else "DOUBLE"
        if end - start != 8:
            raise DecodeError(
                f"{label} value of column {name!r} at byte {start} is {end - start} bytes; "
                f"expected 8",
                byte_offset=start,
            )
        value = _FLOAT64.unpack_from(buf, start)[0]
        if layout == _DOUBLE:
            return value
        try:
            return mysql.float32(value)
        except OverflowError:
            raise DecodeError(
                f"FLOAT value of column {name!r} at byte {start} ({value!r}) is outside the "
                f"float32 range",
                byte_offset=start,
            ) from None
    if layout == _UVARINT:
        return _varint_value(buf, start, end, name, "ENUM/SET/BIT value", False)
    if layout == _ZIGZAG:
        return _varint_value(buf, start, end, name, "YEAR", True)
    raise DecodeError(
        f"column {name!r} has type code {type_code}, which carries no value in craft, but a "
        f"{end - start}-byte value is at byte {start}",
        byte_offset=start,
    )


def _utf8_value(buf: bytes, start: int, end: int, name: str) -> str:
    try:
        return buf[start:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(
            f"value of column {name!r} at byte {start} is not valid UTF-8 "
            f"(bad byte at {start + exc.start})",
            byte_offset=start + exc.start,
        ) from None


# ---------------------------------------------------------------------------------------------
# Decoder


class _Layout:
    """Where the parts of one message lie, from its version, trailer and size tables."""

    __slots__ = ("body_sizes", "body_start", "dict_end", "dict_start", "headers_end", "tables")

    def __init__(self, buf: bytes):
        version_reader = _Reader(buf, 0, len(buf), "message")
        version = version_reader.uvarint("version")
        if version != VERSION:
            raise DecodeError(
                f"unsupported craft version {version} at byte 0; expected {VERSION}", byte_offset=0
            )
        body_start = version_reader.pos
        length, trailer_bytes = read_uvarint_reversed(buf, body_start)
        tables_end = len(buf) - trailer_bytes
        available = tables_end - body_start
        if length > available:
            raise DecodeError(
                f"size tables claim {length} bytes but only {available} bytes lie between the "
                f"version and the trailer",
                byte_offset=tables_end,
            )
        tables_start = tables_end - length
        self.tables = _size_tables(buf, tables_start, tables_end)
        header_size, dict_size = self.tables[0]
        self.body_sizes = self.tables[1]
        if header_size < 0:
            raise DecodeError(f"header size {header_size} is negative", byte_offset=tables_start)
        if dict_size < 0:
            raise DecodeError(f"dictionary size {dict_size} is negative", byte_offset=tables_start)
        for index, size in enumerate(self.body_sizes):
            if size < 0:
                raise DecodeError(
                    f"body size {size} of event {index} is negative", byte_offset=tables_start
                )
        bodies = sum(self.body_sizes)
        claimed = header_size + bodies + dict_size
        if claimed != tables_start - body_start:
            raise DecodeError(
                f"size tables claim {claimed} bytes of headers ({header_size}), bodies "
                f"({bodies}) and term dictionary ({dict_size}) but "
                f"{tables_start - body_start} bytes lie between the version and the size tables",
                byte_offset=body_start,
            )
        self.body_start = body_start
        self.headers_end = body_start + header_size
        self.dict_start = self.headers_end + bodies
        self.dict_end = tables_start


def _size_tables(buf: bytes, start: int, end: int) -> list[list[int]]:
    """Tables until the region ends, each a uvarint count plus a delta-varint chunk; the first
    must be the meta table [header size, dictionary size], the second the body sizes."""
    reader = _Reader(buf, start, end, "size tables")
    tables = []
    while reader.pos < end:
        what = f"size table {len(tables)}"
        count = reader.count(f"{what} count")
        tables.append(reader.delta_varint_chunk(count, what))
    if len(tables) < 2:
        raise DecodeError(
            f"size tables hold {len(tables)} table(s); expected at least 2 (meta sizes, body "
            f"sizes)",
            byte_offset=start,
        )
    if len(tables[0]) != 2:
        raise DecodeError(
            f"meta size table holds {len(tables[0])} entries; expected 2 (header size, "
            f"dictionary size)",
            byte_offset=start,
        )
    return tables


def _term_dictionary(buf: bytes, start: int, end: int) -> list[str]:
    """`uvarint count` + string chunk; absent (zero bytes) when the message names nothing."""
    if start == end:
        return []
    reader = _Reader(buf, start, end, "term dictionary")
    count = reader.count("term count")
    lengths = reader.uvarint_chunk(count, "term length")
    terms = []
    for index, length in enumerate(lengths):
        term_start, term_end = reader.take(length, f"term {index}")
        terms.append(reader.text(term_start, term_end, f"term {index}"))
    reader.expect_end()
    return terms


def _lookup_term(terms: list[str], term_id: int, what: str, byte: int) -> str:
    if 0 <= term_id < len(terms):
        return terms[term_id]
    raise DecodeError(
        f"{what} id {term_id} at byte {byte} is not in the term dictionary ({len(terms)} terms)",
        byte_offset=byte,
    )


class _Headers:
    """The five header chunks of n events, validated as they are read."""

    __slots__ = ("partitions", "schemas", "tables", "timestamps", "types")

    def __init__(self, buf: bytes, start: int, end: int, count: int, terms: list[str]):
        reader = _Reader(buf, start, end, "headers")
        self.timestamps = reader.delta_uvarint_chunk(count, "commit ts")
        self.types = []
        for _ in range(count):
            byte = reader.pos
            event_type = reader.uvarint("event type")
            if event_type not in (EVENT_ROW, EVENT_DDL, EVENT_RESOLVED):
                raise DecodeError(
                    f"event type {event_type} at byte {byte}; expected 1 (row), 2 (DDL) or "
                    f"3 (resolved)",
                    byte_offset=byte,
                )
            self.types.append(event_type)
        self.partitions = []
        last = 0
        for _ in range(count):
            byte = reader.pos
            last = wrap_int64(last + reader.varint("partition id"))
            if last < NULL_ID:
                raise DecodeError(
                    f"partition id {last} at byte {byte}; expected -1 (none) or a physical "
                    f"table id",
                    byte_offset=byte,
                )
            self.partitions.append(None if last == NULL_ID else last)
        self.schemas = self._names(reader, count, terms, "schema")
        self.tables = self._names(reader, count, terms, "table")
        reader.expect_end()

    @staticmethod
    def _names(reader: _Reader, count: int, terms: list[str], what: str) -> list[str]:
        """Delta-varint dictionary ids; −1 (no name) becomes "" as in TiCDC's own decoder."""
        names = []
        last = 0
        for _ in range(count):
            byte = reader.pos
            last = wrap_int64(last + reader.varint(f"{what} id"))
            names.append("" if last == NULL_ID else _lookup_term(terms, last, what, byte))
        return names


def _column_group(
    buf: bytes, start: int, end: int, terms: list[str], region: str
) -> tuple[int, Image]:
    """(group type, image) of one column group: type byte, column count, name-id delta-varint
    chunk, type uvarint chunk, flag uvarint chunk and nullable-bytes value chunk."""
    reader = _Reader(buf, start, end, region)
    group_type = reader.byte("column group type")
    if group_type != GROUP_NEW and group_type != GROUP_OLD:
        raise DecodeError(
            f"column group type {group_type} at byte {start}; expected 1 (new values) or "
            f"2 (old values)",
            byte_offset=start,
        )
    count = reader.count("column count", _MIN_BYTES_PER_COLUMN)
    names = []
    seen = set()
    last = 0
    for _ in range(count):
        byte = reader.pos
        last = wrap_int64(last + reader.varint("column name id"))
        name = _lookup_term(terms, last, "column name", byte)
        if name in seen:
            raise DecodeError(f"column {name!r} appears twice in the {region}", byte_offset=byte)
        seen.add(name)
        names.append(name)
    type_codes = []
    for _ in range(count):
        byte = reader.pos
        type_code = reader.uvarint("column type")
        if type_code > 0xFF:
            raise DecodeError(
                f"column type {type_code} at byte {byte} is not a MySQL type code (0-255)",
                byte_offset=byte,
            )
        type_codes.append(type_code)
    flag_values = reader.uvarint_chunk(count, "column flags")
    lengths = []
    for _ in range(count):
        byte = reader.pos
        length = reader.varint("value length")
        if length < -1:
            raise DecodeError(
                f"value length {length} at byte {byte}; expected -1 (NULL) or a byte count",
                byte_offset=byte,
            )
        lengths.append(length)
    image: Image = {}
    for name, type_code, flags, length in zip(names, type_codes, flag_values, lengths, strict=True):
        if length == -1:
            value = None
        else:
            value_start, value_end = reader.take(length, f"value of column {name!r}")
            value = decode_value(buf, value_start, value_end, name, type_code, flags)
        image[name] = Column(type_code, flags, value)
    reader.expect_end()
    return group_type, image


def _row_event(
    buf: bytes, start: int, end: int, index: int, group_sizes: list[int], terms: list[str]
) -> tuple[str, Image | None, Image | None]:
    """(op, new image, old image) of a row body: one or two column groups (§3.2)."""
    if not group_sizes:
        raise DecodeError(f"row event {index} has no column groups", byte_offset=start)
    if len(group_sizes) > 2:
        raise DecodeError(
            f"row event {index} has {len(group_sizes)} column groups; expected 1 or 2",
            byte_offset=start,
        )
    for group, size in enumerate(group_sizes):
        if size < 0:
            raise DecodeError(
                f"column group {group} of event {index} has negative size {size}",
                byte_offset=start,
            )
    if sum(group_sizes) != end - start:
        raise DecodeError(
            f"column groups of event {index} add up to {sum(group_sizes)} bytes but its body "
            f"holds {end - start}",
            byte_offset=start,
        )
    new = old = None
    group_start = start
    for group, size in enumerate(group_sizes):
        group_type, image = _column_group(
            buf, group_start, group_start + size, terms, f"column group {group} of event {index}"
        )
        if (new if group_type == GROUP_NEW else old) is not None:
            kind = "new" if group_type == GROUP_NEW else "old"
            raise DecodeError(
                f"second {kind}-value column group at byte {group_start} in event {index}",
                byte_offset=group_start,
            )
        if group_type == GROUP_NEW:
            new = image
        else:
            old = image
        group_start += size
    if new is not None and old is not None:
        return model.UPDATE, new, old
    return (model.INSERT, new, None) if new is not None else (model.DELETE, None, old)


def _ddl_event(buf: bytes, start: int, end: int, index: int) -> tuple[int | None, str]:
    """(ActionType, query) of a DDL body: uvarint ActionType, uvarint length + UTF-8 query."""
    reader = _Reader(buf, start, end, f"body of event {index}")
    action = reader.uvarint("DDL type")
    length = reader.uvarint("query length")
    query_start, query_end = reader.take(length, "query")
    query = reader.text(query_start, query_end, "query")
    reader.expect_end()
    return (action or None), query  # ActionNone (0) means TiCDC had no type to give


def _read_headers(buf: bytes) -> tuple[_Layout, list[str], _Headers]:
    """The layout, term dictionary and event headers of a message: all but the event bodies."""
    layout = _Layout(buf)
    terms = _term_dictionary(buf, layout.dict_start, layout.dict_end)
    count = len(layout.body_sizes)
    return layout, terms, _Headers(buf, layout.body_start, layout.headers_end, count, terms)


def _check_size_table_count(layout: _Layout, headers: _Headers) -> None:
    """Two size tables, plus one of column-group sizes per event when any event is a row."""
    count = len(layout.body_sizes)
    has_rows = EVENT_ROW in headers.types
    expected_tables = 2 + count if has_rows else 2
    if len(layout.tables) != expected_tables:
        raise DecodeError(
            f"size tables hold {len(layout.tables)} tables; expected {expected_tables} for "
            f"{count} events{' with column groups' if has_rows else ''}",
            byte_offset=layout.dict_end,
        )


def decode_message(
    buf: bytes,
    topic: str,
    partition: int,
    offset: int,
    delete_handle_key_only: bool = False,
) -> list[Event]:
    """Every event of one craft message, in message order (the pure-Python reference)."""
    layout, terms, headers = _read_headers(buf)
    count = len(layout.body_sizes)
    _check_size_table_count(layout, headers)
    events: list[Event] = []
    start = layout.headers_end
    for index in range(count):
        end = start + layout.body_sizes[index]
        event_type = headers.types[index]
        ts = headers.timestamps[index]
        if event_type == EVENT_ROW:
            op, new, old = _row_event(buf, start, end, index, layout.tables[2 + index], terms)
            events.append(
                RowEvent(
                    commit_ts=ts,
                    schema=headers.schemas[index],
                    table=headers.tables[index],
                    op=op,
                    columns=new,
                    old_columns=old,
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    index=index,
                    partition_id=headers.partitions[index],
                    handle_key_only=delete_handle_key_only and op == model.DELETE,
                )
            )
        elif event_type == EVENT_DDL:
            ddl_type, query = _ddl_event(buf, start, end, index)
            events.append(
                DdlEvent(
                    commit_ts=ts,
                    schema=headers.schemas[index],
                    table=headers.tables[index],
                    query=query,
                    ddl_type=ddl_type,
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    index=index,
                )
            )
        else:
            if end != start:
                raise DecodeError(
                    f"resolved event {index} has a {end - start}-byte body at byte {start}; "
                    f"expected an empty body",
                    byte_offset=start,
                )
            events.append(ResolvedEvent(ts, topic, partition, offset, index))
        start = end
    return events


def _load_speedups():
    """The compiled decoder, configured with the event model, or None when it is not built
    (or the run is pure: ``engines.pure``)."""
    module = native("ticdc_lake.protocols.native._craft_speedups")
    return None if module is None else configure_speedups(module)


def configure_speedups(module):
    """Hand the event classes to a compiled decoder module; None if it cannot build them."""
    try:
        module.configure(
            Column,
            RowEvent,
            DdlEvent,
            ResolvedEvent,
            DecodeError,
            model.INSERT,
            model.UPDATE,
            model.DELETE,
            VALUE_LAYOUT,
        )
    except (TypeError, ValueError) as exc:
        # The event model changed shape under the extension: decoding stays correct in Python.
        warnings.warn(f"craft speedups disabled: {exc}", RuntimeWarning, stacklevel=2)
        return None
    return module


SPEEDUPS = _load_speedups()
_DEFAULT = object()


class CraftDecoder(Decoder):
    """Decodes a craft Kafka value into row, DDL and resolved events.

    Options: `delete_only_output_handle_key_columns` (set it when the changefeed does): delete
    events are then marked `handle_key_only`, because their old image holds only the handle key.
    `speedups=None` forces the pure-Python reference decoder.
    """

    protocol = "craft"

    def __init__(self, settings: CodecSettings | None = None, *, speedups: Any = _DEFAULT):
        super().__init__(settings)
        if self.settings.compression != "none":
            raise ConfigError(
                f"craft values are never compressed by TiCDC; compression must be none, not "
                f"{self.settings.compression!r}"
            )
        self.speedups = SPEEDUPS if speedups is _DEFAULT else speedups
        self._delete_handle_key_only = bool(
            self.settings.option(OPTION_DELETE_HANDLE_KEY_ONLY, False)
        )

    def _tables_named(self, record: KafkaRecord) -> frozenset[tuple[str, str]] | None:
        """The headers' schema and table of every row and DDL event: the bodies not read."""
        _, _, headers = _read_headers(bytes(record.value or b""))
        return frozenset(
            (schema, table)
            for schema, table, kind in zip(
                headers.schemas, headers.tables, headers.types, strict=True
            )
            if kind != EVENT_RESOLVED
        )

    def _decode(self, record: KafkaRecord) -> list[Event]:
        value = record.value
        if value is None:
            raise DecodeError("craft message has no value (a tombstone); TiCDC always sends one")
        if not isinstance(value, bytes):
            value = bytes(value)
        decode = self.speedups.decode if self.speedups is not None else decode_message
        return decode(
            value, record.topic, record.partition, record.offset, self._delete_handle_key_only
        )


# ---------------------------------------------------------------------------------------------
# Encoder


class _TermDictionary:
    """Message-local term ids in order of first use."""

    __slots__ = ("ids", "terms")

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.terms: list[bytes] = []

    def id(self, term: str) -> int:
        term_id = self.ids.get(term)
        if term_id is None:
            term_id = self.ids[term] = len(self.terms)
            self.terms.append(term.encode("utf-8"))
        return term_id

    def nullable_id(self, term: str) -> int:
        """−1 for an empty name, as TiCDC does for resolved events and schema-less DDL."""
        return self.id(term) if term else NULL_ID

    def encode(self, out: bytearray) -> None:
        if self.terms:  # an empty dictionary takes no bytes at all
            encode_uvarint(out, len(self.terms))
            encode_string_chunk(out, self.terms)


def _group_columns(image: Image, handle_key_only: bool) -> list[tuple[str, Column, bytes | None]]:
    rows = []
    for name, column in image.items():
        if handle_key_only and not column.flags & mysql.FLAG_HANDLE_KEY:
            continue
        if column.type_code is None:
            raise ValueError(f"column {name!r} has no type code; craft needs one")
        rows.append((name, column, encode_value(column.type_code, column.flags, column.value)))
    return rows


class _RowBatch:
    """Row events waiting for one message, with TiCDC's estimate of the message size."""

    def __init__(self, delete_handle_key_only: bool):
        self.delete_handle_key_only = delete_handle_key_only
        self.events: list[RowEvent] = []
        self.groups: list[list[tuple[int, list[tuple[str, Column, bytes | None]]]]] = []
        self.estimated_size = 0

    def append(self, event: RowEvent) -> None:
        if event.commit_ts is None:
            raise ValueError("craft needs a commit TS for every row event; this one has none")
        groups = []
        if event.columns:
            groups.append((GROUP_NEW, _group_columns(event.columns, False)))
        if event.old_columns:
            key_only = self.delete_handle_key_only and event.op == model.DELETE
            old = _group_columns(event.old_columns, key_only)
            if old:
                groups.append((GROUP_OLD, old))
        if not groups:
            raise ValueError(f"row event {event!r} has no columns craft could encode")
        self.events.append(event)
        self.groups.append(groups)
        # tiflow's estimate: 32 bytes of header integers plus the names, 16 bytes per column.
        self.estimated_size += 32 + len(event.schema.encode()) + len(event.table.encode())
        for _, columns in groups:
            for name, _, value in columns:
                self.estimated_size += len(name.encode()) + len(value or b"") + 16

    def encode(self) -> bytes:
        terms = _TermDictionary()
        schema_ids = [terms.nullable_id(event.schema) for event in self.events]
        table_ids = [terms.nullable_id(event.table) for event in self.events]
        partitions = [
            NULL_ID if event.partition_id is None else event.partition_id for event in self.events
        ]
        out = bytearray()
        encode_uvarint(out, VERSION)
        headers_start = len(out)
        _encode_headers(
            out,
            [event.commit_ts for event in self.events],
            [EVENT_ROW] * len(self.events),
            partitions,
            schema_ids,
            table_ids,
        )
        header_size = len(out) - headers_start
        body_sizes = []
        group_tables = []
        for groups in self.groups:
            body_start = len(out)
            sizes = []
            for group_type, columns in groups:
                group_start = len(out)
                _encode_column_group(out, group_type, columns, terms)
                sizes.append(len(out) - group_start)
            body_sizes.append(len(out) - body_start)
            group_tables.append(sizes)
        return _finish(out, terms, header_size, body_sizes, group_tables)


def _encode_headers(
    out: bytearray,
    timestamps: list[int],
    types: list[int],
    partitions: list[int],
    schema_ids: list[int],
    table_ids: list[int],
) -> None:
    encode_delta_uvarint_chunk(out, timestamps)
    encode_uvarint_chunk(out, types)
    encode_delta_varint_chunk(out, partitions)
    encode_delta_varint_chunk(out, schema_ids)
    encode_delta_varint_chunk(out, table_ids)


def _encode_column_group(
    out: bytearray,
    group_type: int,
    columns: list[tuple[str, Column, bytes | None]],
    terms: _TermDictionary,
) -> None:
    out.append(group_type)
    encode_uvarint(out, len(columns))
    encode_delta_varint_chunk(out, [terms.id(name) for name, _, _ in columns])
    encode_uvarint_chunk(out, (column.type_code for _, column, _ in columns))
    encode_uvarint_chunk(out, (column.flags for _, column, _ in columns))
    encode_nullable_bytes_chunk(out, [value for _, _, value in columns])


def _finish(
    out: bytearray,
    terms: _TermDictionary,
    header_size: int,
    body_sizes: list[int],
    group_tables: list[list[int]],
) -> bytes:
    """Append the term dictionary, the size tables and the trailer."""
    dict_start = len(out)
    terms.encode(out)
    encode_size_tables(out, [[header_size, len(out) - dict_start], body_sizes, *group_tables])
    return bytes(out)


def _single_event_message(ts: int, event_type: int, schema: str, table: str, body: bytes) -> bytes:
    terms = _TermDictionary()
    schema_id = terms.nullable_id(schema)
    table_id = terms.nullable_id(table)
    out = bytearray()
    encode_uvarint(out, VERSION)
    headers_start = len(out)
    _encode_headers(out, [ts], [event_type], [NULL_ID], [schema_id], [table_id])
    header_size = len(out) - headers_start
    out += body
    return _finish(out, terms, header_size, [len(body)], [])


def encode_ddl(event: DdlEvent) -> bytes:
    """A one-event message: body = uvarint ActionType (0 when unknown) + uvarint-length query."""
    if event.commit_ts is None:
        raise ValueError("craft needs a commit TS for every DDL event; this one has none")
    body = bytearray()
    encode_uvarint(body, event.ddl_type or 0)
    query = event.query.encode("utf-8")
    encode_uvarint(body, len(query))
    body += query
    return _single_event_message(event.commit_ts, EVENT_DDL, event.schema, event.table, body)


def encode_resolved(event: ResolvedEvent) -> bytes:
    """A one-event message with an empty body, no names and partition −1."""
    return _single_event_message(event.ts, EVENT_RESOLVED, "", "", b"")


class CraftEncoder(Encoder):
    """Encodes one Kafka partition's events as tiflow's craft encoder does.

    Consecutive row events share a message until `max_batch_size` rows or, by tiflow's size
    estimate, `max_message_bytes` (option, default 10 MiB) is passed; DDL and resolved events get
    a message each. Option `delete_only_output_handle_key_columns`: the old image of a delete
    keeps only handle-key columns.
    """

    protocol = "craft"

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        delete_key_only = bool(self.settings.option(OPTION_DELETE_HANDLE_KEY_ONLY, False))
        max_bytes = self.settings.option(OPTION_MAX_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES)
        max_rows = self.settings.max_batch_size
        messages: list[KafkaMessage] = []
        batch = _RowBatch(delete_key_only)

        def flush():
            nonlocal batch
            if batch.events:
                messages.append(KafkaMessage(None, batch.encode()))
                batch = _RowBatch(delete_key_only)

        for event in events:
            if isinstance(event, RowEvent):
                batch.append(event)
                if len(batch.events) >= max_rows or batch.estimated_size > max_bytes:
                    flush()
            else:
                flush()  # a DDL or resolved event never joins a row batch
                if isinstance(event, DdlEvent):
                    messages.append(KafkaMessage(None, encode_ddl(event)))
                else:
                    messages.append(KafkaMessage(None, encode_resolved(event)))
        flush()
        return messages
