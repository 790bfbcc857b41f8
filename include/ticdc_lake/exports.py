"""Kafka export files (DESIGN.md "Input"): read them into KafkaRecords, and write them.

Three layouts are read, each optionally gzip- or zstd-compressed as a whole file (recognised by
magic bytes, whatever the file is called):

- **parquet**: the Spark Kafka source schema (`key binary, value binary, topic string,
  partition int, offset long, timestamp timestamp, timestampType int,
  headers array<struct<key string, value binary>>`). An Avro container file with the same
  fields is read as well (`avro`).
- **jsonl**: one JSON object per line with `topic`, `partition`, `offset`, `timestamp` (ms),
  `key_b64`, `value_b64` (standard base64 or null) and optionally
  `headers: [{"key": ..., "value_b64": ...}]`.
- **kcat**: what `kcat -C -J` prints: `topic`, `partition`, `offset`, `tstype`, `ts`, `key`,
  `payload` (the bytes as JSON text; kcat writes bytes that are not UTF-8 as they are, and those
  are recovered exactly) and `headers` (`[name, value, ...]` or, with `-J --json-headers`,
  `{name: [value, ...]}`).

JSON Lines files may mix `jsonl` and `kcat` lines; each line is recognised by its fields.

A malformed line or row never stops the file and is never dropped silently: it becomes an
`ExportError` (file, 1-based line or row number, reason, and the coordinates that could be
read) handed to the `on_error` callback; without a callback it is raised. A file that cannot be
read at all (missing, not an export, truncated compressed stream) is reported the same way and
reading moves on to the next file.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import fastavro
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from ticdc_lake.errors import DecodeError, TicdcLakeError, location_text
from ticdc_lake.events import Event
from ticdc_lake.protocols.base import MALFORMED_INPUT_ERRORS, Decoder
from ticdc_lake.records import KafkaRecord

FORMATS = ("parquet", "jsonl", "kcat", "avro")
FILE_COMPRESSIONS = ("none", "gz", "zstd")

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PARQUET_MAGIC = b"PAR1"
_AVRO_MAGIC = b"Obj\x01"
_SUFFIX = {"parquet": ".parquet", "jsonl": ".jsonl", "kcat": ".kcat.jsonl", "avro": ".avro"}
_FILE_SUFFIX = {"none": "", "gz": ".gz", "zstd": ".zst"}
_BATCH_ROWS = 65_536

SPARK_KAFKA_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)
_REQUIRED_COLUMNS = ("key", "value", "topic", "partition", "offset")

AVRO_CONTAINER_SCHEMA = {
    "type": "record",
    "name": "KafkaRecord",
    "namespace": "ticdc_lake.exports",
    "fields": [
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"]},
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {
            "name": "timestamp",
            "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
        },
        {"name": "timestampType", "type": ["null", "int"]},
        {
            "name": "headers",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Header",
                        "fields": [
                            {"name": "key", "type": "string"},
                            {"name": "value", "type": ["null", "bytes"]},
                        ],
                    },
                },
            ],
        },
    ],
}


# What reading a corrupt or truncated file raises, from the decompressors, pyarrow, fastavro
# and the parsers under them.
_CORRUPT_FILE_ERRORS = (
    *MALFORMED_INPUT_ERRORS,
    OSError,
    zlib.error,
    zstandard.ZstdError,
    pa.ArrowException,
    fastavro.schema.SchemaParseException,
    fastavro.schema.UnknownType,
)


class ExportError(TicdcLakeError):
    """A line, row or whole file of a Kafka export that could not be read as a Kafka record.

    `line` is the 1-based line (JSON Lines) or row (Parquet, Avro) number, None when the whole
    file is unreadable. `raw` keeps the offending line (bytes) so that nothing is lost.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str,
        line: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        raw: bytes | None = None,
    ):
        self.reason = reason
        self.path = path
        self.line = line
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.raw = raw
        super().__init__(reason)

    def __str__(self) -> str:
        where = location_text(
            file=self.path,
            line=self.line,
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
        )
        return f"unreadable export record: {self.reason} ({where})"


ErrorHandler = Callable[[ExportError], None]


def _raise(error: ExportError) -> None:
    raise error


# ---------------------------------------------------------------------------------------------
# Detection


def sniff(head: bytes) -> str | None:
    """The whole-file compression ("gz", "zstd") from the first bytes, or None."""
    if head.startswith(_GZIP_MAGIC):
        return "gz"
    if head.startswith(_ZSTD_MAGIC):
        return "zstd"
    return None


def _open_decompressed(path: str) -> BinaryIO:
    """A binary stream of the file's content, gzip or zstd undone (told by magic bytes)."""
    raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    compression = sniff(raw.read(4))
    raw.seek(0)
    if compression == "gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "zstd":
        reader = zstandard.ZstdDecompressor().stream_reader(
            raw, read_across_frames=True, closefd=True
        )
        return io.BufferedReader(reader, buffer_size=1 << 20)
    return raw


def detect_format(path: str | os.PathLike) -> tuple[str, str]:
    """(layout, file compression) of an export file, from its bytes, not its name."""
    path = os.fspath(path)
    with open(path, "rb") as raw:
        compression = sniff(raw.read(4)) or "none"
    with _open_decompressed(path) as stream:
        head = stream.read(4)
    if head.startswith(_PARQUET_MAGIC):
        return "parquet", compression
    if head.startswith(_AVRO_MAGIC):
        return "avro", compression
    return "jsonl", compression


# ---------------------------------------------------------------------------------------------
# Reading


def read_exports(
    paths: Iterable[str | os.PathLike], *, on_error: ErrorHandler | None = None
) -> Iterator[tuple[str, KafkaRecord]]:
    """(path, record) for every record of every file, in file order."""
    for path in paths:
        path = os.fspath(path)
        for record in read_export(path, on_error=on_error):
            yield path, record


def read_export(
    path: str | os.PathLike, *, on_error: ErrorHandler | None = None
) -> Iterator[KafkaRecord]:
    """The records of one export file; bad lines and an unreadable file go to `on_error`."""
    path = os.fspath(path)
    report = on_error or _raise
    try:
        layout, compression = detect_format(path)
    except _CORRUPT_FILE_ERRORS as exc:
        report(ExportError(f"cannot open export file: {exc}", path=path))
        return
    readers = {"parquet": _read_parquet, "avro": _read_avro, "jsonl": _read_json_lines}
    try:
        yield from readers[layout](path, compression, report)
    except _CORRUPT_FILE_ERRORS as exc:
        # Corrupt or truncated files end here; the records already yielded stay valid.
        report(ExportError(f"{layout} file is corrupt or truncated: {exc}", path=path))


def _read_json_lines(path: str, _compression: str, report: ErrorHandler) -> Iterator[KafkaRecord]:
    with _open_decompressed(path) as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                yield _record_from_json_line(line)
            except _BadLine as bad:
                report(
                    ExportError(
                        bad.reason,
                        path=path,
                        line=number,
                        topic=bad.fields.get("topic"),
                        partition=bad.fields.get("partition"),
                        offset=bad.fields.get("offset"),
                        raw=line,
                    )
                )


class _BadLine(Exception):
    def __init__(self, reason: str, fields: dict[str, Any] | None = None):
        self.reason = reason
        self.fields = fields or {}


def _parse_json_line(line: bytes) -> dict:
    """The line's JSON object. kcat writes bytes that are not UTF-8 raw, so a line orjson
    refuses is parsed again with those bytes carried as surrogate escapes (`_text_bytes` turns
    them back into the same bytes)."""
    try:
        document = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        try:
            document = json.loads(line.decode("utf-8", "surrogateescape"))
        except (ValueError, RecursionError):
            raise _BadLine(f"not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise _BadLine(f"expected a JSON object, found {type(document).__name__}")
    return document


def _record_from_json_line(line: bytes) -> KafkaRecord:
    document = _parse_json_line(line)
    coordinates = _coordinates(document)
    try:
        if "value_b64" in document or "key_b64" in document:
            return _record_from_b64_object(document)
        if "payload" in document or "payload_error" in document:
            return _record_from_kcat_object(document)
    except _BadLine as bad:
        raise _BadLine(bad.reason, coordinates) from None
    raise _BadLine(
        "expected key_b64/value_b64 (JSON Lines export) or payload (kcat -J); "
        f"found fields {sorted(document)}",
        coordinates,
    )


def _coordinates(document: dict) -> dict[str, Any]:
    """Whatever of topic/partition/offset is well-formed, for error messages."""
    found = {}
    if isinstance(document.get("topic"), str):
        found["topic"] = document["topic"]
    for name in ("partition", "offset"):
        if _is_int(document.get(name)):
            found[name] = document[name]
    return found


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_coordinates(document: dict) -> tuple[str, int, int]:
    topic, partition, offset = (document.get(name) for name in ("topic", "partition", "offset"))
    if not isinstance(topic, str):
        raise _BadLine(f"`topic` must be a string, found {topic!r}")
    if not _is_int(partition) or not 0 <= partition < 2**31:
        raise _BadLine(f"`partition` must be an integer in [0, 2^31), found {partition!r}")
    if not _is_int(offset) or not 0 <= offset < 2**63:
        raise _BadLine(f"`offset` must be an integer in [0, 2^63), found {offset!r}")
    return topic, partition, offset


def _optional_int(document: dict, name: str) -> int | None:
    value = document.get(name)
    if value is not None and not _is_int(value):
        raise _BadLine(f"`{name}` must be an integer or null, found {value!r}")
    return value


def _b64_field(document: dict, name: str) -> bytes | None:
    value = document.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _BadLine(f"`{name}` must be a base64 string or null, found {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _BadLine(f"`{name}` is not valid base64: {exc}") from None


def _record_from_b64_object(document: dict) -> KafkaRecord:
    """A `jsonl` line: base64 key and value, timestamp in ms."""
    topic, partition, offset = _require_coordinates(document)
    headers = document.get("headers") or ()
    if not isinstance(headers, list | tuple):
        raise _BadLine("`headers` must be a list of {key, value_b64} objects")
    parsed_headers = []
    for header in headers:
        if not isinstance(header, dict) or not isinstance(header.get("key"), str):
            raise _BadLine(f"header {header!r} is not a {{key, value_b64}} object")
        parsed_headers.append((header["key"], _b64_field(header, "value_b64")))
    return KafkaRecord(
        topic=topic,
        partition=partition,
        offset=offset,
        key=_b64_field(document, "key_b64"),
        value=_b64_field(document, "value_b64"),
        timestamp_ms=_optional_int(document, "timestamp"),
        headers=tuple(parsed_headers),
    )


def _text_bytes(value: Any, name: str) -> bytes | None:
    """kcat's text form back to the message bytes (lone surrogates are the raw non-UTF-8 bytes)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _BadLine(f"`{name}` must be a string or null, found {type(value).__name__}")
    return value.encode("utf-8", "surrogateescape")


def _kcat_headers(headers: Any) -> tuple[tuple[str, bytes | None], ...]:
    if headers is None:
        return ()
    if isinstance(headers, dict):  # kcat -J --json-headers: {name: [value, ...]}
        pairs = [
            (name, value)
            for name, values in headers.items()
            for value in (values if isinstance(values, list) else [values])
        ]
    elif isinstance(headers, list) and len(headers) % 2 == 0:
        pairs = list(zip(headers[::2], headers[1::2], strict=True))
    else:
        raise _BadLine("`headers` must be a [name, value, ...] list or a {name: [values]} map")
    result = []
    for name, value in pairs:
        if not isinstance(name, str):
            raise _BadLine(f"header name {name!r} is not a string")
        result.append((name, _text_bytes(value, f"header {name}")))
    return tuple(result)


def _record_from_kcat_object(document: dict) -> KafkaRecord:
    """A `kcat -C -J` line: key and payload as text, `ts` in ms when `tstype` says there is one."""
    topic, partition, offset = _require_coordinates(document)
    if "payload_error" in document:
        raise _BadLine(f"kcat could not deserialise the payload: {document['payload_error']}")
    if "key_error" in document:
        raise _BadLine(f"kcat could not deserialise the key: {document['key_error']}")
    return KafkaRecord(
        topic=topic,
        partition=partition,
        offset=offset,
        key=_text_bytes(document.get("key"), "key"),
        value=_text_bytes(document.get("payload"), "payload"),
        timestamp_ms=_optional_int(document, "ts"),
        headers=_kcat_headers(document.get("headers")),
    )


def _parquet_source(path: str, compression: str):
    if compression == "none":
        return path
    # Parquet needs random access: a whole-file-compressed one is unpacked in memory.
    with _open_decompressed(path) as stream:
        return pa.BufferReader(stream.read())


def _read_parquet(path: str, compression: str, report: ErrorHandler) -> Iterator[KafkaRecord]:
    parquet = pq.ParquetFile(_parquet_source(path, compression))
    names = set(parquet.schema_arrow.names)
    missing = [name for name in _REQUIRED_COLUMNS if name not in names]
    if missing:
        report(
            ExportError(
                f"not a Spark Kafka export: missing column(s) {', '.join(missing)}", path=path
            )
        )
        return
    wanted = [name for name in SPARK_KAFKA_SCHEMA.names if name in names]
    row = 0
    for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=wanted):
        yield from _records_from_batch(batch, path, row, report)
        row += batch.num_rows


def _timestamps_ms(column: pa.Array) -> list[int | None]:
    if pa.types.is_timestamp(column.type):
        per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[column.type.unit]
        values = column.cast(pa.int64()).to_pylist()
        if per_ms == 1:
            return values
        return [None if v is None else int(v // per_ms) for v in values]
    return column.cast(pa.int64()).to_pylist()


def _records_from_batch(
    batch: pa.RecordBatch, path: str, first_row: int, report: ErrorHandler
) -> Iterator[KafkaRecord]:
    """Column-wise conversion (much faster than row dicts), then one record per row."""
    columns = dict(zip(batch.schema.names, batch.columns, strict=True))
    count = batch.num_rows
    keys = columns["key"].to_pylist()
    values = columns["value"].to_pylist()
    topics = columns["topic"].to_pylist()
    partitions = columns["partition"].to_pylist()
    offsets = columns["offset"].to_pylist()
    nothing = [None] * count
    stamps = _timestamps_ms(columns["timestamp"]) if "timestamp" in columns else nothing
    headers = columns["headers"].to_pylist() if "headers" in columns else nothing
    for i in range(count):
        topic, partition, offset = topics[i], partitions[i], offsets[i]
        if topic is None or partition is None or offset is None:
            report(
                ExportError(
                    "topic, partition and offset must not be null",
                    path=path,
                    line=first_row + i + 1,
                    topic=topic,
                    partition=partition,
                    offset=offset,
                )
            )
            continue
        yield KafkaRecord(
            topic=topic,
            partition=partition,
            offset=offset,
            key=keys[i],
            value=values[i],
            timestamp_ms=stamps[i],
            headers=tuple((h["key"], h["value"]) for h in headers[i]) if headers[i] else (),
        )


def _read_avro(path: str, _compression: str, report: ErrorHandler) -> Iterator[KafkaRecord]:
    with _open_decompressed(path) as stream:
        for number, row in enumerate(fastavro.reader(stream), start=1):
            topic, partition, offset = (row.get(name) for name in ("topic", "partition", "offset"))
            if not isinstance(topic, str) or not _is_int(partition) or not _is_int(offset):
                report(
                    ExportError(
                        "topic, partition and offset must be present",
                        path=path,
                        line=number,
                        topic=topic if isinstance(topic, str) else None,
                    )
                )
                continue
            stamp = row.get("timestamp")
            if hasattr(stamp, "timestamp"):  # fastavro turns timestamp-millis into datetime
                stamp = round(stamp.timestamp() * 1000)
            yield KafkaRecord(
                topic=topic,
                partition=partition,
                offset=offset,
                key=row.get("key"),
                value=row.get("value"),
                timestamp_ms=stamp,
                headers=tuple((h["key"], h.get("value")) for h in row.get("headers") or ()),
            )


def decode_exports(
    paths: Iterable[str | os.PathLike],
    decoder: Decoder,
    *,
    on_error: Callable[[TicdcLakeError], None],
) -> Iterator[tuple[str, KafkaRecord, list[Event]]]:
    """(path, record, events) for every record that decodes; every unreadable line and every
    record that does not decode goes to `on_error` (an ExportError, or a DecodeError naming the
    file, topic, partition and offset), and decoding goes on with the next record."""
    for path, record in read_exports(paths, on_error=on_error):
        try:
            events = decoder.decode(record)
        except DecodeError as exc:
            on_error(exc.located(source_file=path))
            continue
        yield path, record, events


# ---------------------------------------------------------------------------------------------
# Writing


def export_file_name(stem: str, layout: str, file_compression: str = "none") -> str:
    """`stem` + the conventional suffix of `layout` and `file_compression`."""
    _check_choice(layout, FORMATS, "export format")
    _check_choice(file_compression, FILE_COMPRESSIONS, "file compression")
    return stem + _SUFFIX[layout] + _FILE_SUFFIX[file_compression]


def write_export(
    path: str | os.PathLike,
    records: Iterable[KafkaRecord],
    layout: str,
    *,
    file_compression: str = "none",
) -> int:
    """Write `records` to `path` in `layout`; returns the number written."""
    _check_choice(layout, FORMATS, "export format")
    _check_choice(file_compression, FILE_COMPRESSIONS, "file compression")
    path = os.fspath(path)
    writers = {
        "parquet": _write_parquet,
        "avro": _write_avro,
        "jsonl": _write_lines(_jsonl_line),
        "kcat": _write_lines(_kcat_line),
    }
    with _open_compressed(path, file_compression) as sink:
        return writers[layout](sink, records)


def _check_choice(value: str, choices: tuple[str, ...], what: str) -> None:
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, not {value!r}")


class _open_compressed:
    """A binary sink writing to `path`, compressed as a whole with gzip or zstd if asked."""

    def __init__(self, path: str, compression: str):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._raw = open(path, "wb")  # noqa: SIM115 - closed in __exit__
        if compression == "gz":
            self._sink = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6, mtime=0)
        elif compression == "zstd":
            self._sink = zstandard.ZstdCompressor(level=3).stream_writer(self._raw, closefd=False)
        else:
            self._sink = self._raw

    def __enter__(self) -> BinaryIO:
        return self._sink

    def __exit__(self, *exc_info) -> None:
        if self._sink is not self._raw:
            self._sink.close()
        self._raw.close()


def _write_lines(to_line: Callable[[KafkaRecord], bytes]):
    def write(sink: BinaryIO, records: Iterable[KafkaRecord]) -> int:
        count, chunk = 0, []
        for record in records:
            chunk.append(to_line(record))
            count += 1
            if len(chunk) >= 4096:
                sink.write(b"".join(chunk))
                chunk.clear()
        sink.write(b"".join(chunk))
        return count

    return write


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _jsonl_line(record: KafkaRecord) -> bytes:
    document: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "key_b64": _b64(record.key),
        "value_b64": _b64(record.value),
    }
    if record.headers:
        document["headers"] = [{"key": k, "value_b64": _b64(v)} for k, v in record.headers]
    return orjson.dumps(document, option=orjson.OPT_APPEND_NEWLINE)


def _kcat_text(data: bytes | None) -> str | None:
    """Bytes as kcat prints them: valid UTF-8 as text, other bytes raw (surrogate-escaped here)."""
    return None if data is None else data.decode("utf-8", "surrogateescape")


def _kcat_line(record: KafkaRecord) -> bytes:
    document: dict[str, Any] = {"topic": record.topic, "partition": record.partition}
    document["offset"] = record.offset
    if record.timestamp_ms is not None:
        document["tstype"] = "create"
        document["ts"] = record.timestamp_ms
    document["broker"] = -1
    if record.headers:
        document["headers"] = [
            item for name, value in record.headers for item in (name, _kcat_text(value))
        ]
    document["key"] = _kcat_text(record.key)
    document["payload"] = _kcat_text(record.value)
    try:
        return orjson.dumps(document, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        # orjson refuses lone surrogates; write those bytes raw, as kcat does.
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "surrogateescape") + b"\n"


def _arrow_batch(records: list[KafkaRecord]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([r.topic for r in records], pa.string()),
            pa.array([r.partition for r in records], pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array(
                [None if r.timestamp_ms is None else r.timestamp_ms * 1000 for r in records],
                SPARK_KAFKA_SCHEMA.field("timestamp").type,
            ),
            pa.array([0 if r.timestamp_ms is not None else -1 for r in records], pa.int32()),
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records],
                SPARK_KAFKA_SCHEMA.field("headers").type,
            ),
        ],
        schema=SPARK_KAFKA_SCHEMA,
    )


def _write_parquet(sink: BinaryIO, records: Iterable[KafkaRecord]) -> int:
    count = 0
    with pq.ParquetWriter(sink, SPARK_KAFKA_SCHEMA, compression="zstd") as writer:
        chunk: list[KafkaRecord] = []
        for record in records:
            chunk.append(record)
            if len(chunk) >= _BATCH_ROWS:
                writer.write_batch(_arrow_batch(chunk))
                count += len(chunk)
                chunk = []
        if chunk or count == 0:
            writer.write_batch(_arrow_batch(chunk))
            count += len(chunk)
    return count


def _write_avro(sink: BinaryIO, records: Iterable[KafkaRecord]) -> int:
    count = 0

    def rows():
        nonlocal count
        for record in records:
            count += 1
            yield {
                "key": record.key,
                "value": record.value,
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp_ms,
                "timestampType": None if record.timestamp_ms is None else 0,
                "headers": [{"key": k, "value": v} for k, v in record.headers] or None,
            }

    fastavro.writer(sink, fastavro.parse_schema(AVRO_CONTAINER_SCHEMA), rows(), codec="deflate")
    return count
