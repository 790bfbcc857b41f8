"""What each protocol keeps of an event: one explicit projection per protocol.

`keep(protocol, event, settings)` is the event as that protocol's decoder gives it back after
the protocol's encoder wrote it (None when the protocol does not carry the event at all). The
cross-protocol test and `ticdc-lake demo` compare decoded events with the projections of the
generated ones, so every loss listed here is checked, and anything else lost is a bug.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable

import orjson

from ticdc_lake.protocols import CodecSettings, avro
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import (
    DELETE,
    UPDATE,
    Column,
    DdlEvent,
    Event,
    Image,
    ResolvedEvent,
    RowEvent,
    json_value,
)


def _columns(image: Image | None, column: Callable[[Column], Column]) -> Image | None:
    return None if image is None else {name: column(c) for name, c in image.items()}


def _without_mysql_type(column: Column) -> Column:
    return dataclasses.replace(column, mysql_type=None)


def keep_open_protocol(event: Event, settings: CodecSettings) -> Event | None:
    """Open Protocol sends type codes and flags but not the column's full type (`mysql_type`:
    DECIMAL precision and scale, ENUM/SET members, lengths)."""
    if isinstance(event, RowEvent):
        return dataclasses.replace(
            event,
            columns=_columns(event.columns, _without_mysql_type),
            old_columns=_columns(event.old_columns, _without_mysql_type),
        )
    return event


def keep_craft(event: Event, settings: CodecSettings) -> Event | None:
    """Craft, like the Open Protocol, has type codes and flags, no full column type."""
    return keep_open_protocol(event, settings)


_CANAL_KEEPS_DDL_TYPE = frozenset(
    {
        mysql.ACTION_CREATE_SCHEMA,
        mysql.ACTION_DROP_SCHEMA,
        mysql.ACTION_CREATE_TABLE,
        mysql.ACTION_DROP_TABLE,
        mysql.ACTION_TRUNCATE_TABLE,
    }
)


# Types whose bare `mysqlType` (the default form) is their whole type: nothing follows them.
_CANAL_PARAMETERLESS = frozenset(
    {"date", "json", "tinytext", "text", "mediumtext", "longtext"}
    | {"tinyblob", "blob", "mediumblob", "longblob"}
)


def _canal_column(column: Column) -> Column:
    # mysqlType says binary and unsigned; pkNames says primary key (which TiCDC's handle then
    # is). Nullable, unique, multiple-key and generated flags are not sent; the full type only
    # where the bare name is all of it.
    flags = column.flags & (mysql.FLAG_BINARY | mysql.FLAG_UNSIGNED)
    if column.flags & mysql.FLAG_PRIMARY_KEY:
        flags |= mysql.FLAG_PRIMARY_KEY | mysql.FLAG_HANDLE_KEY
    mysql_type = column.mysql_type if column.mysql_type in _CANAL_PARAMETERLESS else None
    return Column(column.type_code, flags, column.value, mysql_type)


def keep_canal_json(event: Event, settings: CodecSettings) -> Event | None:
    """Canal-JSON: no physical partition id; DDL types only where the Canal type names one
    action (CREATE, ERASE, TRUNCATE, database DDL); without the TiDB extension no commit TS and
    no watermarks. A unique-key handle is not marked (pkNames lists primary-key columns only)."""
    extension = settings.enable_tidb_extension
    if isinstance(event, ResolvedEvent):
        return event if extension else None
    if isinstance(event, DdlEvent):
        return dataclasses.replace(
            event,
            commit_ts=event.commit_ts if extension else None,
            ddl_type=event.ddl_type if event.ddl_type in _CANAL_KEEPS_DDL_TYPE else None,
        )
    return dataclasses.replace(
        event,
        commit_ts=event.commit_ts if extension else None,
        partition_id=None,
        columns=_columns(event.columns, _canal_column),
        old_columns=_columns(event.old_columns, _canal_column),
    )


_AVRO_FULL_TYPES = ("decimal", "bit", "enum", "set", "json")


def _avro_column(column: Column) -> Column:
    code, flags = column.type_code, column.flags
    binary = mysql.is_binary_string(code, flags)
    if code in mysql.INTEGER_TYPES and code != mysql.TYPE_LONGLONG:
        code = mysql.TYPE_LONG  # Avro int/long and tidb_type INT: the width is gone
    elif code in mysql.STRING_TYPES or code in mysql.BLOB_TYPES:
        code = mysql.TYPE_LONG_BLOB if binary else mysql.TYPE_VARCHAR  # tidb_type BLOB or TEXT
    kept = flags & mysql.FLAG_NULLABLE
    if column.type_code in mysql.INTEGER_TYPES and flags & mysql.FLAG_UNSIGNED:
        kept |= mysql.FLAG_UNSIGNED  # tidb_type INT UNSIGNED / BIGINT UNSIGNED (not YEAR, BIT)
    if binary:
        kept |= mysql.FLAG_BINARY
    if flags & mysql.FLAG_HANDLE_KEY:
        kept |= mysql.FLAG_HANDLE_KEY | mysql.FLAG_PRIMARY_KEY  # in the key record: seen as the PK
    mysql_type = column.mysql_type
    if mysql_type is not None and not mysql_type.startswith(_AVRO_FULL_TYPES):
        mysql_type = None  # only DECIMAL, BIT, ENUM/SET and JSON say more than the tidb_type
    return Column(code, kept, column.value, mysql_type)


def keep_avro(event: Event, settings: CodecSettings) -> Event | None:
    """Avro: no old image on update; a delete is a tombstone holding only the key columns and
    no commit TS; integer widths and string families are merged (INT, TEXT, BLOB); no physical
    partition id; a unique-key handle looks like a primary key; without the TiDB extension no
    commit TS or operation (inserts and updates both read as updates); DDL and resolved events
    only with the test-only watermark option. The 2022 layout (TiCDC up to v6.0) loses more:
    `_avro_2022_column`."""
    extension = settings.enable_tidb_extension
    if isinstance(event, ResolvedEvent | DdlEvent):
        return event if extension and settings.option("enable_watermark", False) else None
    column = _avro_column
    if settings.option("layout", "current") == "2022":
        zone = settings.option("time_zone", "UTC")
        column = functools.partial(_avro_2022_column, zone=zone)
    if event.op == DELETE:
        key = {n: c for n, c in event.old_columns.items() if c.flags & mysql.FLAG_HANDLE_KEY}
        return dataclasses.replace(
            event,
            commit_ts=None,
            partition_id=None,
            columns=None,
            old_columns=_columns(key, column),
            handle_key_only=True,
        )
    return dataclasses.replace(
        event,
        commit_ts=event.commit_ts if extension else None,
        op=event.op if extension else UPDATE,
        partition_id=None,
        columns=_columns(event.columns, column),
        old_columns=None,
    )


def _avro_2022_column(column: Column, zone: str) -> Column:
    """TiCDC up to v6.0's Avro, read without column-types: the type is what the Avro type
    implies (int, long, float, double, string, bytes; BIGINT UNSIGNED and BIT as an unsigned
    BIGINT; DATE, DATETIME and TIMESTAMP as a TIMESTAMP instant, TIME as a TIME to the ms);
    DECIMAL, ENUM, SET and JSON are text (ENUM and SET their member names); the only flags
    left are nullable, binary, unsigned and the key's. Temporal values are what its encoder
    made of them (avro.go_moment_millis, go_time_millis) as the decoder reads them back."""
    code, flags, value = column.type_code, column.flags, column.value
    binary = mysql.is_binary_string(code, flags)
    unsigned = bool(flags & mysql.FLAG_UNSIGNED)
    kept = flags & mysql.FLAG_NULLABLE
    if binary:
        kept |= mysql.FLAG_BINARY
    if flags & mysql.FLAG_HANDLE_KEY:
        kept |= mysql.FLAG_HANDLE_KEY | mysql.FLAG_PRIMARY_KEY
    if code == mysql.TYPE_BIT or (code == mysql.TYPE_LONGLONG and unsigned):
        return Column(mysql.TYPE_LONGLONG, kept | mysql.FLAG_UNSIGNED, value)
    if code in (mysql.TYPE_TINY, mysql.TYPE_SHORT, mysql.TYPE_INT24) or (
        code == mysql.TYPE_LONG and not unsigned
    ):
        return Column(mysql.TYPE_LONG, kept, value)
    if code in (mysql.TYPE_LONG, mysql.TYPE_LONGLONG, mysql.TYPE_YEAR):
        return Column(mysql.TYPE_LONGLONG, kept, value)
    if code in (mysql.TYPE_FLOAT, mysql.TYPE_DOUBLE):
        return Column(code, kept, value)
    if binary:
        return Column(mysql.TYPE_LONG_BLOB, kept, value)
    if code in (mysql.TYPE_DATE, mysql.TYPE_DATETIME, mysql.TYPE_TIMESTAMP):
        millis = None if value is None else avro.go_moment_millis(value, code, zone)
        read = None if millis is None else avro.ticdc_2022_moment(millis, mysql.TYPE_TIMESTAMP)
        return Column(mysql.TYPE_TIMESTAMP, kept, read)
    if code == mysql.TYPE_DURATION:
        read = None if value is None else avro.ticdc_2022_time(avro.go_time_millis(value))
        return Column(mysql.TYPE_DURATION, kept, read)
    if code in (mysql.TYPE_ENUM, mysql.TYPE_SET) and value is not None:
        members = mysql.parse_column_type(column.mysql_type).elements
        value = avro.member_names(code, members, value)
    return Column(mysql.TYPE_VARCHAR, kept, value)


KEEPS: dict[str, Callable[[Event, CodecSettings], Event | None]] = {
    "open-protocol": keep_open_protocol,
    "craft": keep_craft,
    "canal-json": keep_canal_json,
    "avro": keep_avro,
}


def kept(protocol: str, events: Iterable[Event], settings: CodecSettings) -> list[Event]:
    keep = KEEPS[protocol]
    return [found for event in events if (found := keep(event, settings)) is not None]


def canonical(event: Event, *, coordinates: bool = False) -> bytes:
    """A byte string equal for equal events, whatever the column order (for multisets, diffs)."""
    document: dict = {"kind": event.kind, "commit_ts": event.commit_ts}
    if isinstance(event, RowEvent):
        document |= {
            "schema": event.schema,
            "table": event.table,
            "op": event.op,
            "partition_id": event.partition_id,
            "handle_key_only": event.handle_key_only,
            "columns": _canonical_image(event.columns),
            "old_columns": _canonical_image(event.old_columns),
        }
    elif isinstance(event, DdlEvent):
        document |= {
            "schema": event.schema,
            "table": event.table,
            "query": event.query,
            "ddl_type": event.ddl_type,
        }
    if coordinates:
        document |= {"topic": event.topic, "partition": event.partition, "offset": event.offset}
    return orjson.dumps(document)


def _canonical_image(image: Image | None) -> list | None:
    if image is None:
        return None
    return [
        [name, c.type_code, c.flags, json_value(c.value), c.mysql_type]
        for name, c in sorted(image.items())
    ]


__all__ = [
    "KEEPS",
    "canonical",
    "keep_avro",
    "keep_canal_json",
    "keep_craft",
    "keep_open_protocol",
    "kept",
]
