"""The silver change log's row format: the contract between decoding and compaction.

One row per row event. Images are lists of columns in the order the protocol sent them; each
value is lossless as `text` (integers in decimal, floats in shortest round-trip form, DECIMAL
and temporal text as sent, strings) or as `binary` (BINARY/VARBINARY/BLOB bytes); NULL leaves
both null. Gold casts `text` to the column's type.

`event_id` identifies a change by its content, not its Kafka offset: TiCDC's at-least-once
delivery re-sends the same change at a new offset, and the replay must be recognised.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pyarrow as pa

from ticdc_lake.events import DdlEvent, Image, RowEvent

COLUMN_TYPE = pa.struct(
    [
        ("name", pa.string()),
        ("type_code", pa.int32()),
        ("flags", pa.int64()),
        ("mysql_type", pa.string()),
        ("text", pa.string()),
        ("binary", pa.binary()),
    ]
)
IMAGE_TYPE = pa.list_(COLUMN_TYPE)

KAFKA_FIELDS = [
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("index", pa.int32()),
]

CHANGES_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("commit_ts", pa.int64()),  # TSO; null when the protocol does not carry it
        ("schema", pa.string()),
        ("table", pa.string()),
        ("op", pa.string()),  # insert | update | delete
        ("partition_id", pa.int64()),
        ("handle_key", pa.list_(pa.string())),
        ("handle_key_only", pa.bool_()),
        ("columns", IMAGE_TYPE),
        ("old_columns", IMAGE_TYPE),
        *KAFKA_FIELDS,
        ("bronze_batch", pa.int64()),
    ]
)

DDL_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("commit_ts", pa.int64()),
        ("schema", pa.string()),
        ("table", pa.string()),
        ("query", pa.string()),
        ("ddl_type", pa.int32()),
        *KAFKA_FIELDS,
        ("bronze_batch", pa.int64()),
    ]
)

TSO_MAX = 2**63 - 1  # commit TS above this would overflow the table's BIGINT (year ~3100)


def value_fields(value: Any) -> tuple[str | None, bytes | None]:
    """(text, binary) of one event-model value."""
    if value is None:
        return None, None
    if isinstance(value, bytes):
        return None, value
    if isinstance(value, float):
        return repr(value), None
    return str(value), None


def image_rows(image: Image | None) -> list[dict[str, Any]] | None:
    if image is None:
        return None
    rows = []
    for name, column in image.items():
        text, binary = value_fields(column.value)
        rows.append(
            {
                "name": name,
                "type_code": column.type_code,
                "flags": column.flags,
                "mysql_type": column.mysql_type,
                "text": text,
                "binary": binary,
            }
        )
    return rows


def _image_identity(image: Image | None) -> list | None:
    if image is None:
        return None
    return [[name, *value_fields(column.value)] for name, column in image.items()]


def event_id(event: RowEvent | DdlEvent) -> str:
    """A stable id from what the change is (table, commit TS, op, images or query)."""
    if isinstance(event, DdlEvent):
        identity = ["ddl", event.commit_ts, event.schema, event.table, event.query]
    else:
        identity = [
            "row", event.commit_ts, event.schema, event.table, event.op, event.partition_id,
            _image_identity(event.columns), _image_identity(event.old_columns),
        ]  # fmt: skip
    encoded = orjson.dumps(identity, default=_bytes_hex)
    return hashlib.blake2b(encoded, digest_size=16).hexdigest()


def _bytes_hex(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"not identity material: {type(value).__name__}")


def change_row(event: RowEvent, bronze_batch: int) -> dict[str, Any]:
    return {
        "event_id": event_id(event),
        "commit_ts": event.commit_ts,
        "schema": event.schema,
        "table": event.table,
        "op": event.op,
        "partition_id": event.partition_id,
        "handle_key": list(event.handle_key),
        "handle_key_only": event.handle_key_only,
        "columns": image_rows(event.columns),
        "old_columns": image_rows(event.old_columns),
        "topic": event.topic,
        "partition": event.partition,
        "offset": event.offset,
        "index": event.index,
        "bronze_batch": bronze_batch,
    }


def ddl_row(event: DdlEvent, bronze_batch: int) -> dict[str, Any]:
    return {
        "event_id": event_id(event),
        "commit_ts": event.commit_ts,
        "schema": event.schema,
        "table": event.table,
        "query": event.query,
        "ddl_type": event.ddl_type,
        "topic": event.topic,
        "partition": event.partition,
        "offset": event.offset,
        "index": event.index,
        "bronze_batch": bronze_batch,
    }
