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

from ticdc_lake.engines import native
from ticdc_lake.silver.events import DdlEvent, Image, ResolvedEvent, RowEvent
from ticdc_lake.silver.mysql import FLAG_HANDLE_KEY

# The compiled image loop (_silver_speedups.c); optional, like the decoders' speedups.
SPEEDUPS = native("ticdc_lake.silver._silver_speedups")

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

RESOLVED_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("ts", pa.int64()),
        ("offset", pa.int64()),
        ("index", pa.int32()),
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


def _text(value: Any) -> str | None:
    """``value_fields(value)[0]`` for a value known not to be bytes, fastest for str and int."""
    kind = type(value)
    if kind is str:
        return value
    if value is None:
        return None
    if kind is int:
        return str(value)
    return value_fields(value)[0]


class ImageColumns:
    """Images of many changes as the flat columns of IMAGE_TYPE, built without per-column dicts.

    ``add`` converts each value once and returns the image's identity (what ``event_id`` hashes)
    and its handle-key names (``RowEvent.handle_key``): in C when the extension is built, which
    writes the columns' Arrow buffers directly, else by ``add_python`` on Python lists, the
    reference it is tested against.
    """

    def __init__(self, speedups=SPEEDUPS):
        self.speedups = speedups
        self.offsets = [0]
        self.absent: list[bool] = []
        if speedups is not None:
            self.buffers = speedups.ImageBuffers()
            return
        self.names: list[str] = []
        self.type_codes: list[int | None] = []
        self.flags: list[int] = []
        self.mysql_types: list[str | None] = []
        self.texts: list[str | None] = []
        self.binaries: list[bytes | None] = []

    def add(self, image: Image | None) -> tuple[list | None, list[str]]:
        if image is None:
            self.absent.append(True)
            self.offsets.append(self.offsets[-1])
            return None, []
        if self.speedups is None:
            identity, handle = self.add_python(image)
            self.offsets.append(len(self.names))
        else:
            identity, handle = self.buffers.add(image, FLAG_HANDLE_KEY)
            self.offsets.append(len(self.buffers))
        self.absent.append(False)
        return identity, handle

    def add_python(self, image: Image) -> tuple[list, list[str]]:
        identity, handle = [], []
        # Bound methods: this loop runs once per column of every change.
        add_text, add_binary = self.texts.append, self.binaries.append
        add_name, add_code = self.names.append, self.type_codes.append
        add_flags, add_mysql_type = self.flags.append, self.mysql_types.append
        for name, column in image.items():
            value = column.value
            kind = type(value)
            if kind is str:
                text, binary = value, None
            elif kind is bytes or isinstance(value, bytes):
                text, binary = None, value
            else:
                text, binary = _text(value), None
            add_text(text)
            add_binary(binary)
            identity.append([name, text, binary])
            add_name(name)
            add_code(column.type_code)
            add_flags(column.flags)
            add_mysql_type(column.mysql_type)
            if column.flags & FLAG_HANDLE_KEY:
                handle.append(name)
        return identity, handle

    def truncate(self, images: int) -> None:
        """Keep the first `images` images: undoes adds, including one that failed part way."""
        del self.absent[images:]
        del self.offsets[images + 1 :]
        end = self.offsets[-1]
        if self.speedups is not None:
            self.buffers.truncate(end)
            return
        for values in (
            self.names, self.type_codes, self.flags, self.mysql_types, self.texts, self.binaries
        ):  # fmt: skip
            del values[end:]

    def _values(self) -> pa.StructArray:
        """The COLUMN_TYPE entries of every image, in order."""
        if self.speedups is not None:
            return _image_values(self.buffers.export(), len(self.buffers))
        columns = (self.names, self.type_codes, self.flags, self.mysql_types, self.texts,
                   self.binaries)  # fmt: skip
        fields = [pa.array(values, f.type) for values, f in zip(columns, COLUMN_TYPE, strict=True)]
        return pa.StructArray.from_arrays(fields, fields=list(COLUMN_TYPE))

    def array(self) -> pa.ListArray:
        values = self._values()
        return pa.ListArray.from_arrays(
            pa.array(self.offsets, pa.int32()),
            values,
            type=IMAGE_TYPE,
            mask=pa.array(self.absent, pa.bool_()),
        )


def _image_identity(image: Image | None) -> list | None:
    if image is None:
        return None
    return [[name, *value_fields(column.value)] for name, column in image.items()]


def _event_id(identity: list) -> str:
    # _silver_speedups.c writes this JSON and hashes it itself: change both or neither
    # (tests/silver/test_rows.py holds their ids equal).
    encoded = orjson.dumps(identity, default=_bytes_hex)
    return hashlib.blake2b(encoded, digest_size=16).hexdigest()


def _row_identity(event: RowEvent, new: list | None, old: list | None) -> list:
    return [
        "row", event.commit_ts, event.schema, event.table, event.op, event.partition_id, new, old,
    ]  # fmt: skip


def event_id(event: RowEvent | DdlEvent) -> str:
    """A stable id from what the change is (table, commit TS, op, images or query)."""
    if isinstance(event, DdlEvent):
        return _event_id(["ddl", event.commit_ts, event.schema, event.table, event.query])
    identity = _row_identity(
        event, _image_identity(event.columns), _image_identity(event.old_columns)
    )
    return _event_id(identity)


def _bytes_hex(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"not identity material: {type(value).__name__}")


_SCALAR_FIELDS = [f for f in CHANGES_SCHEMA if f.name not in ("columns", "old_columns")]


class ChangeRows:
    """Silver change rows (CHANGES_SCHEMA), built column by column: the decode stage's hot path.

    Each value is converted to its (text, binary) form once, for the row and for its event_id.
    With the extension built, a row is added in one call that writes every column's Arrow
    buffers (``ChangeBuffers``); else on Python lists, the reference it is tested against.
    """

    def __init__(self, speedups=SPEEDUPS):
        self.speedups = speedups
        if speedups is not None:
            self.buffers = speedups.ChangeBuffers()
            return
        self.scalars: dict[str, list] = {f.name: [] for f in _SCALAR_FIELDS}
        self.columns = ImageColumns(None)
        self.old_columns = ImageColumns(None)

    def __len__(self) -> int:
        if self.speedups is not None:
            return len(self.buffers)
        return len(self.scalars["event_id"])

    def compiled_buffers(self) -> Any:
        """The compiled ``ChangeBuffers`` a decoder may write rows into itself (decode_into), or
        None on Python lists."""
        return self.buffers if self.speedups is not None else None

    def add(self, event: RowEvent, bronze_batch: int) -> None:
        if self.speedups is not None:
            self.buffers.add(event, bronze_batch, FLAG_HANDLE_KEY, event_id)
            return
        new, new_handle = self.columns.add(event.columns)
        old, old_handle = self.old_columns.add(event.old_columns)
        row = self.scalars
        row["event_id"].append(_event_id(_row_identity(event, new, old)))
        row["commit_ts"].append(event.commit_ts)
        row["schema"].append(event.schema)
        row["table"].append(event.table)
        row["op"].append(event.op)
        row["partition_id"].append(event.partition_id)
        # RowEvent.handle_key: the new image's when there is one.
        row["handle_key"].append(new_handle if event.columns is not None else old_handle)
        row["handle_key_only"].append(event.handle_key_only)
        row["topic"].append(event.topic)
        row["partition"].append(event.partition)
        row["offset"].append(event.offset)
        row["index"].append(event.index)
        row["bronze_batch"].append(bronze_batch)

    def truncate(self, changes: int) -> None:
        """Keep the first `changes` rows: undoes adds, including one that failed part way."""
        if self.speedups is not None:
            self.buffers.truncate(changes)
            return
        for values in self.scalars.values():
            del values[changes:]
        self.columns.truncate(changes)
        self.old_columns.truncate(changes)

    def arrays(self) -> list[pa.Array]:
        """One array per CHANGES_SCHEMA field, in order."""
        if self.speedups is not None:
            return _change_arrays(self.buffers.export(), len(self.buffers))
        images = {"columns": self.columns, "old_columns": self.old_columns}
        return [
            images[f.name].array() if f.name in images else pa.array(self.scalars[f.name], f.type)
            for f in CHANGES_SCHEMA
        ]

    def struct_array(self) -> pa.StructArray:
        return pa.StructArray.from_arrays(self.arrays(), fields=list(CHANGES_SCHEMA))

    def table(self) -> pa.Table:
        return pa.Table.from_arrays(self.arrays(), schema=CHANGES_SCHEMA)


def _buffers_array(kind: pa.DataType, length: int, buffers: tuple[bytes, ...]) -> pa.Array:
    return pa.Array.from_buffers(kind, length, [pa.py_buffer(b) for b in buffers])


def _list_end(offsets: bytes) -> int:
    """How many values a list column's int32 offsets span (their last one)."""
    return int.from_bytes(offsets[-4:], "little", signed=True)


def _list_array(kind: pa.ListType, rows: int, lists: tuple[bytes, bytes], values: pa.Array):
    validity, offsets = lists
    return pa.Array.from_buffers(
        kind, rows, [pa.py_buffer(validity), pa.py_buffer(offsets)], children=[values]
    )


def _image_values(exported: tuple, entries: int) -> pa.StructArray:
    """COLUMN_TYPE entries from ImageBuffers.export()."""
    fields = [
        _buffers_array(f.type, entries, buffers)
        for buffers, f in zip(exported, COLUMN_TYPE, strict=True)
    ]
    return pa.StructArray.from_arrays(fields, fields=list(COLUMN_TYPE))


# ChangeBuffers' scalar columns: CHANGES_SCHEMA's, but for the lists.
_BUFFER_SCALARS = [f for f in _SCALAR_FIELDS if f.name != "handle_key"]


def _change_arrays(exported: tuple, rows: int) -> list[pa.Array]:
    """CHANGES_SCHEMA's arrays from ChangeBuffers.export()."""
    scalars, (handle_lists, handle_names), images = exported
    arrays = {}
    for f, buffers in zip(_BUFFER_SCALARS, scalars, strict=True):
        if f.type == pa.bool_():  # one byte per value in the buffers, one bit in Arrow
            arrays[f.name] = _buffers_array(pa.int8(), rows, buffers).cast(pa.bool_())
        else:
            arrays[f.name] = _buffers_array(f.type, rows, buffers)
    names = _buffers_array(pa.string(), _list_end(handle_lists[1]), handle_names)
    arrays["handle_key"] = _list_array(pa.list_(pa.string()), rows, handle_lists, names)
    for name, (lists, values) in zip(("columns", "old_columns"), images, strict=True):
        entries = _list_end(lists[1])
        arrays[name] = _list_array(IMAGE_TYPE, rows, lists, _image_values(values, entries))
    return [arrays[f.name] for f in CHANGES_SCHEMA]


def change_row(event: RowEvent, bronze_batch: int) -> dict[str, Any]:
    """One change as a dict of CHANGES_SCHEMA (tests and small tools; ChangeRows for many)."""
    rows = ChangeRows()
    rows.add(event, bronze_batch)
    return rows.table().to_pylist()[0]


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


def resolved_row(event: ResolvedEvent, bronze_batch: int) -> dict[str, Any]:
    return {
        "topic": event.topic,
        "partition": event.partition,
        "ts": event.ts,
        "offset": event.offset,
        "index": event.index,
        "bronze_batch": bronze_batch,
    }
