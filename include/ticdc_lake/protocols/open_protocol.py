"""TiCDC Open Protocol (`protocol=open-protocol`): batched JSON key/value pairs (PROTOCOLS.md §2).

One Kafka message carries N events::

    KEY   = VERSION(8) { KEYLEN(8) KEYJSON }*N      all integers big-endian uint64, VERSION = 1
    VALUE =            { VALLEN(8) VALJSON }*N      VALLEN = 0 for resolved events

Key JSON: `ts` (commit/DDL/resolved TS), `scm`, `tbl`, `rid` (deprecated integer handle, not
kept), `ptn` (physical partition id), `t` (1 row, 2 DDL, 3 resolved), `ohk` (images hold only
handle-key columns) and `ccl` (claim-check location of the full event). Row values are
`{"u": new}`, `{"u": new, "p": old}` or `{"d": old}`; each image maps a column name to
`{"t": type code, "h": true?, "f": flags, "v": value}`. DDL values are `{"q": query, "t": type}`.
Value compression (none/snappy/lz4, from the topic config) applies to each value JSON alone.

Columns without `f` are in the format TiCDC wrote before v4.0.5 (the docs' examples and the Java
sample data): see `_old_format_column`. A number, BIT, ENUM or SET value sent as a JSON string
is a default TiCDC before v6.5.9, v7.1.5, v7.5.2 and v8.0.0 filled in for a column added after
the row was written, as TiDB stores it: see `decode_stored_default`.

The decoder below is the pure-Python reference. When the compiled `native._open_speedups`
extension is importable, it decodes row and resolved entries in C (Column objects built at C
level, common values converted there) and defers to these functions for everything else, so both
paths give the same events and the same DecodeError; the tests hold them to that. `decode_into`
goes one step further for the decode stage: messages of row events the C reader takes whole go
straight into silver's buffers, with no event objects at all.

Encoder options (`CodecSettings.options`):

* `output_old_value` (default True): updates carry `p`, the old image.
* `only_output_updated_columns` (False): `p` keeps only the columns whose value changed.
* `delete_only_output_handle_key_columns` (False): `d` keeps only the handle-key columns.
* `max_message_bytes` (10 MiB): a batch is closed before it would pass this, by TiCDC's formula.
* `large_message_handle_option` ("none"): what happens to one event above `max_message_bytes`.
  "none" fails; "handle_key_only" sends only its handle-key columns and `ohk`; "claim_check"
  stores the full event through `settings.claim_check` and sends `ccl` with the handle-key
  columns.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
import struct
import warnings
from collections.abc import Sequence
from decimal import ROUND_FLOOR, Decimal, localcontext
from typing import TYPE_CHECKING, Any

import orjson

from ticdc_lake.compression import compress, decompress
from ticdc_lake.engines import native
from ticdc_lake.errors import ConfigError, DecodeError
from ticdc_lake.protocols.base import (
    CodecSettings,
    Decoder,
    Encoder,
    KafkaMessage,
    fits_message_size,
)
from ticdc_lake.protocols.go_quote import go_quote, go_unquote
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
from ticdc_lake.silver.mysql import (
    FLAG_BINARY,
    FLAG_HANDLE_KEY,
    TYPE_BIT,
    TYPE_DECIMAL_OLD,
    TYPE_DOUBLE,
    TYPE_ENUM,
    TYPE_FLOAT,
    TYPE_GEOMETRY,
    TYPE_INT24,
    TYPE_JSON,
    TYPE_LONG,
    TYPE_LONGLONG,
    TYPE_NEWDECIMAL,
    TYPE_NULL,
    TYPE_SET,
    TYPE_SHORT,
    TYPE_TINY,
    TYPE_VECTOR_FLOAT32,
    TYPE_YEAR,
)

if TYPE_CHECKING:
    from ticdc_lake.silver.rows import ChangeRows

BATCH_VERSION = 1
EVENT_ROW = 1
EVENT_DDL = 2
EVENT_RESOLVED = 3
DEFAULT_MAX_MESSAGE_BYTES = 10 * 1024 * 1024
# What TiCDC adds to a message's key+value bytes when it checks max-message-bytes: Sarama's
# worst-case record overhead (5 varint32 + 1 varint64 + 1 attribute byte).
KAFKA_RECORD_OVERHEAD = 5 * 5 + 10 + 1
LARGE_MESSAGE_OPTIONS = ("none", "handle_key_only", "claim_check")

_U64 = struct.Struct(">Q")
# Go's base64.StdEncoding: padded, standard alphabet, nothing else (strict_mode rejects the rest).
_strict_base64 = functools.partial(binascii.a2b_base64, strict_mode=True)
_unpack_u64 = _U64.unpack_from
_loads = orjson.loads

_INTEGER_TYPES = frozenset(
    {TYPE_TINY, TYPE_SHORT, TYPE_INT24, TYPE_LONG, TYPE_LONGLONG, TYPE_YEAR, TYPE_BIT}
    | {TYPE_ENUM, TYPE_SET}
)
_TEXT_VALUE_TYPES = frozenset(
    {TYPE_DECIMAL_OLD, TYPE_NEWDECIMAL, TYPE_JSON, TYPE_VECTOR_FLOAT32} | mysql.TEMPORAL_TEXT_TYPES
)
_STRING_TYPES = mysql.STRING_TYPES
_BLOB_TYPES = mysql.BLOB_TYPES
_KNOWN_TYPES = (
    _INTEGER_TYPES
    | _TEXT_VALUE_TYPES
    | _STRING_TYPES
    | _BLOB_TYPES
    | {TYPE_FLOAT, TYPE_DOUBLE, TYPE_NULL}
)

# Types whose JSON value already is the event model's value, keyed by the binary flag bit:
# the fast path only checks the JSON kind. A non-binary CHAR/VARCHAR is plain text too, a binary
# one needs Go-unquoting, so strings appear only in the first table.
_PASS_THROUGH = (
    {code: int for code in _INTEGER_TYPES}
    | {code: str for code in _TEXT_VALUE_TYPES}
    | {TYPE_DOUBLE: float}
)
_PASS_THROUGH_BY_BINARY_BIT = (
    _PASS_THROUGH | {code: str for code in _STRING_TYPES},
    _PASS_THROUGH,
)


# ----------------------------------------------------------------------------------------------
# Decoder
# ----------------------------------------------------------------------------------------------


_DEFAULT = object()


class OpenProtocolDecoder(Decoder):
    """Kafka record → events. Every event carries the record's coordinates and its batch index.

    `speedups=None` forces the pure-Python reference decoder.
    """

    protocol = "open-protocol"

    def __init__(self, settings: CodecSettings | None = None, *, speedups: Any = _DEFAULT):
        super().__init__(settings)
        self.speedups = SPEEDUPS if speedups is _DEFAULT else speedups
        codec = self.settings.compression
        self._decompress = (
            None
            if codec == "none"
            else functools.partial(decompress, codec, limits=self.settings.limits)
        )

    def _compiled_input(self, key: Any, value: Any) -> tuple[bytes, bytes] | None:
        """The key and value the compiled decoder reads, or None when it is absent or they are
        not exact bytes (the reference decoder then decides)."""
        value = value or b""
        if self.speedups is None or type(key) is not bytes or type(value) is not bytes:
            return None
        return key, value

    def _decode_fast(self, record: KafkaRecord) -> list[Event] | None:
        compiled_input = self._compiled_input(record.key, record.value)
        if compiled_input is None:
            return None
        # None: the message holds something the extension leaves to Python (a DDL, a claim-check
        # key, an error to name), and the reference decoder decides. So it does for a value
        # that does not fit its type: it raises that error with the coordinates.
        return self.speedups.decode(
            *compiled_input, self._decompress, record.topic, record.partition, record.offset
        )

    def decode_parts_into(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        changes: ChangeRows,
        bronze_batch: int,
    ) -> bool:
        compiled_input, buffers = self._compiled_input(key, value), changes.compiled_buffers()
        if (
            compiled_input is None
            or buffers is None
            or not fits_message_size(key, value, self.settings.limits)
        ):
            return False
        return self.speedups.decode_into(
            *compiled_input, self._decompress, topic, partition, offset, buffers, bronze_batch,
            FLAG_HANDLE_KEY, self.settings.limits.max_table_columns,
        )  # fmt: skip

    def _decode(self, record: KafkaRecord) -> list[Event]:
        if record.key is None:
            raise DecodeError("record has no key; the Open Protocol frames its events in the key")
        return decode_frames(
            record.key, record.value or b"", record, self.settings, follow_claim_check=True
        )

    def _tables_named(self, record: KafkaRecord) -> frozenset[tuple[str, str]] | None:
        """The key names every event's table (``scm``, ``tbl``): read without the value."""
        key = record.key or b""
        read_batch_version(key)
        names, at = set(), 8
        while at < len(key):
            start = at + 8
            at = start + _unpack_u64(key, at)[0]
            if at > len(key):
                return None
            meta = _loads(key[start:at])
            if type(meta) is not dict:
                return None
            if meta.get("t") != EVENT_RESOLVED:
                names.add((meta["scm"], meta["tbl"]))
        return frozenset(names)


def decode_frames(
    key: bytes,
    value: bytes,
    record: KafkaRecord,
    settings: CodecSettings,
    *,
    follow_claim_check: bool,
) -> list[Event]:
    """The events of a message's framed entries: the reference decoder's per-message step."""
    events: list[Event] = []
    for index, (key_json, value_json) in enumerate(split_entries(key, value)):
        meta = _loads(key_json)
        if type(meta) is not dict:
            raise DecodeError(f"key entry {index} is not a JSON object: {key_json[:60]!r}")
        ts = meta.get("ts")
        if type(ts) is not int or ts < 0:
            raise DecodeError(f"key entry {index}: `ts` must be a uint64, got {ts!r}")
        kind = meta.get("t")
        if kind == EVENT_ROW and type(kind) is int:
            if "ccl" in meta:
                event = _claim_checked_row(meta["ccl"], record, index, settings, follow_claim_check)
            else:
                event = _row_event(meta, ts, value_json, record, index, settings)
        elif kind == EVENT_DDL and type(kind) is int:
            event = _ddl_event(meta, ts, value_json, record, index, settings)
        elif kind == EVENT_RESOLVED and type(kind) is int:
            if value_json:
                raise DecodeError(
                    f"entry {index} is a resolved event but its value is "
                    f"{len(value_json)} bytes, not empty"
                )
            event = ResolvedEvent(ts, record.topic, record.partition, record.offset, index)
        else:
            raise DecodeError(
                f"key entry {index}: unknown event type t={kind!r}; expected 1 (row), "
                "2 (DDL) or 3 (resolved)"
            )
        events.append(event)
    return events


def _value_document(value_json: bytes, index: int, what: str, settings: CodecSettings) -> dict:
    """The value JSON object of entry `index`, decompressed as the topic is configured."""
    if not value_json:
        raise DecodeError(f"entry {index} is a {what} event but its value is empty")
    codec = settings.compression
    if codec != "none":
        value_json = decompress(codec, value_json, settings.limits)
    document = _loads(value_json)
    if type(document) is not dict:
        raise DecodeError(f"value entry {index} is not a JSON object")
    return document


def _row_event(
    meta: dict,
    ts: int,
    value_json: bytes,
    record: KafkaRecord,
    index: int,
    settings: CodecSettings,
) -> RowEvent:
    schema = meta.get("scm", "")
    table = meta.get("tbl", "")
    partition_id = meta.get("ptn")
    if type(schema) is not str or type(table) is not str:
        raise DecodeError(f"key entry {index}: `scm` and `tbl` must be strings")
    if partition_id is not None and type(partition_id) is not int:
        raise DecodeError(f"key entry {index}: `ptn` must be an integer, got {partition_id!r}")
    op, columns, old_columns = decode_row_value(
        _value_document(value_json, index, "row", settings), index
    )
    return RowEvent(
        ts,
        schema,
        table,
        op,
        columns,
        old_columns,
        record.topic,
        record.partition,
        record.offset,
        index,
        partition_id,
        meta.get("ohk") is True,
    )


def _ddl_event(
    meta: dict,
    ts: int,
    value_json: bytes,
    record: KafkaRecord,
    index: int,
    settings: CodecSettings,
) -> DdlEvent:
    body = _value_document(value_json, index, "DDL", settings)
    query = body.get("q")
    ddl_type = body.get("t")
    if type(query) is not str:
        raise DecodeError(f"DDL value {index}: `q` must be the query string, got {query!r}")
    if ddl_type is not None and type(ddl_type) is not int:
        raise DecodeError(f"DDL value {index}: `t` must be an integer action type")
    schema = meta.get("scm", "")
    table = meta.get("tbl", "")
    if type(schema) is not str or type(table) is not str:
        raise DecodeError(f"key entry {index}: `scm` and `tbl` must be strings")
    return DdlEvent(
        ts, schema, table, query, ddl_type, record.topic, record.partition, record.offset, index
    )


def _claim_checked_row(
    location: Any,
    record: KafkaRecord,
    index: int,
    settings: CodecSettings,
    follow_claim_check: bool,
) -> RowEvent:
    """The full event behind a `ccl` key: its object holds the framed original key and value.

    The Kafka message's own value (handle-key columns only) is superseded and not read.
    """
    if type(location) is not str:
        raise DecodeError(f"key entry {index}: `ccl` must be a location string")
    if not follow_claim_check:
        raise DecodeError(f"claim-check object refers to another claim-check object {location!r}")
    store = settings.claim_check
    if store is None:
        raise DecodeError(
            f"row event {index} was moved to claim-check storage at {location!r}, but no "
            "claim-check storage roots are configured for this topic"
        )
    key, value = store.fetch(location)
    if key is None:
        raise DecodeError(f"claim-check object {location!r} has no key")
    try:
        events = decode_frames(key, value, record, settings, follow_claim_check=False)
    except DecodeError as exc:
        raise DecodeError(
            f"claim-check object {location!r}: {exc.reason}", byte_offset=exc.byte_offset
        ) from exc
    if len(events) != 1 or not isinstance(events[0], RowEvent):
        raise DecodeError(
            f"claim-check object {location!r} should hold one row event, found "
            f"{[event.kind for event in events]}"
        )
    event = events[0]
    event.index = index
    return event


def split_entries(key: bytes, value: bytes) -> list[tuple[bytes, bytes]]:
    """The (key JSON, value JSON) pairs of a message.

    Key: 8-byte version (must be 1), then entries; value: entries. An entry is an 8-byte
    big-endian length and that many bytes; the two framings must hold the same number.
    """
    read_batch_version(key)
    entries = []
    key_end, value_end = len(key), len(value)
    key_at, value_at = 8, 0
    while key_at < key_end:
        index = len(entries)
        if key_at + 8 > key_end or value_at + 8 > value_end:
            _raise_short_length(key, key_at, value, value_at, index)
        key_start = key_at + 8
        key_at = key_start + _unpack_u64(key, key_at)[0]
        value_start = value_at + 8
        value_at = value_start + _unpack_u64(value, value_at)[0]
        if key_at > key_end or value_at > value_end:
            _raise_overrun(key, key_start - 8, value, value_start - 8, index)
        entries.append((key[key_start:key_at], value[value_start:value_at]))
    if value_at != value_end:
        raise DecodeError(
            f"value count mismatch: the key holds {len(entries)} entries but the value has "
            f"{value_end - value_at} more bytes after them",
            byte_offset=value_at,
        )
    return entries


def read_batch_version(key: bytes) -> None:
    """Bytes 0..7 of the key: the big-endian batch version, which must be 1."""
    if len(key) < 8:
        raise DecodeError(
            f"truncated key: {len(key)} bytes, shorter than the 8-byte batch version",
            byte_offset=0,
        )
    version = _unpack_u64(key, 0)[0]
    if version != BATCH_VERSION:
        raise DecodeError(
            f"unsupported batch version {version} (expected {BATCH_VERSION}): not an Open "
            "Protocol key",
            byte_offset=0,
        )


def _raise_short_length(key: bytes, key_at: int, value: bytes, value_at: int, index: int):
    if key_at + 8 > len(key):
        raise DecodeError(
            f"truncated key: entry {index} needs an 8-byte length at byte {key_at}, "
            f"{len(key) - key_at} bytes left",
            byte_offset=key_at,
        )
    if value_at >= len(value):
        raise DecodeError(
            f"value count mismatch: key entry {index} has no value entry (the value holds {index})",
            byte_offset=value_at,
        )
    raise DecodeError(
        f"truncated value: entry {index} needs an 8-byte length at byte {value_at}, "
        f"{len(value) - value_at} bytes left",
        byte_offset=value_at,
    )


def _raise_overrun(key: bytes, key_at: int, value: bytes, value_at: int, index: int):
    for part, buffer, at in (("key", key, key_at), ("value", value, value_at)):
        declared = _unpack_u64(buffer, at)[0]
        if at + 8 + declared > len(buffer):
            raise DecodeError(
                f"truncated {part}: entry {index} declares {declared} bytes at byte {at}, "
                f"{len(buffer) - at - 8} bytes follow",
                byte_offset=at,
            )


def decode_row_value(body: dict, index: int) -> tuple[str, dict | None, dict | None]:
    """(op, new image, old image) of a row value `{"u"}`, `{"u","p"}` or `{"d"}`.

    An update's old image is always the whole row: when `p` holds only the changed columns
    (only-output-updated-columns), the others are taken from `u`, where they have the same value.
    """
    deleted = body.get("d")
    if deleted is not None:
        if "u" in body or "p" in body:
            raise DecodeError(f"row value {index} mixes `d` with `u`/`p`")
        return DELETE, None, decode_image(deleted, index, "d")
    new = body.get("u")
    if new is None:
        raise DecodeError(f"row value {index} has neither `u` nor `d`: keys {sorted(body)!r}")
    columns = decode_image(new, index, "u")
    previous = body.get("p")
    if previous is None:
        return INSERT, columns, None
    old_columns = decode_image(previous, index, "p")
    if old_columns.keys() != columns.keys():
        merged = dict(columns)
        merged.update(old_columns)
        old_columns = merged
    return UPDATE, columns, old_columns


def decode_image(raw: Any, index: int, image: str) -> dict[str, Column]:
    """Column name → Column for one image: the decoder's hot loop.

    The fast path takes a current-format column's JSON value as it is when its JSON kind is the
    one its type code (and binary bit) calls for; other values go through `decode_value`.
    Anything unusual (no `f`, a malformed column, a bad value) makes it give up, and
    `_decode_image_column_by_column` decodes the image again or names the problem.
    """
    if type(raw) is not dict:
        raise DecodeError(f"row value {index}: `{image}` must be a JSON object of columns")
    by_bit = _PASS_THROUGH_BY_BINARY_BIT
    out = {}
    try:
        for name, column in raw.items():
            code = column["t"]
            flags = column["f"]
            value = column["v"]
            if type(value) is not by_bit[flags & 1].get(code):
                value = decode_value(code, flags, value)
            out[name] = Column(code, flags, value)
    except (DecodeError, KeyError, TypeError, AttributeError):
        return _decode_image_column_by_column(raw, index, image)
    return out


def _decode_image_column_by_column(raw: dict, index: int, image: str) -> dict[str, Column]:
    out = {}
    for name, column in raw.items():
        try:
            code = column["t"]
            value = column["v"]
            flags = column.get("f")
            if flags is None:
                out[name] = _old_format_column(code, value, column)
            elif type(flags) is int:
                out[name] = Column(code, flags, decode_value(code, flags, value))
            else:
                raise DecodeError(f"`f` must be an integer flag set, got {_describe(flags)}")
        except DecodeError as exc:
            raise DecodeError(f"row value {index}, `{image}`.{name!r}: {exc.reason}") from exc
        except (KeyError, TypeError, AttributeError) as exc:
            raise DecodeError(
                f"row value {index}, `{image}`.{name!r}: {_column_shape_problem(column)}"
            ) from exc
    return out


def _column_shape_problem(column: Any) -> str:
    if type(column) is not dict:
        return f"a column must be a JSON object, got {type(column).__name__}"
    missing = [field for field in ("t", "v") if field not in column]
    if missing:
        return f"column object lacks {', '.join(repr(field) for field in missing)}"
    return f"type code must be an integer, got {column['t']!r}"


def decode_value(code: int, flags: int, value: Any) -> Any:
    """Event-model value of `v` for one column, checked against its type code. A number's
    default that old TiCDC sent as TiDB's stored text is converted (`decode_stored_default`)."""
    if type(value) is _PASS_THROUGH_BY_BINARY_BIT[flags & 1].get(code):
        return value
    if value is None:
        if code in _KNOWN_TYPES:
            return None
    elif code in _STRING_TYPES:
        return _decode_string(value, flags)
    elif code in _BLOB_TYPES:
        return _decode_blob(value, flags)
    elif type(value) is str and (code in _INTEGER_TYPES or code in _FLOAT_TYPES):
        return decode_stored_default(code, value)
    elif code == TYPE_FLOAT:
        return mysql.float32(_json_number(value, code))
    elif code == TYPE_DOUBLE:
        return float(_json_number(value, code))
    elif code in _INTEGER_TYPES:
        raise DecodeError(f"type {code} needs a JSON integer, got {_describe(value)}")
    elif code in _TEXT_VALUE_TYPES:
        raise DecodeError(f"type {code} needs a JSON string, got {_describe(value)}")
    elif code == TYPE_NULL:
        raise DecodeError(f"type 6 (NULL) needs a null value, got {_describe(value)}")
    if code == TYPE_GEOMETRY:
        raise DecodeError("GEOMETRY columns (type 255) are not supported by TiCDC")
    raise DecodeError(f"unknown column type code {code!r}")


def _decode_string(value: Any, flags: int) -> str | bytes:
    """CHAR/VARCHAR: plain UTF-8 text, or Go-quoted bytes when the binary flag is set."""
    if type(value) is not str:
        raise DecodeError(f"a string column needs a JSON string, got {_describe(value)}")
    if flags & FLAG_BINARY:
        return go_unquote(value)
    return value


def _decode_blob(value: Any, flags: int) -> str | bytes:
    """TEXT/BLOB: standard padded base64 of the raw bytes; TEXT is then UTF-8 text."""
    if type(value) is not str:
        raise DecodeError(f"a TEXT/BLOB column needs a base64 JSON string, got {_describe(value)}")
    try:
        raw = _strict_base64(value)
    except ValueError as exc:  # binascii.Error, or non-ASCII text
        raise DecodeError(f"TEXT/BLOB value is not padded standard base64: {exc}") from exc
    if flags & FLAG_BINARY:
        return raw
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"TEXT value is not UTF-8 after base64 decoding: {exc}") from exc


def _json_number(value: Any, code: int) -> int | float:
    if type(value) is float or type(value) is int:
        return value
    raise DecodeError(f"type {code} needs a JSON number, got {_describe(value)}")


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


# ----------------------------------------------------------------------------------------------
# Defaults sent as TiDB stores them (TiCDC before tiflow #10804)
# ----------------------------------------------------------------------------------------------

# A row written before ALTER TABLE ... ADD COLUMN has no value for that column in TiKV; TiCDC's
# mounter fills it in. Before tiflow #10804 (fixed in v6.5.9, v7.1.5, v7.5.2 and v8.0.0; v5.4.0
# up to those took the value from the column's OriginDefaultValue, earlier releases from its
# DefaultValue, NOT NULL columns only) it passed on the default exactly as TiDB keeps it in the
# table's schema: a Go string whatever the column's type, which the Open Protocol writes as a
# JSON string, e.g. `{"t":3,"f":65,"v":"5"}`. It comes in any image of such a row: mostly an
# update's `p` and a delete's `d`. Later TiCDC converts the text to the column's type as TiDB
# does when it reads such a row (types.Datum.ConvertTo); these functions make the same
# conversion from the same text, so both give the value TiDB holds. They accept only what TiDB
# stores: a TINYINT..BIGINT default is its decimal integer text ("5", "-3",
# "18446744073709551615"); FLOAT and DOUBLE a decimal number ("1.5"; TiDB prints it without an
# exponent, older releases kept the literal); YEAR the literal's digits ("2020", or "20" for
# 2020); BIT the value's big-endian bytes; ENUM and SET the member names.
_FLOAT_TYPES = frozenset({TYPE_FLOAT, TYPE_DOUBLE})
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,20}", re.ASCII).fullmatch
_YEAR_TEXT = re.compile(r"[0-9]{1,4}", re.ASCII).fullmatch
_FLOAT_TEXT = re.compile(
    r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?", re.ASCII
).fullmatch
_NUMERAL = re.compile(r"[0-9]+", re.ASCII).fullmatch
# TiDB prints the widest DOUBLE (a subnormal of 17 digits) in about 330 characters.
_MAX_FLOAT_TEXT = 400
_MAX_BIT_BYTES = 8
_OLD_TICDC = "TiCDC before v6.5.9, v7.1.5, v7.5.2 and v8.0.0"
_SENT_DEFAULTS = f"(how {_OLD_TICDC} sent a column's default)"


def decode_stored_default(code: int, text: str) -> int | float | str:
    """The value of a column's default that TiCDC sent as TiDB's stored text (see above)."""
    if code == TYPE_YEAR:
        return _stored_year(text)
    if code == TYPE_BIT:
        return _stored_bit(text)
    if code in (TYPE_ENUM, TYPE_SET):
        return _stored_member_names(code, text)
    if code in _FLOAT_TYPES:
        return _stored_float(code, text)
    return _stored_integer(code, text)


def _stored_integer(code: int, text: str) -> int:
    """TINYINT..BIGINT: `[-]digits`, the integer TiDB printed (its range is checked later)."""
    if _INTEGER_TEXT(text) is None:
        raise DecodeError(
            f"type {code} needs a JSON integer, or decimal integer text {_SENT_DEFAULTS}; "
            f"got {_describe(text)}"
        )
    return int(text)


def _stored_year(text: str) -> int:
    """YEAR: 1 to 4 digits, read as TiDB reads a string into a YEAR: "0000" is the zero year,
    a shorter zero ("0", "00") is 2000, 1..69 are 2001..2069 and 70..99 are 1970..1999."""
    if _YEAR_TEXT(text) is None:
        raise DecodeError(
            f"type 13 (YEAR) needs a JSON integer, or 1 to 4 digits {_SENT_DEFAULTS}; "
            f"got {_describe(text)}"
        )
    year = int(text)
    if year == 0:
        return 0 if len(text) == 4 else 2000
    if year <= 69:
        return 2000 + year
    if year <= 99:
        return 1900 + year
    return year


def _stored_float(code: int, text: str) -> float:
    """FLOAT/DOUBLE: a decimal number, optionally with an exponent; FLOAT rounds to float32."""
    if len(text) > _MAX_FLOAT_TEXT or _FLOAT_TEXT(text) is None:
        raise DecodeError(
            f"type {code} needs a JSON number, or decimal number text of at most "
            f"{_MAX_FLOAT_TEXT} characters {_SENT_DEFAULTS}; got {_describe(text)}"
        )
    number = float(text)
    if code == TYPE_DOUBLE:
        return number
    try:
        return mysql.float32(number)
    except OverflowError:
        raise DecodeError(f"FLOAT text {text[:40]!r} is beyond the FLOAT range") from None


def _stored_bit(text: str) -> int:
    """BIT: TiDB stores a BIT default as the value's big-endian bytes, which Go's JSON encoder
    wrote as characters (U+0000..U+007F for bytes below 0x80, valid UTF-8 as it is): encoded
    back as UTF-8 they are the bytes. "5" is therefore the byte 0x35, 53, as TiDB reads it.
    Bytes that are not valid UTF-8 became U+FFFD there, so that value is lost."""
    if "\ufffd" in text:
        raise DecodeError(
            f"BIT text {text[:40]!r} holds U+FFFD: {_OLD_TICDC} sent a BIT default as its "
            "bytes, and Go's JSON encoder replaced those that are not UTF-8, so the value is lost"
        )
    try:
        raw = text.encode().lstrip(b"\0")
    except UnicodeEncodeError:  # a lone surrogate (\ud800): no Go string gives one
        raise DecodeError(f"BIT text {text[:40]!r} is not a string of bytes") from None
    if len(raw) > _MAX_BIT_BYTES:
        raise DecodeError(
            f"BIT text of {len(raw)} bytes: {_OLD_TICDC} sent a BIT default as its big-endian "
            f"bytes, and a BIT value has at most {_MAX_BIT_BYTES}"
        )
    return int.from_bytes(raw, "big")


def _stored_member_names(code: int, text: str) -> int | str:
    """ENUM/SET: TiDB stores the member names ("b", "x,z"), and the Open Protocol does not
    carry the members that would give their index or bitmask, so a name is kept as text for
    gold to resolve from the table's DDL. The empty text is the empty set, and for an ENUM
    index 0, MySQL's '' member (an ENUM that declares '' itself is named '' either way). A
    numeral is refused: as a name ('10') it cannot be told from an index."""
    if not text:
        return 0
    if _NUMERAL(text) is not None:
        name, article = ("ENUM", "an") if code == TYPE_ENUM else ("SET", "a")
        raise DecodeError(
            f"{name} text {text[:40]!r}: {_OLD_TICDC} sent {article} {name} default by member "
            "name, and a member named by a numeral cannot be told from an index without the "
            "members, which the Open Protocol does not carry"
        )
    return text


def _old_format_column(code: Any, value: Any, column: dict) -> Column:
    """A column written before TiCDC v4.0.5: no `f`, and string values base64-encoded.

    Old TiCDC marshalled CHAR/VARCHAR/BINARY/VARBINARY and TEXT/BLOB values as Go `[]byte`,
    i.e. base64, and had no flags, so text and binary look alike. The rules, chosen so that the
    docs' examples and the Java sample data read as intended:

    * flags: only `h` survives, as FLAG_HANDLE_KEY; FLAG_BINARY is added when the value comes
      out as bytes, so the event stays self-consistent;
    * CHAR/VARCHAR: base64 that decodes to UTF-8 is that text (`"YWE="` → "aa"); anything else
      is read as a modern Go-quoted value (the docs' column table mixes both styles) and gives
      text if it is UTF-8, bytes otherwise (`"\\x89PNG..."` → bytes, `"test"` → "test");
    * TEXT/BLOB: base64, then text if UTF-8, bytes otherwise;
    * FLOAT/DOUBLE: numbers as usual; every other value is kept as JSON gave it (the Java
      sample's TINYINT `"aa"` stays the string "aa").
    """
    flags = FLAG_HANDLE_KEY if column.get("h") is True else 0
    if code not in _KNOWN_TYPES:
        raise DecodeError(f"unknown column type code {code!r}")
    if type(value) is str and code in _STRING_TYPES:
        value = _old_format_string(value)
    elif type(value) is str and code in _BLOB_TYPES:
        try:
            value = _text_if_utf8(_strict_base64(value))
        except ValueError as exc:
            raise DecodeError(f"pre-v4.0.5 TEXT/BLOB value is not base64: {exc}") from exc
    elif code == TYPE_FLOAT and type(value) in (int, float):
        value = mysql.float32(value)
    elif code == TYPE_DOUBLE and type(value) in (int, float):
        value = float(value)
    if type(value) is bytes:
        flags |= FLAG_BINARY
    return Column(code, flags, value)


def _old_format_string(value: str) -> str | bytes:
    try:
        text = _strict_base64(value).decode()
    except ValueError:  # not base64 (binascii.Error), or not UTF-8 (UnicodeDecodeError)
        return _text_if_utf8(go_unquote(value))
    return text


def _text_if_utf8(raw: bytes) -> str | bytes:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


# How each known type code's JSON value is decoded, for the extension (its `value_kind` table);
# derived from the sets decode_value uses, so the two cannot drift apart.
_VALUE_KINDS = (
    {code: 1 for code in _INTEGER_TYPES}
    | {code: 2 for code in _TEXT_VALUE_TYPES}
    | {code: 3 for code in _STRING_TYPES}
    | {code: 4 for code in _BLOB_TYPES}
    | {TYPE_FLOAT: 5, TYPE_DOUBLE: 6, TYPE_NULL: 7}
)


def _load_speedups():
    """The compiled fast path, configured with the event model, or None when it is not built
    (or the run is pure: ``engines.pure``)."""
    module = native("ticdc_lake.protocols.native._open_speedups")
    return None if module is None else configure_speedups(module)


def configure_speedups(module):
    """Hand the event classes and reference functions to the extension; None if it refuses."""
    try:
        module.configure(
            Column,
            RowEvent,
            ResolvedEvent,
            _loads,
            decode_image,
            decode_value,
            INSERT,
            UPDATE,
            DELETE,
            _VALUE_KINDS,
        )
    except (TypeError, ValueError) as exc:
        # The event model changed shape under the extension: decoding stays correct in Python.
        warnings.warn(f"open-protocol speedups disabled: {exc}", RuntimeWarning, stacklevel=2)
        return None
    _silver_speedups = native("ticdc_lake.silver._silver_speedups")
    if _silver_speedups is None:  # silver's buffers are not built: decode_into declines all
        return module
    try:
        module.configure_sink(_silver_speedups.sink)
    except (AttributeError, TypeError, ValueError) as exc:
        warnings.warn(f"open-protocol rows not written into silver's buffers: {exc}",
                      RuntimeWarning, stacklevel=2)  # fmt: skip
    return module


SPEEDUPS = _load_speedups()


# ----------------------------------------------------------------------------------------------
# Encoder
# ----------------------------------------------------------------------------------------------


class OpenProtocolEncoder(Encoder):
    """Events of one partition → Kafka messages, batched and sized as TiCDC (tiflow) does.

    Row events are batched up to `settings.max_batch_size` per message, and a message is closed
    before it would pass `max_message_bytes`; DDL and resolved events get a message each. Key
    fields come in tiflow's order (ts, scm, tbl, ptn, t, ohk, ccl), columns sorted by name,
    strings escaped as Go's encoding/json does. `rid` is never written: the event model has no
    row id.
    """

    protocol = "open-protocol"

    def __init__(self, settings=None):
        super().__init__(settings)
        option = self.settings.option
        self.max_message_bytes = int(option("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES))
        self.output_old_value = bool(option("output_old_value", True))
        self.only_output_updated_columns = bool(option("only_output_updated_columns", False))
        self.delete_only_handle_key = bool(option("delete_only_output_handle_key_columns", False))
        self.large_message = option("large_message_handle_option", "none")
        if self.large_message not in LARGE_MESSAGE_OPTIONS:
            raise ConfigError(
                f"large_message_handle_option must be one of {', '.join(LARGE_MESSAGE_OPTIONS)}, "
                f"not {self.large_message!r}"
            )
        if self.large_message == "claim_check" and self.settings.claim_check is None:
            raise ConfigError("large_message_handle_option claim_check needs settings.claim_check")
        if self.settings.max_batch_size < 1:
            raise ConfigError("max_batch_size must be at least 1")

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        messages: list[KafkaMessage] = []
        batch: _Batch | None = None
        for event in events:
            if isinstance(event, RowEvent):
                key, value = self._row_entry(event)
                if batch is None or not batch.fits(key, value):
                    if batch is not None:
                        messages.append(batch.message())
                    batch = _Batch(self.settings.max_batch_size, self.max_message_bytes)
                batch.add(key, value)
                continue
            if batch is not None:
                messages.append(batch.message())
                batch = None
            if isinstance(event, DdlEvent):
                messages.append(self._ddl_message(event))
            elif isinstance(event, ResolvedEvent):
                messages.append(_single_message(_resolved_key(event.ts), b""))
            else:
                raise TypeError(f"not an event: {event!r}")
        if batch is not None:
            messages.append(batch.message())
        return messages

    def _compress(self, value: bytes) -> bytes:
        return compress(self.settings.compression, value)

    def _ddl_message(self, event: DdlEvent) -> KafkaMessage:
        key = {"ts": _known_ts(event)}
        if event.schema:
            key["scm"] = event.schema
        if event.table:
            key["tbl"] = event.table
        key["t"] = EVENT_DDL
        # Go writes ActionType as a plain int, ActionNone (0) when unset.
        value = {"q": event.query, "t": event.ddl_type or 0}
        return _single_message(go_json(key), self._compress(go_json(value)))

    def _row_entry(self, event: RowEvent) -> tuple[bytes, bytes]:
        """(key JSON, compressed value JSON) of one row, applying large-message handling."""
        key, value = self._row_json(event, event.handle_key_only)
        if _single_event_length(key, value) <= self.max_message_bytes:
            return key, value
        if self.large_message == "none":
            raise ConfigError(
                f"row of {event.schema}.{event.table} at ts {event.commit_ts} needs "
                f"{_single_event_length(key, value)} bytes, above max_message_bytes "
                f"{self.max_message_bytes}, and large_message_handle_option is none"
            )
        if self.large_message == "claim_check":
            location = self.settings.claim_check.store(_frame_key([key]), _frame_value([value]))
            key, value = self._row_json(event, True, claim_check_location=location)
        else:
            key, value = self._row_json(event, True)
        if _single_event_length(key, value) > self.max_message_bytes:
            raise ConfigError(
                f"row of {event.schema}.{event.table} at ts {event.commit_ts} is still "
                f"{_single_event_length(key, value)} bytes with only its handle-key columns, "
                f"above max_message_bytes {self.max_message_bytes}"
            )
        return key, value

    def _row_json(
        self, event: RowEvent, handle_key_only: bool, claim_check_location: str | None = None
    ) -> tuple[bytes, bytes]:
        key: dict[str, Any] = {"ts": _known_ts(event)}
        if event.schema:
            key["scm"] = event.schema
        if event.table:
            key["tbl"] = event.table
        if event.partition_id is not None:
            key["ptn"] = event.partition_id
        key["t"] = EVENT_ROW
        if claim_check_location is not None:
            key["ccl"] = claim_check_location  # tiflow leaves ohk out of claim-check keys
        elif handle_key_only:
            key["ohk"] = True
        return go_json(key), self._compress(go_json(self._row_value(event, handle_key_only)))

    def _row_value(self, event: RowEvent, handle_key_only: bool) -> dict[str, Any]:
        """`{"u"}`, `{"u","p"}` or `{"d"}`; Go's omitempty drops an empty image entirely."""
        where = f"{event.op} of {event.schema}.{event.table} at ts {event.commit_ts}"
        if event.op == DELETE:
            key_only = handle_key_only or self.delete_only_handle_key
            deleted = encode_image(_required(event.old_columns, where), key_only)
            if key_only and not deleted:
                raise ValueError(f"{where} has no handle-key column to send")
            return {"d": deleted} if deleted else {}
        new = encode_image(_required(event.columns, where), handle_key_only)
        if handle_key_only and not new:
            raise ValueError(f"{where} has no handle-key column to send")
        value: dict[str, Any] = {"u": new} if new else {}
        if event.op == UPDATE and self.output_old_value and event.old_columns is not None:
            old_image = event.old_columns
            if self.only_output_updated_columns:
                old_image = _changed_only(old_image, event.columns)
            old = encode_image(old_image, handle_key_only)
            if old:
                value["p"] = old
        elif event.op not in (INSERT, UPDATE):
            raise ValueError(f"unknown row op {event.op!r}")
        return value


class _Batch:
    """One message being filled with row entries (tiflow's size rule: key + value + overhead)."""

    __slots__ = ("count", "key", "limit", "max_count", "value")

    def __init__(self, max_count: int, limit: int):
        self.key = bytearray(_U64.pack(BATCH_VERSION))
        self.value = bytearray()
        self.count = 0
        self.max_count = max_count
        self.limit = limit

    def fits(self, key: bytes, value: bytes) -> bool:
        if self.count >= self.max_count:
            return False
        length = len(self.key) + len(self.value) + KAFKA_RECORD_OVERHEAD
        return length + len(key) + len(value) + 16 <= self.limit

    def add(self, key: bytes, value: bytes) -> None:
        self.key += _U64.pack(len(key))
        self.key += key
        self.value += _U64.pack(len(value))
        self.value += value
        self.count += 1

    def message(self) -> KafkaMessage:
        return KafkaMessage(bytes(self.key), bytes(self.value))


def _known_ts(event: RowEvent | DdlEvent) -> int:
    """The key's `ts`: the Open Protocol has no way to say "unknown"."""
    if event.commit_ts is None:
        raise ValueError(
            f"{event.kind} event of {event.schema}.{event.table} has no commit TS; the Open "
            "Protocol cannot carry it"
        )
    return event.commit_ts


def _single_event_length(key: bytes, value: bytes) -> int:
    """What TiCDC compares with max-message-bytes for one event alone."""
    return len(key) + len(value) + KAFKA_RECORD_OVERHEAD + 16 + 8


def _frame_key(keys: Sequence[bytes]) -> bytes:
    return _U64.pack(BATCH_VERSION) + b"".join(_U64.pack(len(key)) + key for key in keys)


def _frame_value(values: Sequence[bytes]) -> bytes:
    return b"".join(_U64.pack(len(value)) + value for value in values)


def _single_message(key: bytes, value: bytes) -> KafkaMessage:
    return KafkaMessage(_frame_key([key]), _frame_value([value]))


def _resolved_key(ts: int) -> bytes:
    return go_json({"ts": ts, "t": EVENT_RESOLVED})


def _required(image: dict[str, Column] | None, where: str) -> dict[str, Column]:
    if image is None:
        raise ValueError(f"{where} has no row image to encode")
    return image


def _changed_only(old: dict[str, Column], new: dict[str, Column]) -> dict[str, Column]:
    """Old columns whose type or value differs from the new image (only-output-updated-columns)."""
    return {
        name: column
        for name, column in old.items()
        if name not in new
        or new[name].type_code != column.type_code
        or new[name].value != column.value
    }


def encode_image(image: dict[str, Column], handle_key_only: bool) -> dict[str, dict]:
    """Column name → `{"t", "h"?, "f", "v"}`, sorted by name as Go marshals a map."""
    out = {}
    for name in sorted(image):
        column = image[name]
        flags = column.flags
        if handle_key_only and not flags & FLAG_HANDLE_KEY:
            continue
        document: dict[str, Any] = {"t": column.type_code}
        if flags & FLAG_HANDLE_KEY:
            document["h"] = True
        document["f"] = flags
        document["v"] = encode_value(column.type_code, flags, column.value)
        out[name] = document
    return out


def encode_value(code: int, flags: int, value: Any) -> Any:
    """The JSON form of one value (PROTOCOLS.md §2.4); floats as pre-rendered Go numbers."""
    if value is None:
        return None
    if code in _STRING_TYPES:
        if flags & FLAG_BINARY:
            return go_quote(value if isinstance(value, bytes) else str(value).encode())
        return value.decode() if isinstance(value, bytes) else value
    if code in _BLOB_TYPES:
        raw = value if isinstance(value, bytes) else str(value).encode()
        return base64.b64encode(raw).decode("ascii")
    if code == TYPE_FLOAT:
        return orjson.Fragment(go_float32_text(value))
    if code == TYPE_DOUBLE:
        return orjson.Fragment(go_float64_text(value))
    return value


# Go's encoding/json escapes these inside strings; orjson writes them raw. They can only occur
# inside JSON strings, so replacing them in the serialised bytes is safe.
_GO_JSON_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def go_json(document: Any) -> bytes:
    """JSON bytes as Go's encoding/json writes them (field order as given, HTML-safe escapes)."""
    data = orjson.dumps(document)
    for raw, escaped in _GO_JSON_ESCAPES:
        if raw in data:
            data = data.replace(raw, escaped)
    return data


def go_float64_text(value: float) -> bytes:
    """A float64 as Go's encoding/json prints it: shortest digits, exponent only below 1e-6 or
    from 1e21 (`1e+21`, `1e-7`), no trailing `.0`."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"DOUBLE value {value} is not finite; TiDB cannot store it")
    if value == 0:
        return b"-0" if math.copysign(1.0, value) < 0 else b"0"
    digits, exponent = _digits(Decimal(repr(value)))
    magnitude = abs(value)
    exponent_form = magnitude < 1e-6 or magnitude >= 1e21
    return _render_go_float(value < 0, digits, exponent, exponent_form)


_FLOAT32_BITS = struct.Struct("<f")
_UINT32 = struct.Struct("<I")
_F32_SMALL = mysql.float32(1e-6)
_F32_LARGE = mysql.float32(1e21)


def go_float32_text(value: float) -> bytes:
    """A FLOAT (float32) as Go's encoding/json prints it: the shortest digits that read back as
    the same float32, exponent form below float32(1e-6) or from float32(1e21)."""
    value = mysql.float32(float(value))
    if not math.isfinite(value):
        raise ValueError(f"FLOAT value {value} is not finite; TiDB cannot store it")
    if value == 0:
        return b"-0" if math.copysign(1.0, value) < 0 else b"0"
    magnitude = abs(value)
    digits, exponent = _shortest_float32_digits(magnitude)
    exponent_form = magnitude < _F32_SMALL or magnitude >= _F32_LARGE
    return _render_go_float(value < 0, digits, exponent, exponent_form)


def _shortest_float32_digits(magnitude: float) -> tuple[str, int]:
    """(digits, exponent) with digits × 10**exponent the shortest decimal that rounds to this
    positive float32 (ties to even at the interval ends), the closest one if several qualify."""
    bits = _UINT32.unpack(_FLOAT32_BITS.pack(magnitude))[0]
    exact = Decimal(magnitude)
    below = Decimal(_float32_from_bits(bits - 1)) if bits > 1 else Decimal(0)
    above_bits = bits + 1
    with localcontext() as context:
        context.prec = 400
        if above_bits >= 0x7F800000:  # next is infinity: the interval is as wide as below
            above = exact + (exact - below)
        else:
            above = Decimal(_float32_from_bits(above_bits))
        low, high = (below + exact) / 2, (exact + above) / 2
        inclusive = bits % 2 == 0
        for precision in range(1, 10):
            step = Decimal(1).scaleb(exact.adjusted() - precision + 1)
            down = (exact / step).to_integral_value(rounding=ROUND_FLOOR) * step
            candidates = [
                candidate
                for candidate in (down, down + step)
                if low <= candidate <= high
                and (inclusive or (candidate != low and candidate != high))
            ]
            if candidates:
                best = min(candidates, key=lambda candidate: abs(candidate - exact))
                return _digits(best)
    return _digits(exact)  # unreachable: 9 digits always identify a float32


def _float32_from_bits(bits: int) -> float:
    return _FLOAT32_BITS.unpack(_UINT32.pack(bits))[0]


def _digits(number: Decimal) -> tuple[str, int]:
    """(significant digits without trailing zeros, exponent) of a positive decimal."""
    _, digit_tuple, exponent = number.as_tuple()
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    return stripped, exponent + len(digits) - len(stripped)


def _render_go_float(negative: bool, digits: str, exponent: int, exponent_form: bool) -> bytes:
    """digits × 10**exponent in Go's 'f' or 'e' (with `e-07` cleaned to `e-7`) format."""
    sign = "-" if negative else ""
    if exponent_form:
        scientific = exponent + len(digits) - 1
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        tail = f"e-{-scientific}" if scientific < 0 else f"e+{scientific:02d}"
        return f"{sign}{mantissa}{tail}".encode()
    if exponent >= 0:
        return f"{sign}{digits}{'0' * exponent}".encode()
    point = len(digits) + exponent
    if point > 0:
        return f"{sign}{digits[:point]}.{digits[point:]}".encode()
    return f"{sign}0.{'0' * -point}{digits}".encode()


__all__ = [
    "OpenProtocolDecoder",
    "OpenProtocolEncoder",
    "go_float32_text",
    "go_float64_text",
    "go_json",
]
