"""The one event model every protocol decodes into (DESIGN.md "Protocols").

Values are lossless Python objects:

| column kind                         | Python value                                        |
|-------------------------------------|-----------------------------------------------------|
| integers, YEAR, BIT                 | int (unsigned up to 2**64 - 1)                      |
| ENUM / SET                          | int 1-based index / bitmask (Avro's names are mapped |
|                                     | back through the schema's `allowed` list)           |
| FLOAT                               | float, rounded through float32 (`mysql.float32`)    |
| DOUBLE                              | float                                               |
| DECIMAL                             | str, the exact text as sent (`"129012.1230000"`)    |
| CHAR/VARCHAR/TEXT, JSON, VECTOR     | str                                                 |
| BINARY/VARBINARY/BLOB               | bytes                                               |
| DATE/DATETIME/TIMESTAMP/TIME        | str as sent; TIMESTAMP is local time in the TiCDC   |
|                                     | server's zone, which the pipeline config names, or  |
|                                     | with a trailing Z an instant in UTC (Avro's         |
|                                     | timestamp-millis); TIME `[-]HH:MM:SS[.f]`, ±838 h    |
| NULL                                | None                                                |
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, ClassVar

from ticdc_lake.silver.mysql import FLAG_HANDLE_KEY

INSERT = "insert"
UPDATE = "update"
DELETE = "delete"
OPS = (INSERT, UPDATE, DELETE)


@dataclass(slots=True)
class Column:
    """One column of a row image."""

    type_code: int | None  # MySQL type code (mysql.TYPE_*); None when the protocol does not say
    flags: int  # TiCDC flag bits (mysql.FLAG_*), as far as the protocol tells them
    value: Any
    mysql_type: str | None = None  # full column type (`decimal(10,4)`, `enum('a','b')`) if sent


Image = dict[str, Column]


@dataclass(slots=True)
class RowEvent:
    """An inserted, updated or deleted row.

    `columns` is the new image (insert, update); `old_columns` the old image (update when the
    protocol sends it, delete). `commit_ts` is None only when the protocol does not carry it
    (Canal-JSON without the TiDB extension, Avro deletes): never invented.
    """

    kind: ClassVar[str] = "row"
    commit_ts: int | None
    schema: str
    table: str
    op: str
    columns: Image | None
    old_columns: Image | None
    topic: str
    partition: int
    offset: int
    index: int = 0  # position of the event inside a batched Kafka message
    partition_id: int | None = None  # physical partition id of a partitioned table (`ptn`)
    handle_key_only: bool = False  # images hold only handle-key columns (large-message option)

    @property
    def handle_key(self) -> tuple[str, ...]:
        """Names of the handle-key columns (primary key, or the NOT NULL unique key TiDB uses)."""
        image = self.columns if self.columns is not None else self.old_columns
        if not image:
            return ()
        return tuple(name for name, column in image.items() if column.flags & FLAG_HANDLE_KEY)


@dataclass(slots=True)
class DdlEvent:
    kind: ClassVar[str] = "ddl"
    commit_ts: int | None
    schema: str
    table: str
    query: str
    ddl_type: int | None  # TiDB ActionType (mysql.ACTION_*); None when the protocol omits it
    topic: str
    partition: int
    offset: int
    index: int = 0


@dataclass(slots=True)
class ResolvedEvent:
    """A watermark: every change with commit TS <= `ts` in this partition has been sent."""

    kind: ClassVar[str] = "resolved"
    ts: int
    topic: str
    partition: int
    offset: int
    index: int = 0

    @property
    def commit_ts(self) -> int:
        return self.ts


Event = RowEvent | DdlEvent | ResolvedEvent


def json_value(value: Any) -> Any:
    """A column value as JSON: bytes become {"base64": ...}; everything else is already JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _json_image(image: Image | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: json_value(column.value) for name, column in image.items()}


def to_json_dict(event: Event) -> dict[str, Any]:
    """The documented, lossless JSON form of an event (`ticdc-lake decode` prints these)."""
    out: dict[str, Any] = {"kind": event.kind, "commit_ts": event.commit_ts}
    if isinstance(event, RowEvent):
        out.update(
            schema=event.schema,
            table=event.table,
            op=event.op,
            partition_id=event.partition_id,
            handle_key=list(event.handle_key),
            handle_key_only=event.handle_key_only,
            columns=_json_image(event.columns),
            old_columns=_json_image(event.old_columns),
            types={
                name: column.type_code
                for name, column in (event.columns or event.old_columns or {}).items()
            },
        )
    elif isinstance(event, DdlEvent):
        out.update(
            schema=event.schema, table=event.table, query=event.query, ddl_type=event.ddl_type
        )
    out.update(topic=event.topic, partition=event.partition, offset=event.offset, index=event.index)
    return out
