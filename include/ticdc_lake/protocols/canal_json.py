"""Canal-JSON (`protocol=canal-json`), PROTOCOLS.md §4, with the TiDB extension `_tidb`.

One JSON object per Kafka message, key null, the whole value possibly compressed (§1.6):

* DML: `type` INSERT/UPDATE/DELETE, `data` a one-element array holding the row as column →
  string (or null); `old` the pre-update row on UPDATE (all columns, or only the changed ones with
  `only-output-updated-columns`/`content-compatible`). A DELETE carries its row in `data`.
  Decoded, an UPDATE's old image is always the whole row: a column `old` leaves out did not
  change, so it takes its value from `data`.
* DDL: `isDdl: true`, a Canal type (CREATE, ALTER, ERASE, RENAME, CINDEX, DINDEX, TRUNCATE,
  QUERY) and the query in `sql`.
* `TIDB_WATERMARK` (extension only): a resolved TS in `_tidb.watermarkTs`.

Every value is text. `mysqlType` says how to read it, in the bare form (`int unsigned`,
`varbinary`) or, with `content-compatible`, the full one (`int(10) unsigned`, `enum('a','b')`).
Binary columns carry each byte as the code point of the same number (ISO-8859-1). The commit TS is
`_tidb.commitTs`; `es` is only its physical part, so without the extension there is none.

The decoder reads `_tidb` whenever a message has it, whatever `enable_tidb_extension` says, and
ignores the Kafka key (TiCDC sends none).

`CanalJsonDecoder` is the pure-Python reference. When the compiled `native._canal_speedups`
extension is built, row messages of a table already seen take a shortcut through it (orjson's
parse → RowEvent in C); it returns exactly the reference's event or hands the message back to the
reference path, which alone raises errors (so both give the same events and the same DecodeError
reasons).

Options (`CodecSettings.options`):
  content_compatible     mysqlType is the full type even where it has no parentheses
  claim_check_raw_value  claim-check objects hold the raw message, not a {key, value} document
Encoder options:
  content_compatible           full types in mysqlType; implies only_output_updated_columns
  only_output_updated_columns  an UPDATE's `old` keeps only the columns that changed
  build_time_ms                the `ts` field (default: the commit's physical time, reproducible)
  large_message_handle         none | handle-key-only | claim-check, for values larger than
  max_message_bytes            this many bytes (needs the TiDB extension, as in TiCDC)
"""

from __future__ import annotations

import math
import re
import struct
import warnings
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import orjson

from ticdc_lake.compression import compress, decompress
from ticdc_lake.engines import native
from ticdc_lake.errors import ConfigError, DecodeError
from ticdc_lake.protocols.base import CodecSettings, Decoder, Encoder, KafkaMessage
from ticdc_lake.records import KafkaRecord
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import (
    DELETE,
    INSERT,
    UPDATE,
    Column,
    DdlEvent,
    Event,
    Image,
    ResolvedEvent,
    RowEvent,
)

WATERMARK = "TIDB_WATERMARK"
_ROW_OPS = {"INSERT": INSERT, "UPDATE": UPDATE, "DELETE": DELETE}
_ROW_TYPES = {op: name for name, op in _ROW_OPS.items()}
_KEY_FLAGS = mysql.FLAG_PRIMARY_KEY | mysql.FLAG_HANDLE_KEY
_UINT64_MAX = mysql.UINT64_MAX
_LARGE_MESSAGE_HANDLES = ("none", "handle-key-only", "claim-check")

# ---------------------------------------------------------------------------------------------
# DDL: Canal event types and TiDB action types
# ---------------------------------------------------------------------------------------------

# tiflow `convertDdlEventType`: the Canal type TiCDC writes for each action type (default QUERY).
_CANAL_DDL_TYPE_OF_ACTION = {
    3: "CREATE",
    14: "RENAME",
    47: "RENAME",
    **dict.fromkeys((7, 9, 32), "CINDEX"),
    **dict.fromkeys((8, 10, 33), "DINDEX"),
    **dict.fromkeys(
        (5, 6, 12, 13, 15, 17, 18, 19, 20, 22, 23, 37, 38, 41, 61, 64, 71, 72), "ALTER"
    ),
    4: "ERASE",
    11: "TRUNCATE",
}
CANAL_DDL_TYPES = frozenset(("QUERY", *_CANAL_DDL_TYPE_OF_ACTION.values()))
# Only these Canal types name one action type; RENAME, CINDEX, DINDEX, ALTER and QUERY each stand
# for several, so the decoder leaves ddl_type None for them (the query says what happened).
_ACTION_OF_CANAL_DDL_TYPE = {
    "CREATE": mysql.ACTION_CREATE_TABLE,
    "ERASE": mysql.ACTION_DROP_TABLE,
    "TRUNCATE": mysql.ACTION_TRUNCATE_TABLE,
}
# Within QUERY, database DDL is recognisable by its first words (as tiflow's decoder does).
_SCHEMA_DDL_PREFIXES = (
    ("create database", mysql.ACTION_CREATE_SCHEMA),
    ("create schema", mysql.ACTION_CREATE_SCHEMA),
    ("drop database", mysql.ACTION_DROP_SCHEMA),
    ("drop schema", mysql.ACTION_DROP_SCHEMA),
)


def canal_ddl_type(action_type: int | None) -> str:
    """The Canal `type` TiCDC writes for a TiDB action type (unknown or None: QUERY)."""
    return _CANAL_DDL_TYPE_OF_ACTION.get(action_type, "QUERY")


def action_type_of(canal_type: str, query: str) -> int | None:
    """The TiDB action type a Canal DDL type stands for, when it stands for exactly one."""
    action = _ACTION_OF_CANAL_DDL_TYPE.get(canal_type)
    if action is None and canal_type == "QUERY":
        words = " ".join(query.lower().split()[:2])
        for prefix, schema_action in _SCHEMA_DDL_PREFIXES:
            if words == prefix:
                return schema_action
    return action


# ---------------------------------------------------------------------------------------------
# mysqlType → type code, flags and value converter
# ---------------------------------------------------------------------------------------------

# TiDB `types.StrToType`, with the binary-charset spellings (`blob`, `binary`) listed directly.
_TYPE_CODES = {
    "tinyint": mysql.TYPE_TINY,
    "smallint": mysql.TYPE_SHORT,
    "mediumint": mysql.TYPE_INT24,
    "int": mysql.TYPE_LONG,
    "bigint": mysql.TYPE_LONGLONG,
    "float": mysql.TYPE_FLOAT,
    "double": mysql.TYPE_DOUBLE,
    "decimal": mysql.TYPE_NEWDECIMAL,
    "timestamp": mysql.TYPE_TIMESTAMP,
    "date": mysql.TYPE_DATE,
    "time": mysql.TYPE_DURATION,
    "datetime": mysql.TYPE_DATETIME,
    "year": mysql.TYPE_YEAR,
    "bit": mysql.TYPE_BIT,
    "json": mysql.TYPE_JSON,
    "enum": mysql.TYPE_ENUM,
    "set": mysql.TYPE_SET,
    "vector": mysql.TYPE_VECTOR_FLOAT32,
    "char": mysql.TYPE_STRING,
    "varchar": mysql.TYPE_VARCHAR,
    "var_string": mysql.TYPE_VAR_STRING,
    "tinytext": mysql.TYPE_TINY_BLOB,
    "text": mysql.TYPE_BLOB,
    "mediumtext": mysql.TYPE_MEDIUM_BLOB,
    "longtext": mysql.TYPE_LONG_BLOB,
    "binary": mysql.TYPE_STRING,
    "varbinary": mysql.TYPE_VARCHAR,
    "tinyblob": mysql.TYPE_TINY_BLOB,
    "blob": mysql.TYPE_BLOB,
    "mediumblob": mysql.TYPE_MEDIUM_BLOB,
    "longblob": mysql.TYPE_LONG_BLOB,
}
_BINARY_STRING_BASES = frozenset(
    ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
)
# Columns whose charset is not `binary`: TiDB gives every other column (numbers, temporal types,
# BIT, YEAR, JSON, binary strings) the binary flag (§1.3); VECTOR is left out as unverified.
_TEXT_BASES = frozenset(
    (
        "char",
        "varchar",
        "var_string",
        "tinytext",
        "text",
        "mediumtext",
        "longtext",
        "enum",
        "set",
        "vector",
    )
)
# TiDB marks YEAR and BIT unsigned, but never prints " unsigned" after them.
_ALWAYS_UNSIGNED = frozenset(("year", "bit"))
# Types whose bare mysqlType is also their full type: nothing in parentheses can follow them.
_PARAMETERLESS_BASES = frozenset(
    (
        "date",
        "json",
        "tinytext",
        "text",
        "mediumtext",
        "longtext",
        "tinyblob",
        "blob",
        "mediumblob",
        "longblob",
    )
)
_INTEGER_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}


def _integer_converter(low: int, high: int) -> Callable[[str], int]:
    """Reads decimal integer text (Go `strconv.FormatInt`/`FormatUint`) within [low, high].

    Python's int() also accepts surrounding spaces and `_` separators, which TiCDC never writes;
    rejecting them would cost a second pass over every integer.
    """

    def integer(text: str) -> int:
        value = int(text)
        if low <= value <= high and text.isascii():
            return value
        raise ValueError(f"expected an integer in [{low}, {high}]")

    integer.bounds = (low, high)  # what the compiled decoder checks digits against
    return integer


_UNSIGNED_64 = _integer_converter(0, _UINT64_MAX)


_FLOAT32 = struct.Struct("<f")
_pack_float32, _unpack_float32 = _FLOAT32.pack, _FLOAT32.unpack


def _float32_value(text: str) -> float:
    """FLOAT: decimal text at float32 precision, rounded to the nearest float32 (as
    mysql.float32 does, inlined: FLOAT columns are common)."""
    return _unpack_float32(_pack_float32(float(text)))[0]


def _decimal_text(text: str) -> str:
    """DECIMAL: exact text `[-]digits[.digits]`, kept as sent."""
    digits = text[1:] if text[:1] == "-" else text
    whole, point, fraction = digits.partition(".")
    if whole.isdigit() and text.isascii() and (not point or fraction.isdigit()):
        return text
    raise ValueError("expected decimal text [-]digits[.digits]")


def _latin1_bytes(text: str) -> bytes:
    """Binary strings: every character U+0000–U+00FF is the byte of the same number."""
    return text.encode("latin-1")


def _converter(base: str, unsigned: bool) -> Callable[[str], Any] | None:
    """How the text of a `base` column becomes an event-model value (None: keep the text)."""
    if base in _INTEGER_BITS:
        bits = _INTEGER_BITS[base]
        if unsigned:
            return _integer_converter(0, (1 << bits) - 1)
        return _integer_converter(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if base in ("enum", "set", "bit"):
        return _UNSIGNED_64
    if base == "year":
        return _integer_converter(0, 2155)
    if base == "float":
        return _float32_value
    if base == "double":
        return float
    if base == "decimal":
        return _decimal_text
    if base in _BINARY_STRING_BASES:
        return _latin1_bytes
    return None  # text, JSON, VECTOR and the temporal types are kept as sent


# (converter, type code, flags, full mysql type or None) for one column.
ColumnSpec = tuple[Callable[[str], Any] | None, int, int, str | None]


def column_spec(mysql_type: str, *, content_compatible: bool = False) -> ColumnSpec:
    """Type code, type-implied flags and value converter of a `mysqlType` string.

    Accepts the bare form (`int unsigned`, `varbinary`) and the full form (`int(10) unsigned`,
    `enum('a','b')`). The text becomes Column.mysql_type when it is the full type: always with
    `content_compatible`, otherwise only when it has parentheses or its type takes none.
    Raises ValueError for text that is not a known TiDB type.
    """
    if mysql_type.strip().lower() == "var_string":  # the one type name with an underscore
        base, unsigned, parenthesised = "var_string", False, False
    else:
        parsed = mysql.parse_column_type(mysql_type)
        base, unsigned, parenthesised = parsed.base, parsed.unsigned, "(" in mysql_type
    if base not in _TYPE_CODES:
        raise ValueError(f"unknown mysqlType {mysql_type!r}")
    unsigned = unsigned or base in _ALWAYS_UNSIGNED
    flags = (0 if base in _TEXT_BASES else mysql.FLAG_BINARY) | (
        mysql.FLAG_UNSIGNED if unsigned else 0
    )
    full = content_compatible or parenthesised or base in _PARAMETERLESS_BASES
    return _converter(base, unsigned), _TYPE_CODES[base], flags, mysql_type if full else None


# ---------------------------------------------------------------------------------------------
# Decoder
# ---------------------------------------------------------------------------------------------

_TABLE_CACHE_LIMIT = 4096


def _load_speedups():
    """The compiled row decoder, configured with the event model, or None when it is not built
    (or the run is pure: ``engines.pure``)."""
    module = native("ticdc_lake.protocols.native._canal_speedups")
    return None if module is None else configure_speedups(module)


def configure_speedups(module):
    """Hand the event classes to a compiled decoder module; None if it cannot build them."""
    try:
        module.configure(Column, RowEvent, INSERT, UPDATE, DELETE, orjson.loads)
    except (TypeError, ValueError) as exc:
        # The event model changed shape under the extension: decoding stays correct in Python.
        warnings.warn(f"canal-json speedups disabled: {exc}", RuntimeWarning, stacklevel=2)
        return None
    return module


SPEEDUPS = _load_speedups()
_DEFAULT = object()


def _table_plan(module, mysql_types: dict, specs: dict[str, ColumnSpec]) -> Any:
    """The compiled decoder's view of a table's column specs (None: it leaves the table to the
    reference path). Each converter is named by kind, so the common value forms are converted in
    C; any other converter is called as it is."""
    plans = {}
    try:
        for name, (convert, type_code, flags, full_type) in specs.items():
            low = high = 0
            if convert is None:
                kind = module.KIND_TEXT
            elif convert is float:
                kind = module.KIND_DOUBLE
            elif convert is _float32_value:
                kind = module.KIND_FLOAT32
            elif convert is _decimal_text:
                kind = module.KIND_DECIMAL
            elif convert is _latin1_bytes:
                kind = module.KIND_LATIN1
            elif getattr(convert, "bounds", None) is not None and convert.bounds[0] <= 0:
                kind = module.KIND_INTEGER
                low, high = convert.bounds
            else:
                kind = module.KIND_CALL
            plans[name] = module.column_plan(kind, type_code, flags, full_type, convert, low, high)
        return module.table_plan(mysql_types, plans)
    except (TypeError, ValueError):  # not a plain dict of str (never from orjson)
        return None


class _ColumnSpecs:
    """The column specs of each table, built from its mysqlType and pkNames once and reused by
    every row that repeats them."""

    def __init__(self, content_compatible: bool, speedups: Any):
        self._content_compatible = content_compatible
        self._speedups = speedups
        self._by_type: dict[str, ColumnSpec] = {}
        # (database, table) → (mysqlType, pkNames, column specs, compiled TablePlan or None) as
        # last seen: a row whose mysqlType and pkNames equal the cached ones reuses the specs
        # without a lookup per type. The compiled decoder reads this cache and never writes it.
        self.by_table: dict[
            tuple[str, str], tuple[dict, list | None, dict[str, ColumnSpec], Any]
        ] = {}

    def of_table(
        self, schema: str, table: str, mysql_types: Any, pk_names: Any
    ) -> dict[str, ColumnSpec]:
        key = (schema, table)
        cached = self.by_table.get(key)
        if cached is not None and cached[0] == mysql_types and cached[1] == pk_names:
            return cached[2]
        specs = self._build(mysql_types, pk_names)
        if len(self.by_table) >= _TABLE_CACHE_LIMIT:
            self.by_table.clear()
        plan = None if self._speedups is None else _table_plan(self._speedups, mysql_types, specs)
        self.by_table[key] = (mysql_types, pk_names, specs, plan)
        return specs

    def _build(self, mysql_types: Any, pk_names: Any) -> dict[str, ColumnSpec]:
        if type(mysql_types) is not dict:
            raise DecodeError(
                f"mysqlType must be an object of column → type, not {mysql_types!r:.200}"
            )
        if pk_names is None:
            pk_names = ()
        elif type(pk_names) is not list or any(type(name) is not str for name in pk_names):
            raise DecodeError(f"pkNames must be a list of column names, not {pk_names!r:.200}")
        keys = set(pk_names)  # a list's `in` per column is quadratic in a hostile wide row
        specs = {}
        for name, type_text in mysql_types.items():
            convert, type_code, flags, full = self._spec(name, type_text)
            if name in keys:
                flags |= _KEY_FLAGS
            specs[name] = (convert, type_code, flags, full)
        return specs

    def _spec(self, name: str, type_text: Any) -> ColumnSpec:
        spec = self._by_type.get(type_text) if type(type_text) is str else None
        if spec is None:
            if type(type_text) is not str:
                raise DecodeError(f"mysqlType of column {name!r} is {type_text!r}, not a string")
            try:
                spec = column_spec(type_text, content_compatible=self._content_compatible)
            except ValueError as exc:
                raise DecodeError(f"column {name!r}: {exc}") from None
            if len(self._by_type) >= _TABLE_CACHE_LIMIT:
                self._by_type.clear()
            self._by_type[type_text] = spec
        return spec


class CanalJsonDecoder(Decoder):
    """Canal-JSON → events; one event per message.

    `speedups=None` forces the pure-Python reference decoder (default: the compiled extension
    when it is built).
    """

    protocol = "canal-json"

    def __init__(self, settings: CodecSettings | None = None, *, speedups: Any = _DEFAULT):
        super().__init__(settings)
        self._raw_claim_check = bool(self.settings.option("claim_check_raw_value", False))
        self.speedups = SPEEDUPS if speedups is _DEFAULT else speedups
        self._column_specs = _ColumnSpecs(
            bool(self.settings.option("content_compatible", False)), self.speedups
        )
        self._tables = self._column_specs.by_table  # the compiled decoder's view of the cache
        self._fast_row_event = None if self.speedups is None else self.speedups.row_event
        self._uncompressed = self.settings.compression == "none"

    def _decode_fast(self, record: KafkaRecord) -> list[Event] | None:
        fast = self._fast_row_event
        if fast is None or not self._uncompressed:
            return None
        # The compiled shortcut parses the value itself; None means "not a row message of a
        # table seen before, or malformed": the reference path decides, and raises. It parses
        # the value again, which only DDL, watermarks, a table's first row and bad messages pay
        # for, and so does a row with a value that does not fit its type, or one on which a
        # Python function the shortcut calls raised.
        return fast(record.value, self._tables, record.topic, record.partition, record.offset)

    def _tables_named(self, record: KafkaRecord) -> frozenset[tuple[str, str]] | None:
        """``database`` and ``table`` of the message (none for a watermark)."""
        raw = decompress(self.settings.compression, record.value or b"", self.settings.limits)
        message = _load_message(raw)
        if message.get("type") == WATERMARK:
            return frozenset()
        return frozenset([(str(message["database"]), str(message["table"]))])

    def _decode(self, record: KafkaRecord) -> list[Event]:
        if not record.value:
            raise DecodeError("a canal-json message needs a value; this record has none")
        message = _load_message(
            decompress(self.settings.compression, record.value, self.settings.limits)
        )
        if self._fast_row_event is not None and not self._uncompressed:  # decompressed here
            events = self._fast_row_event(
                message, self._tables, record.topic, record.partition, record.offset
            )
            if events is not None:
                return events
        location = _claim_check_location(message)
        if location is not None:
            message = self._fetch_claim_check(location)
        return [self._event(message, record)]

    def _event(self, message: dict, record: KafkaRecord) -> Event:
        canal_type = message.get("type")
        if type(canal_type) is not str:
            raise DecodeError(f"type must be a string, not {canal_type!r:.100}")
        is_ddl = message.get("isDdl", False)
        if is_ddl is True:
            return _ddl_event(message, canal_type, record)
        if is_ddl is not False:
            raise DecodeError(f"isDdl must be true or false, not {is_ddl!r}")
        op = _ROW_OPS.get(canal_type)
        if op is not None:
            return self._row_event(message, op, record)
        if canal_type == WATERMARK:
            return _resolved_event(message, record)
        raise DecodeError(
            f"unknown canal-json type {canal_type!r}: expected INSERT, UPDATE, DELETE, "
            f"{WATERMARK} or a DDL message (isDdl true)"
        )

    def _row_event(self, message: dict, op: str, record: KafkaRecord) -> RowEvent:
        schema, table = _names(message)
        mysql_types = message.get("mysqlType")
        specs = self._column_specs.of_table(schema, table, mysql_types, message.get("pkNames"))
        row = _single_row(message.get("data"), "data")
        image = _image(row, specs, mysql_types)
        old_image = None
        if op == UPDATE:
            old = message.get("old")
            if old is not None:
                old_image = _complete_old_image(
                    _image(_single_row(old, "old"), specs, mysql_types), image
                )
        elif message.get("old") is not None and op == INSERT:
            raise DecodeError("an INSERT message carries an `old` row")
        extension = message.get("_tidb")
        commit_ts = _extension_ts(extension, "commitTs", "commit-ts")
        return RowEvent(
            commit_ts=commit_ts,
            schema=schema,
            table=table,
            op=op,
            columns=None if op == DELETE else image,
            old_columns=image if op == DELETE else old_image,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            handle_key_only=extension is not None and extension.get("onlyHandleKey") is True,
        )

    def _fetch_claim_check(self, location: str) -> dict:
        """The original message behind a claim-check reference (§1.7), read and parsed."""
        store = self.settings.claim_check
        if store is None:
            raise DecodeError(
                f"message refers to claim-check object {location!r} but no claim-check storage "
                "roots are configured"
            )
        if self._raw_claim_check:
            value = store.read(location)
        else:
            _, value = store.fetch(location)
        message = _load_message(decompress(self.settings.compression, value, self.settings.limits))
        if _claim_check_location(message) is not None:
            raise DecodeError(f"claim-check object {location!r} refers to another claim-check")
        return message


def _load_message(value: bytes) -> dict:
    """Parse the JSON object of one message."""
    try:
        message = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"value is not JSON: {exc}", byte_offset=exc.pos) from None
    if type(message) is not dict:
        raise DecodeError(f"value is JSON {type(message).__name__}, not an object")
    return message


def _claim_check_location(message: dict) -> str | None:
    extension = message.get("_tidb")
    if type(extension) is not dict:
        return None
    location = extension.get("claimCheckLocation")
    if location is None:
        return None
    if type(location) is not str or not location:
        raise DecodeError(f"_tidb.claimCheckLocation must be a URI, not {location!r}")
    return location


def _names(message: dict) -> tuple[str, str]:
    schema, table = message.get("database"), message.get("table")
    if type(schema) is not str or type(table) is not str:
        raise DecodeError(f"database and table must be strings, not {schema!r} and {table!r}")
    return schema, table


def _extension_ts(extension: Any, name: str, historical_name: str) -> int | None:
    """A TSO from `_tidb` (camelCase, or the hyphenated spelling of late-2021 dev builds)."""
    if extension is None:
        return None
    if type(extension) is not dict:
        raise DecodeError(f"_tidb must be an object, not {extension!r:.200}")
    ts = extension.get(name)
    if ts is None:
        ts = extension.get(historical_name)
        if ts is None:
            return None
    if type(ts) is not int or not 0 <= ts <= _UINT64_MAX:
        raise DecodeError(f"_tidb.{name} must be an unsigned 64-bit TSO, not {ts!r}")
    return ts


def _single_row(rows: Any, field: str) -> dict:
    """`data`/`old`: a one-element array holding one column → text object."""
    if type(rows) is not list or len(rows) != 1:
        raise DecodeError(f"{field} must be a one-element array of a row, not {rows!r:.200}")
    row = rows[0]
    if type(row) is not dict:
        raise DecodeError(f"{field}[0] must be an object of column → value, not {row!r:.200}")
    return row


def _image(row: dict, specs: dict[str, ColumnSpec], mysql_types: dict) -> Image:
    """Column values converted by their mysqlType; null stays None."""
    image = {}
    name = text = None
    try:
        for name, text in row.items():
            convert, type_code, flags, full_type = specs[name]
            if text is None:
                value = None
            elif text.__class__ is str:
                value = text if convert is None else convert(text)
            else:
                raise DecodeError(f"column {name!r}: value {text!r:.100} is not a string or null")
            image[name] = Column(type_code, flags, value, full_type)
    except KeyError:
        raise DecodeError(f"column {name!r} has no mysqlType entry") from None
    except (ValueError, OverflowError) as exc:
        raise DecodeError(
            f"column {name!r}: {text!r:.100} is not a valid {mysql_types[name]} value ({exc})"
        ) from None
    return image


def _complete_old_image(old: Image, new: Image) -> Image:
    """An UPDATE's old row, whole: columns left out of `old` (only-output-updated-columns)
    did not change, so they take their value from the new row."""
    if len(old) >= len(new):
        return old
    complete = {}
    for name, column in new.items():
        previous = old.get(name)
        complete[name] = (
            previous
            if previous is not None
            else Column(column.type_code, column.flags, column.value, column.mysql_type)
        )
    for name, column in old.items():  # a column only the old row has: keep it, never drop
        complete.setdefault(name, column)
    return complete


def _ddl_event(message: dict, canal_type: Any, record: KafkaRecord) -> DdlEvent:
    if canal_type not in CANAL_DDL_TYPES:
        raise DecodeError(
            f"DDL message (isDdl true) has type {canal_type!r}, not one of "
            f"{', '.join(sorted(CANAL_DDL_TYPES))}"
        )
    schema, table = _names(message)
    query = message.get("sql")
    if type(query) is not str:
        raise DecodeError(f"DDL message has no query text: sql is {query!r:.100}")
    return DdlEvent(
        commit_ts=_extension_ts(message.get("_tidb"), "commitTs", "commit-ts"),
        schema=schema,
        table=table,
        query=query,
        ddl_type=action_type_of(canal_type, query),
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
    )


def _resolved_event(message: dict, record: KafkaRecord) -> ResolvedEvent:
    ts = _extension_ts(message.get("_tidb"), "watermarkTs", "watermark-ts")
    if ts is None:
        raise DecodeError(f"{WATERMARK} message without _tidb.watermarkTs")
    return ResolvedEvent(
        ts=ts, topic=record.topic, partition=record.partition, offset=record.offset
    )


# ---------------------------------------------------------------------------------------------
# Encoder
# ---------------------------------------------------------------------------------------------

# java.sql.Types codes (tiflow `MySQLType2JavaType`); binary strings and BLOBs are 2004.
_JAVA_TYPES = {
    mysql.TYPE_TINY: -6,
    mysql.TYPE_SHORT: 5,
    mysql.TYPE_INT24: 4,
    mysql.TYPE_LONG: 4,
    mysql.TYPE_LONGLONG: -5,
    mysql.TYPE_FLOAT: 7,
    mysql.TYPE_DOUBLE: 8,
    mysql.TYPE_NULL: 0,
    mysql.TYPE_NEWDECIMAL: 3,
    mysql.TYPE_TIMESTAMP: 93,
    mysql.TYPE_DATETIME: 93,
    mysql.TYPE_DATE: 91,
    mysql.TYPE_NEWDATE: 91,
    mysql.TYPE_DURATION: 92,
    mysql.TYPE_YEAR: 12,
    mysql.TYPE_ENUM: 4,
    mysql.TYPE_SET: -7,
    mysql.TYPE_BIT: -7,
    mysql.TYPE_JSON: 12,
    mysql.TYPE_VECTOR_FLOAT32: 12,
    mysql.TYPE_GEOMETRY: -2,
    mysql.TYPE_STRING: 1,
    mysql.TYPE_VARCHAR: 12,
    mysql.TYPE_VAR_STRING: 12,
    **dict.fromkeys(mysql.BLOB_TYPES, 2005),
}
_JAVA_BLOB = 2004
# Unsigned integers above the signed maximum take the next wider Java type (Canal's rule);
# MEDIUMINT is never promoted.
_UNSIGNED_PROMOTION = {
    mysql.TYPE_TINY: (127, 5),
    mysql.TYPE_SHORT: (32767, 4),
    mysql.TYPE_LONG: (2147483647, -5),
    mysql.TYPE_LONGLONG: (9223372036854775807, 3),
}
# TiDB `types.TypeToStr` for a non-binary charset; binary strings swap text→blob, char→binary.
_TYPE_NAMES = {
    **{code: name for name, code in _TYPE_CODES.items() if name not in _BINARY_STRING_BASES},
    mysql.TYPE_NEWDATE: "date",
    mysql.TYPE_NULL: "null",
    mysql.TYPE_GEOMETRY: "geometry",
}


def _type_name(type_code: int, binary: bool) -> str:
    name = _TYPE_NAMES.get(type_code, "varchar")
    if binary:
        if type_code in mysql.BLOB_TYPES:
            return name.replace("text", "blob")
        if type_code in (mysql.TYPE_STRING, mysql.TYPE_VARCHAR):
            return name.replace("char", "binary")
    return name


class _ColumnFormat:
    """How one kind of column is written: mysqlType in both modes, sqlType, value formatting."""

    __slots__ = ("bare", "binary", "full", "java_type", "type_code", "unsigned")

    def __init__(self, type_code: int | None, flags: int, mysql_type: str | None):
        parsed = mysql.parsed_column_type_or_none(mysql_type)
        if type_code is None:
            type_code = (
                _TYPE_CODES.get(parsed.base, mysql.TYPE_VARCHAR) if parsed else mysql.TYPE_VARCHAR
            )
        self.type_code = type_code
        if parsed is not None and parsed.base in _TYPE_CODES:
            self.binary = parsed.base in _BINARY_STRING_BASES
            base, unsigned, zerofill = parsed.base, parsed.unsigned, parsed.zerofill
        else:
            self.binary = mysql.is_binary_string(type_code, flags)
            base, unsigned, zerofill = _type_name(type_code, self.binary), False, False
        unsigned = unsigned or bool(flags & mysql.FLAG_UNSIGNED)
        self.unsigned = unsigned
        bare = base
        if unsigned and base not in _ALWAYS_UNSIGNED:
            bare += " unsigned"
        if zerofill and base != "year":
            bare += " zerofill"
        self.bare = bare
        self.full = mysql_type or bare
        java_type = _JAVA_TYPES.get(type_code, 12)
        self.java_type = _JAVA_BLOB if self.binary else java_type

    def sql_type(self, value: Any) -> int:
        """java.sql.Types code; an unsigned integer is promoted by its value."""
        if self.unsigned and type(value) is int:
            promotion = _UNSIGNED_PROMOTION.get(self.type_code)
            if promotion is not None and value > promotion[0]:
                return promotion[1]
        return self.java_type

    def text(self, value: Any) -> str | None:
        """The canal string of a value (tiflow `formatValue`)."""
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
            # Binary columns map byte n to code point n; easyjson turns invalid UTF-8 of a text
            # column into U+FFFD, so decoding with replacement writes what TiCDC would.
            return raw.decode("latin-1") if self.binary else raw.decode("utf-8", "replace")
        if isinstance(value, str):
            return value.encode("utf-8").decode("latin-1") if self.binary else value
        if isinstance(value, float):
            return go_float_text(value, 32 if self.type_code == mysql.TYPE_FLOAT else 64)
        return str(value)


def go_float_text(value: float, bits: int) -> str:
    """Go `strconv.FormatFloat(v, 'f', -1, bits)`: the shortest digits that read back as the
    same float32/float64, in positional notation (no exponent), `-0` for negative zero."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if bits == 64:
        shortest = repr(value)
        if "e" not in shortest:  # repr is already positional: drop a bare ".0"
            return shortest[:-2] if shortest.endswith(".0") else shortest
    else:
        shortest = _shortest_float32_digits(value)
    return _positional(shortest)


def _positional(text: str) -> str:
    """`[-]d.ddde±x` or `[-]ddd.dd` as Go's 'f' format writes it: no exponent, no trailing
    zeros after the point, no point when nothing follows it."""
    sign = "-" if text[:1] == "-" else ""
    mantissa, _, exponent = text.lstrip("-").lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    point = len(whole) + (int(exponent) if exponent else 0)
    digits = (whole + fraction).lstrip("0")
    point -= len(whole + fraction) - len(digits)  # leading zeros moved the point left
    digits = digits.rstrip("0")
    if not digits:
        return sign + "0"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _shortest_float32_digits(value: float) -> str:
    """Fewest significant digits that parse back to the same float32, nearest to it first.

    Away from powers of two the interval that rounds to a float32 is symmetric, so if the
    nearest p-digit decimal reads back, so does the nearest (p+1)-digit one: a binary search over
    p finds the shortest. At a power of two the interval is lopsided (the gap below is half the
    gap above), so a neighbour of the nearest candidate may read back when the nearest does not.
    """
    target = mysql.float32(value)
    if target == 0 or math.frexp(target)[0] not in (0.5, -0.5):
        low, high = 1, 9  # 9 significant digits always identify a float32
        while low < high:
            middle = (low + high) // 2
            if _reads_back_as(f"{target:.{middle - 1}e}", target):
                high = middle
            else:
                low = middle + 1
        return f"{target:.{high - 1}e}"
    for digits in range(1, 10):
        nearest = f"{target:.{digits - 1}e}"
        if _reads_back_as(nearest, target):
            return nearest
        mantissa, exponent = nearest.split("e")
        step = Decimal(1).scaleb(int(exponent) - (digits - 1))
        for neighbour in (Decimal(mantissa).scaleb(int(exponent)) + s for s in (step, -step)):
            if _reads_back_as(str(neighbour), target):
                return str(neighbour)
    return repr(target)


def _reads_back_as(text: str, target: float) -> bool:
    try:
        return mysql.float32(float(text)) == target
    except OverflowError:  # beyond the float32 range
        return False


# easyjson escapes what orjson leaves alone: `<`, `>`, `&`, U+2028/U+2029, and writes \b and \f
# as \u0008 and \u000c. The pattern consumes whole escapes (`\\`, `\"`) so that `\\b` stays put.
_EASYJSON_FIXES = re.compile(rb"\\[^bf]|\\[bf]|[<>&]|\xe2\x80[\xa8\xa9]")
_EASYJSON_REPLACEMENTS = {
    b"\\b": b"\\u0008",
    b"\\f": b"\\u000c",
    b"<": b"\\u003c",
    b">": b"\\u003e",
    b"&": b"\\u0026",
    b"\xe2\x80\xa8": b"\\u2028",
    b"\xe2\x80\xa9": b"\\u2029",
}


_EASYJSON_TRIGGERS = (b"<", b">", b"&", b"\\b", b"\\f", b"\xe2\x80")


def _easyjson_escape(match: re.Match) -> bytes:
    text = match.group()
    return _EASYJSON_REPLACEMENTS.get(text, text)


def dumps(document: dict) -> bytes:
    """Compact JSON escaped byte for byte as TiCDC's easyjson writer does."""
    out = orjson.dumps(document)
    # Substring tests are far cheaper than a regex scan, and most messages need no fix.
    if any(trigger in out for trigger in _EASYJSON_TRIGGERS):
        return _EASYJSON_FIXES.sub(_easyjson_escape, out)
    return out


class CanalJsonEncoder(Encoder):
    """Events → Canal-JSON messages, one per event, as tiflow's canal-json encoder writes them."""

    protocol = "canal-json"

    def __init__(self, settings: CodecSettings | None = None):
        super().__init__(settings)
        option = self.settings.option
        self.content_compatible = bool(option("content_compatible", False))
        self.only_updated = self.content_compatible or bool(
            option("only_output_updated_columns", False)
        )
        self.build_time_ms = option("build_time_ms")
        self.large_message_handle = option("large_message_handle", "none")
        self.max_message_bytes = option("max_message_bytes")
        self._formats: dict[tuple, _ColumnFormat] = {}
        self._check_large_message_settings()

    def _check_large_message_settings(self) -> None:
        handle = self.large_message_handle
        if handle not in _LARGE_MESSAGE_HANDLES:
            raise ConfigError(
                f"large_message_handle must be one of {', '.join(_LARGE_MESSAGE_HANDLES)}, "
                f"not {handle!r}"
            )
        if handle == "none":
            return
        if not self.settings.enable_tidb_extension:
            raise ConfigError("canal-json large-message handling needs enable-tidb-extension")
        if not isinstance(self.max_message_bytes, int) or self.max_message_bytes <= 0:
            raise ConfigError("large_message_handle needs max_message_bytes, a positive integer")
        if handle == "claim-check" and self.settings.claim_check is None:
            raise ConfigError("large_message_handle claim-check needs a claim-check store")

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        messages = []
        for event in events:
            if isinstance(event, RowEvent):
                value = self._row_value(event)
            elif isinstance(event, DdlEvent):
                value = self._compressed(self._ddl_document(event))
            elif isinstance(event, ResolvedEvent) and self.settings.enable_tidb_extension:
                value = self._compressed(self._watermark_document(event))
            else:
                continue  # without the extension Canal-JSON has no watermarks
            messages.append(KafkaMessage(key=None, value=value))
        return messages

    def _compressed(self, document: dict) -> bytes:
        return compress(self.settings.compression, dumps(document))

    def _row_value(self, event: RowEvent) -> bytes:
        value = self._compressed(self._row_document(event, event.handle_key_only))
        if self.large_message_handle == "none" or len(value) <= self.max_message_bytes:
            return value
        location = None
        if self.large_message_handle == "claim-check":
            location = self.settings.claim_check.store(None, value)
        return self._compressed(self._row_document(event, True, location))

    def _build_time(self, commit_ts: int | None) -> int:
        if self.build_time_ms is not None:
            return self.build_time_ms
        return (commit_ts or 0) >> 18

    def _format(self, column: Column) -> _ColumnFormat:
        key = (
            column.type_code,
            column.flags & (mysql.FLAG_BINARY | mysql.FLAG_UNSIGNED),
            column.mysql_type,
        )
        found = self._formats.get(key)
        if found is None:
            found = self._formats[key] = _ColumnFormat(*key)
        return found

    def _row_document(
        self, event: RowEvent, handle_key_only: bool, claim_check_location: str | None = None
    ) -> dict:
        new, old = event.columns, event.old_columns
        image = (old if event.op == DELETE else new) or {}
        if handle_key_only:
            image = _handle_key_columns(image)
        formats = {name: self._format(column) for name, column in image.items()}
        document = {
            "id": 0,
            "database": event.schema,
            "table": event.table,
            "pkNames": [n for n, c in image.items() if c.flags & mysql.FLAG_PRIMARY_KEY],
            "isDdl": False,
            "type": _ROW_TYPES[event.op],
            "es": (event.commit_ts or 0) >> 18,
            "ts": self._build_time(event.commit_ts),
            "sql": "",
            "sqlType": {n: formats[n].sql_type(c.value) for n, c in image.items()} or None,
            "mysqlType": {
                n: (formats[n].full if self.content_compatible else formats[n].bare) for n in image
            },
            "old": None,
            # tiflow writes `null` for a row without columns; `[{}]` keeps such a (degenerate)
            # row decodable as the empty row it is.
            "data": [self._texts(image, formats)],
        }
        if event.op == UPDATE and old is not None:
            old_image = _handle_key_columns(old) if handle_key_only else old
            if self.only_updated:
                old_image = _changed_columns(old_image, new or {})
            document["old"] = [self._texts(old_image, None)]
        if self.settings.enable_tidb_extension:
            extension: dict[str, Any] = {}
            if event.commit_ts is not None:
                extension["commitTs"] = event.commit_ts
            if handle_key_only and claim_check_location is None:
                extension["onlyHandleKey"] = True
            if claim_check_location is not None:
                extension["claimCheckLocation"] = claim_check_location
            document["_tidb"] = extension
        return document

    def _texts(self, image: Image, formats: dict[str, _ColumnFormat] | None) -> dict:
        if formats is None:
            return {name: self._format(c).text(c.value) for name, c in image.items()}
        return {name: formats[name].text(c.value) for name, c in image.items()}

    def _ddl_document(self, event: DdlEvent) -> dict:
        document = _struct_document(
            schema=event.schema,
            table=event.table,
            is_ddl=True,
            canal_type=canal_ddl_type(event.ddl_type),
            es=(event.commit_ts or 0) >> 18,
            build_time=self._build_time(event.commit_ts),
            query=event.query,
        )
        if self.settings.enable_tidb_extension:
            document["_tidb"] = {} if event.commit_ts is None else {"commitTs": event.commit_ts}
        return document

    def _watermark_document(self, event: ResolvedEvent) -> dict:
        document = _struct_document(
            schema="",
            table="",
            is_ddl=False,
            canal_type=WATERMARK,
            es=event.ts >> 18,
            build_time=self._build_time(event.ts),
            query="",
        )
        document["_tidb"] = {"watermarkTs": event.ts}
        return document


def _struct_document(
    *, schema: str, table: str, is_ddl: bool, canal_type: str, es: int, build_time: int, query: str
) -> dict:
    """DDL and watermark messages: tiflow marshals a struct, so `data` comes before `old`."""
    return {
        "id": 0,
        "database": schema,
        "table": table,
        "pkNames": None,
        "isDdl": is_ddl,
        "type": canal_type,
        "es": es,
        "ts": build_time,
        "sql": query,
        "sqlType": None,
        "mysqlType": None,
        "data": None,
        "old": None,
    }


def _handle_key_columns(image: Image) -> Image:
    return {name: c for name, c in image.items() if c.flags & mysql.FLAG_HANDLE_KEY}


def _changed_columns(old: Image, new: Image) -> Image:
    """Old columns whose value or type differs from the new row (tiflow `shouldIgnoreColumn`)."""
    changed = {}
    for name, column in old.items():
        after = new.get(name)
        if (
            after is None
            or after.type_code != column.type_code
            or after.value != column.value
            or type(after.value) is not type(column.value)
        ):
            changed[name] = column
    return changed
