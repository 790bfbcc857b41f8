"""Kafka export files (DESIGN.md "Input"): read them into KafkaRecords, and write them.

Three layouts are read, each optionally gzip- or zstd-compressed as a whole file (recognised by
magic bytes, whatever the file is called):

- **parquet**: the Spark Kafka source schema (`key binary, value binary, topic string,
  partition int, offset long, timestamp timestamp, timestampType int,
  headers array<struct<key string, value binary>>`). An Avro container file with the same
  fields is read as well (`avro`).
- **jsonl**: one JSON object per line with `topic`, `partition`, `offset`, `timestamp` (ms),
  `key_b64`, `value_b64` (standard base64 or null) and optionally
  `headers: [{"key": ..., "value_b64": ...}]` and `timestamp_type` (Kafka's id: 0 CreateTime,
  1 LogAppendTime, -1 none).
- **kcat**: what `kcat -C -J` prints: `topic`, `partition`, `offset`, `tstype`, `ts`, `key`,
  `payload` (the bytes as JSON text; kcat writes bytes that are not UTF-8 as they are, and those
  are recovered exactly) and `headers` (`[name, value, ...]` or, with `-J --json-headers`,
  `{name: [value, ...]}`).

JSON Lines files may mix `jsonl` and `kcat` lines; each line is recognised by its fields.
Kafka's timestamp type is kept in `KafkaRecord.timestamp_type` where the layout says it
(Parquet/Avro `timestampType`, kcat `tstype`, jsonl `timestamp_type`), None otherwise.

The same rules serve the CLI (`read_export`, record by record) and the land stage's Spark data
source (`stages.export_source`), which uses the pieces: `detect_format`, `parse_json_line` for
one line, `open_parquet_export` + `missing_columns_error` + `parquet_batches` + `kafka_columns` to
check and convert a Parquet batch column-wise, `records_to_arrow`, and `CORRUPT_FILE_ERRORS`.

A malformed line or row never stops the file and is never dropped silently: it becomes an
`ExportError` (file, 1-based line or row number, reason, and the coordinates that could be
read) handed to the `on_error` callback; without a callback it is raised. A file that cannot be
read at all (missing, not an export) is reported the same way and reading moves on to the next
file. A file that breaks off (corrupt data, a gzip or zstd stream cut off) keeps the records
before the break, and its error gives the line or row it broke at, e.g. "jsonl file truncated:
gzip stream cut off after line 1234 (250000 bytes of decompressed data)" with `line` 1235 (a
compressed Parquet file has its footer at the end: nothing of it can be read).
"""

from __future__ import annotations

import base64
import binascii
import functools
import gzip
import io
import json
import os
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import fastavro
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import zstandard

from ticdc_lake.errors import MALFORMED_INPUT_ERRORS, TicdcLakeError, location_text
from ticdc_lake.limits import LimitExceededError, Limits
from ticdc_lake.records import KafkaRecord
from ticdc_lake.storage import S3Settings, is_object_uri, open_object

FORMATS = ("parquet", "jsonl", "kcat", "avro")
FILE_COMPRESSIONS = ("none", "gz", "zstd")

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PARQUET_MAGIC = b"PAR1"
_AVRO_MAGIC = b"Obj\x01"
_SUFFIX = {"parquet": ".parquet", "jsonl": ".jsonl", "kcat": ".kcat.jsonl", "avro": ".avro"}
_FILE_SUFFIX = {"none": "", "gz": ".gz", "zstd": ".zst"}
_BATCH_ROWS = 65_536
# A batch (one row group) also ends at this many value bytes: TiCDC batches many events in a
# message, and 65,536 such messages held ~1 GB while they were converted and compressed.
_BATCH_BYTES = 32 << 20
# Values read from a Parquet export's dictionaries are expanded this many bytes at a time, as
# Spark hands Arrow batches to Python (spark.sql.execution.arrow.maxBytesPerBatch).
EXPANDED_BATCH_BYTES = 64 << 20

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
_HEADERS_TYPE = SPARK_KAFKA_SCHEMA.field("headers").type
# Without these a Parquet file is not a Spark Kafka export (the others may be absent).
REQUIRED_COLUMNS = ("key", "value", "topic", "partition", "offset")
# Kafka's TimestampType ids, as Spark's Kafka source gives them (-1, "no timestamp type", is
# read as None).
CREATE_TIME, LOG_APPEND_TIME = 0, 1
_KCAT_TIMESTAMP_TYPES = {"create": CREATE_TIME, "logappend": LOG_APPEND_TIME}
_KCAT_TSTYPE_NAMES = {number: name for name, number in _KCAT_TIMESTAMP_TYPES.items()}
_INT32_MAX = 2**31 - 1

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
CORRUPT_FILE_ERRORS = (
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


class StreamCutOff(EOFError):
    """A gzip or zstd file that ends inside a member or frame: the export was cut off.
    `decompressed` bytes came out of it before the break."""

    def __init__(self, compression: str, decompressed: int):
        self.compression = compression
        self.decompressed = decompressed
        name = "gzip" if compression == "gz" else compression
        super().__init__(f"{name} stream cut off after {decompressed} bytes of decompressed data")


class _Decompressed(io.RawIOBase):
    """The content of a gzip or zstd file of one or more members/frames. Unlike GzipFile and
    zstandard's stream reader it knows how much came out, and a file ending inside a frame
    raises StreamCutOff (zstandard's reader just ends there: a cut-off file read as empty).

    Each step's output is bounded, whatever the ratio: gzip's by ``max_length``, zstd's (whose
    decompressobj has none) by feeding it few bytes at a time, since a zstd block of four
    bytes can expand to 128 KiB (so 256 bytes make at most 8 MiB)."""

    _INPUT_BYTES = 128 << 10
    _GZIP_OUTPUT_BYTES = 1 << 20
    _ZSTD_STEP_BYTES = 256

    def __init__(self, raw: BinaryIO, compression: str):
        self._raw = raw
        self._compression = compression
        self._zstd = zstandard.ZstdDecompressor() if compression == "zstd" else None
        self._frame = None  # the decompressor of the member/frame being read
        self._input = memoryview(b"")
        self._output = memoryview(b"")
        self.decompressed = 0

    def readable(self) -> bool:
        return True

    def _new_frame(self):
        if self._zstd is not None:
            return self._zstd.decompressobj()
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    def _step(self) -> bytes:
        """Decompress some of the input; what is left stays in ``self._input``."""
        if self._zstd is None:
            output = self._frame.decompress(self._input, self._GZIP_OUTPUT_BYTES)
            rest = self._frame.unconsumed_tail
        else:
            step, rest = self._input[: self._ZSTD_STEP_BYTES], self._input[self._ZSTD_STEP_BYTES :]
            output = self._frame.decompress(step)
        if self._frame.eof:
            # The next member/frame starts in what this one did not use.
            rest, self._frame = self._frame.unused_data + bytes(rest), None
        self._input = memoryview(rest)
        return output

    def readinto(self, buffer) -> int:
        while not self._output:
            if not self._input:
                self._input = memoryview(self._raw.read(self._INPUT_BYTES))
            if self._frame is None and self._compression == "gz":
                # gzip allows zero padding at the end
                self._input = memoryview(bytes(self._input).lstrip(b"\0"))
            if not self._input:
                if self._frame is not None:
                    raise StreamCutOff(self._compression, self.decompressed)
                return 0
            if self._frame is None:
                self._frame = self._new_frame()
            self._output = memoryview(self._step())
        count = min(len(buffer), len(self._output))
        buffer[:count] = self._output[:count]
        self._output = self._output[count:]
        self.decompressed += count
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_regular(path: str, s3: S3Settings | None = None) -> BinaryIO:
    """``path`` opened for reading if it is a regular file. A device, FIFO or socket (put where
    a listed export was) is an OSError, found before opening it and checked again on what was
    opened; O_NONBLOCK keeps a FIFO swapped in between from blocking the open. An ``s3://``
    object is opened on the store ``s3`` describes."""
    if is_object_uri(path):  # buffered: pyarrow's files read no lines themselves
        return io.BufferedReader(open_object(path, s3), buffer_size=1 << 20)
    _check_regular(path, os.stat(path).st_mode)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _check_regular(path, os.fstat(descriptor).st_mode)
    except OSError:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "rb")


def _check_regular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a device, FIFO or socket"
        raise OSError(f"{path} is {kind}, not a regular file; it was not read")


def _open_decompressed(path: str, s3: S3Settings | None = None) -> BinaryIO:
    """A binary stream of the file's content, gzip or zstd undone (told by magic bytes)."""
    raw = open_regular(path, s3)
    compression = sniff(raw.read(4))
    raw.seek(0)
    if compression is None:
        return raw
    return io.BufferedReader(_Decompressed(raw, compression), buffer_size=1 << 20)


def detect_format(path: str | os.PathLike, s3: S3Settings | None = None) -> tuple[str, str]:
    """(layout, file compression) of an export file, from its bytes, not its name."""
    path = os.fspath(path)
    with open_regular(path, s3) as raw:
        compression = sniff(raw.read(4)) or "none"
    with _open_decompressed(path, s3) as stream:
        head = stream.read(4)
    if head.startswith(_PARQUET_MAGIC):
        return "parquet", compression
    if head.startswith(_AVRO_MAGIC):
        return "avro", compression
    return "jsonl", compression


# ---------------------------------------------------------------------------------------------
# Reading


def read_exports(
    paths: Iterable[str | os.PathLike],
    *,
    on_error: ErrorHandler | None = None,
    limits: Limits | None = None,
) -> Iterator[tuple[str, KafkaRecord]]:
    """(path, record) for every record of every file, in file order."""
    for path in paths:
        path = os.fspath(path)
        for record in read_export(path, on_error=on_error, limits=limits):
            yield path, record


def read_export(
    path: str | os.PathLike,
    *,
    on_error: ErrorHandler | None = None,
    limits: Limits | None = None,
    s3: S3Settings | None = None,
) -> Iterator[KafkaRecord]:
    """The records of one export file; bad lines and an unreadable file go to `on_error`.
    A JSON Lines line longer than ``limits.max_export_line_bytes`` is such a bad line, a
    Parquet row group past ``max_parquet_row_group_bytes`` such bad rows. An ``s3://`` file
    is read from the store ``s3`` describes."""
    path = os.fspath(path)
    report = on_error or _raise
    try:
        layout, compression = detect_format(path, s3)
    except CORRUPT_FILE_ERRORS as exc:
        report(ExportError(f"cannot open export file: {exc}", path=path))
        return
    limits = limits or Limits()
    max_line = limits.max_export_line_bytes
    readers = {
        "parquet": functools.partial(_read_parquet, limits=limits, s3=s3),
        "avro": functools.partial(_read_avro, s3=s3),
        "jsonl": functools.partial(_read_json_lines, max_line=max_line, s3=s3),
    }
    progress = _Progress()
    try:
        yield from readers[layout](path, compression, report, progress)
    except CORRUPT_FILE_ERRORS as exc:
        # Corrupt or truncated files end here; the records already yielded stay valid.
        report(broken_file_error(path, layout, exc, progress.unit, progress.done))


@dataclass
class _Progress:
    """How far a reader got: `done` whole lines (JSON Lines) or rows (Parquet, Avro)."""

    unit: str = "row"
    done: int = 0


def broken_file_error(
    path: str, layout: str, exc: BaseException, unit: str = "row", done: int | None = None
) -> ExportError:
    """The error of a file that broke off after `done` whole lines/rows (None: before any
    could be read, e.g. a Parquet file, whose footer is at its end); `line` is where it broke."""
    if done is None:
        where, line = "", None
    else:
        where, line = f" after {unit} {done}", done + 1
    if isinstance(exc, StreamCutOff):
        name = "gzip" if exc.compression == "gz" else exc.compression
        reason = (
            f"{layout} file truncated: {name} stream cut off{where}"
            f" ({exc.decompressed} bytes of decompressed data)"
        )
        if done is None:
            reason += ": no row can be read without the file's end"
    else:
        reason = f"{layout} file is corrupt or truncated{where}: {exc}"
    return ExportError(reason, path=path, line=line)


def _read_json_lines(
    path: str,
    _compression: str,
    report: ErrorHandler,
    progress: _Progress,
    *,
    max_line: int,
    s3: S3Settings | None,
) -> Iterator[KafkaRecord]:
    progress.unit = "line"
    with _open_decompressed(path, s3) as stream:
        for number, line in enumerate(bounded_lines(stream, max_line), start=1):
            progress.done = number
            if isinstance(line, LongLine):
                report(line.error(path=path, number=number, limit=max_line))
                continue
            if line.isspace():
                continue
            item = parse_json_line(line, path=path, number=number)
            if isinstance(item, ExportError):
                report(item)
            else:
                yield item


# A line is read in pieces of at most this: a line past the limit never gets allocated whole.
_LINE_PIECE = 1 << 20
# What an over-long line's error keeps of it (its coordinates are usually in there).
LONG_LINE_HEAD = 4096


@dataclass(frozen=True)
class LongLine:
    """A line longer than the limit, read through but not kept: its length and first bytes."""

    length: int  # bytes, its newline included
    head: bytes

    def error(self, *, path: str, number: int, limit: int) -> ExportError:
        what = f"line {number} ({self.length:,} bytes)"
        reason = LimitExceededError(what, "max_export_line_bytes", limit).reason
        return ExportError(
            f"{reason}; the line was skipped, its first {len(self.head):,} bytes are kept",
            path=path,
            line=number,
            raw=self.head,
        )


def bounded_lines(stream: BinaryIO, max_bytes: int) -> Iterator[bytes | LongLine]:
    """The lines of ``stream`` (newline included); a line longer than ``max_bytes`` comes as a
    LongLine. Memory stays about ``max_bytes``, however long a line is."""
    piece = min(_LINE_PIECE, max_bytes + 1)
    while True:
        line = stream.readline(piece)
        if not line:
            return
        if len(line) == piece and not line.endswith(b"\n"):
            yield _rest_of_line(stream, line, max_bytes)
        elif len(line) > max_bytes:
            yield LongLine(len(line), line[:LONG_LINE_HEAD])
        else:
            yield line


def _rest_of_line(stream: BinaryIO, first: bytes, max_bytes: int) -> bytes | LongLine:
    """A line read on from its first piece: whole if it is within ``max_bytes``, else read to
    its end keeping only its head. (Pieces are joined once at the end: a growing buffer would
    be copied as it grows.)"""
    pieces, length = [first], len(first)
    while length <= max_bytes and not pieces[-1].endswith(b"\n"):
        piece = stream.readline(min(_LINE_PIECE, max_bytes + 1 - length))
        if not piece:
            break
        pieces.append(piece)
        length += len(piece)
    if length <= max_bytes:
        return b"".join(pieces)
    # The first piece is min(1 MiB, max_bytes + 1) long: the head is in it but for tiny limits.
    head = (first if len(first) >= LONG_LINE_HEAD else b"".join(pieces))[:LONG_LINE_HEAD]
    ended = pieces[-1].endswith(b"\n")
    del pieces
    while not ended:
        piece = stream.readline(_LINE_PIECE)
        if not piece:
            break
        length, ended = length + len(piece), piece.endswith(b"\n")
    return LongLine(length, head)


def parse_json_line(line: bytes, *, path: str, number: int) -> KafkaRecord | ExportError:
    """One line of a JSON Lines export (``jsonl`` or kcat, told by its fields): its record,
    or the ExportError saying why it is not one (with the raw line and whatever coordinates
    could be read). ``number`` is the line's 1-based number in ``path``."""
    try:
        return _record_from_json_line(line)
    except _BadLine as bad:
        return ExportError(
            bad.reason,
            path=path,
            line=number,
            topic=bad.fields.get("topic"),
            partition=bad.fields.get("partition"),
            offset=bad.fields.get("offset"),
            raw=line,
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
    try:
        if "value_b64" in document or "key_b64" in document:
            return _record_from_b64_object(document)
        if "payload" in document or "payload_error" in document:
            return _record_from_kcat_object(document)
    except _BadLine as bad:
        raise _BadLine(bad.reason, _coordinates(document)) from None
    raise _BadLine(
        "expected key_b64/value_b64 (JSON Lines export) or payload (kcat -J); "
        f"found fields {sorted(document)}",
        _coordinates(document),
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


# The checks below run once or more per line of every JSON Lines export: `type(x) is int`
# (JSON gives exact ints; it also rules out bools) and no helper calls on the good path.


def _require_coordinates(document: dict) -> tuple[str, int, int]:
    topic, partition, offset = (
        document.get("topic"),
        document.get("partition"),
        document.get("offset"),
    )
    if type(topic) is not str:
        raise _BadLine(f"`topic` must be a string, found {topic!r}")
    if type(partition) is not int or not 0 <= partition < 2**31:
        raise _BadLine(f"`partition` must be an integer in [0, 2^31), found {partition!r}")
    if type(offset) is not int or not 0 <= offset < 2**63:
        raise _BadLine(f"`offset` must be an integer in [0, 2^63), found {offset!r}")
    return topic, partition, offset


def _optional_int(document: dict, name: str) -> int | None:
    value = document.get(name)
    if value is not None and type(value) is not int:
        raise _BadLine(f"`{name}` must be an integer or null, found {value!r}")
    return value


def _timestamp_type(value: int | None) -> int | None:
    if value is not None and value not in (-1, CREATE_TIME, LOG_APPEND_TIME):
        raise _BadLine(f"`timestamp_type` must be -1, 0 or 1 (Kafka's ids), found {value}")
    return None if value == -1 else value


def _b64_field(document: dict, name: str) -> bytes | None:
    value = document.get(name)
    if value is None:
        return None
    if type(value) is not str:
        raise _BadLine(f"`{name}` must be a base64 string or null, found {type(value).__name__}")
    try:
        # base64.b64decode(validate=True) without its wrapper; strict: only canonical base64.
        return binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise _BadLine(f"`{name}` is not valid base64: {exc}") from None


def _record_from_b64_object(document: dict) -> KafkaRecord:
    """A `jsonl` line: base64 key and value, timestamp in ms."""
    topic, partition, offset = _require_coordinates(document)
    headers = document.get("headers")
    parsed_headers = ()
    if headers:
        if not isinstance(headers, list):
            raise _BadLine("`headers` must be a list of {key, value_b64} objects")
        parsed = []
        for header in headers:
            if not isinstance(header, dict) or not isinstance(header.get("key"), str):
                raise _BadLine(f"header {header!r} is not a {{key, value_b64}} object")
            parsed.append((header["key"], _b64_field(header, "value_b64")))
        parsed_headers = tuple(parsed)
    stamp_type = document.get("timestamp_type")
    return KafkaRecord(
        topic,
        partition,
        offset,
        _b64_field(document, "key_b64"),
        _b64_field(document, "value_b64"),
        _optional_int(document, "timestamp"),
        parsed_headers,
        None if stamp_type is None else _timestamp_type(_optional_int(document, "timestamp_type")),
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


def _kcat_timestamp_type(tstype: Any) -> int | None:
    return _KCAT_TIMESTAMP_TYPES.get(tstype) if isinstance(tstype, str) else None


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
        timestamp_type=_kcat_timestamp_type(document.get("tstype")),
    )


def open_parquet_export(
    path: str, compression: str, limits: Limits | None = None, s3: S3Settings | None = None
) -> pq.ParquetFile:
    """A Parquet export file; a whole-file-compressed one is unpacked in memory (Parquet needs
    random access), up to ``limits.max_unpacked_parquet_bytes`` (an ExportError past it).
    Raises what CORRUPT_FILE_ERRORS lists for a file that cannot be read."""
    if compression == "none":
        return _parquet_file(parquet_source(path, s3))
    limit = (limits or Limits()).max_unpacked_parquet_bytes
    content = bytearray()
    with _open_decompressed(path, s3) as stream:
        while piece := stream.read(min(1 << 20, limit + 1 - len(content))):
            content += piece
            if len(content) > limit:
                what = f"a Parquet export compressed as a whole file ({compression}), unpacked,"
                reason = LimitExceededError(what, "max_unpacked_parquet_bytes", limit).reason
                raise ExportError(reason, path=path)
    return _parquet_file(pa.py_buffer(content))


def parquet_source(path: str, s3: S3Settings | None = None) -> str | pa.NativeFile:
    """What pyarrow's Parquet reader opens for ``path``: a local path as it is (read natively),
    an ``s3://`` object opened for random access on the store ``s3`` describes."""
    return open_object(path, s3) if is_object_uri(path) else path


def _parquet_file(source: str | pa.Buffer | pa.NativeFile) -> pq.ParquetFile:
    """The file with its string and binary columns read as dictionaries: a dictionary can
    repeat one large value for every row, so values are expanded batch by batch, within a byte
    budget (``parquet_batches``), not when read."""

    # INT96 (Spark's default for timestamps) in µs: as nanoseconds it overflows past 2262.
    def opened(**options) -> pq.ParquetFile:
        reader = pa.BufferReader(source) if isinstance(source, pa.Buffer) else source
        return pq.ParquetFile(reader, coerce_int96_timestamp_unit="us", **options)

    plain = opened()
    schema = plain.schema  # the leaves' descriptors, not the row groups' column metadata
    leaves = (schema.column(index) for index in range(len(schema)))
    byte_arrays = [leaf.path for leaf in leaves if leaf.physical_type == "BYTE_ARRAY"]
    if not byte_arrays:
        return plain
    return opened(metadata=plain.metadata, read_dictionary=byte_arrays)  # the footer read once


def parquet_batches(
    parquet: pq.ParquetFile,
    path: str,
    *,
    batch_rows: int,
    groups: Sequence[int] | None = None,
    limits: Limits | None = None,
) -> Iterator[tuple[int, int, pa.RecordBatch | ExportError]]:
    """(first row, rows, batch) over the Spark Kafka columns of row groups ``groups`` (default:
    all), in order. A row group larger than ``limits.max_parquet_row_group_bytes``
    uncompressed, as the footer gives it, is not read: it is (first row, rows, ExportError
    naming them). Its column chunks would be read whole, and a few MB of zstd can hold
    gigabytes."""
    metadata = parquet.metadata
    wanted = [name for name in SPARK_KAFKA_SCHEMA.names if name in parquet.schema_arrow.names]
    limit = (limits or Limits()).max_parquet_row_group_bytes
    starts = [0]
    for group in range(metadata.num_row_groups):
        starts.append(starts[-1] + metadata.row_group(group).num_rows)
    for group in range(metadata.num_row_groups) if groups is None else groups:
        # The row group's size, not its chunks': pyarrow aborts the process on some corrupt
        # column chunk metadata, which its reader reports as an error.
        first, size = starts[group], metadata.row_group(group).total_byte_size
        if size > limit:
            what = f"row group {group} (rows {first + 1:,}-{starts[group + 1]:,}) uncompressed"
            reason = LimitExceededError(what, "max_parquet_row_group_bytes", limit, size).reason
            yield first, starts[group + 1] - first, ExportError(reason, path=path, line=first + 1)
            continue
        for batch in parquet.iter_batches(
            batch_size=batch_rows, row_groups=[group], columns=wanted
        ):
            for piece in expanded_batches(batch, EXPANDED_BATCH_BYTES):
                yield first, piece.num_rows, piece
                first += piece.num_rows


def expanded_batches(batch: pa.RecordBatch, budget: int) -> Iterator[pa.RecordBatch]:
    """``batch`` with its dictionary-encoded columns expanded, in slices whose expanded values
    take about ``budget`` bytes (a slice of one row when that row alone takes more)."""
    dense = pa.schema([field.with_type(_dense_type(field.type)) for field in batch.schema])
    if dense == batch.schema or batch.num_rows == 0:
        yield batch.cast(dense)
        return
    ends = np.cumsum(_summed_bytes(batch.columns, batch.num_rows))
    start = 0
    while start < batch.num_rows:
        before = ends[start - 1] if start else 0
        end = max(start + 1, int(np.searchsorted(ends, before + budget, side="right")))
        yield batch.slice(start, end - start).cast(dense)
        start = end


def _dense_type(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(kind):
        return kind.value_type
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_dense_type(kind.value_type)))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_dense_type(kind.value_type)))
    if pa.types.is_map(kind):
        return pa.map_(_dense_type(kind.key_type), _dense_type(kind.item_type))
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_dense_type(field.type)) for field in kind])
    return kind


def _summed_bytes(arrays: Iterable[pa.Array], rows: int) -> np.ndarray:
    """Per row, the bytes the arrays' dictionary-encoded values take once expanded."""
    return sum((_dictionary_bytes(array) for array in arrays), np.zeros(rows, np.int64))


def _dictionary_bytes(array: pa.Array) -> np.ndarray:
    """Per element of ``array``, its dictionary-encoded values' expanded bytes, at any depth."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        lengths = pc.binary_length(array.dictionary).take(array.indices)
        return pc.fill_null(lengths, 0).to_numpy().astype(np.int64)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        # From the offsets (pc.list_parent_indices aborts the process on a map), counting the
        # elements behind null lists too.
        offsets = array.offsets.to_numpy().astype(np.int64)
        elements = array.values.slice(offsets[0], offsets[-1] - offsets[0])
        inner = np.concatenate(([0], np.cumsum(_dictionary_bytes(elements))))
        return inner[offsets[1:] - offsets[0]] - inner[offsets[:-1] - offsets[0]]
    if pa.types.is_struct(kind):
        return _summed_bytes(array.flatten(), len(array))
    return np.zeros(len(array), np.int64)


def missing_columns_error(parquet: pq.ParquetFile, path: str) -> ExportError | None:
    """The file-wide error of a Parquet file that lacks a Spark Kafka column, or None."""
    names = set(parquet.schema_arrow.names)
    missing = [name for name in REQUIRED_COLUMNS if name not in names]
    if not missing:
        return None
    return ExportError(
        f"not a Spark Kafka export: missing column(s) {', '.join(missing)}", path=path
    )


@dataclass(frozen=True)
class KafkaColumns:
    """One batch of Spark-Kafka rows, checked and converted column-wise.

    ``records``: the rows that are Kafka records, as ``SPARK_KAFKA_SCHEMA`` (timestamps UTC
    microseconds; ``timestampType`` null where the file has none or says -1); ``rows``: each
    one's 0-based row number in the file; ``errors``: the other rows, one ExportError each
    (``line`` = row number + 1), or one for the whole batch when its columns are not of the
    Spark Kafka types."""

    records: pa.RecordBatch
    rows: pa.Array
    errors: list[ExportError]


def kafka_columns(batch: pa.RecordBatch, *, path: str, first_row: int) -> KafkaColumns:
    """``batch`` (Parquet rows ``first_row``.. of ``path``; any subset of the Spark Kafka
    columns, absent ones read as null) as KafkaColumns."""
    columns = dict(zip(batch.schema.names, batch.columns, strict=True))
    count = batch.num_rows
    rows = pa.array(range(first_row, first_row + count), pa.int64())
    try:
        converted = {
            "topic": _as_string(columns.get("topic"), count),
            "partition": _cast(columns.get("partition"), pa.int64(), count),
            "offset": _cast(columns.get("offset"), pa.int64(), count),
            "timestamp": _timestamps(columns.get("timestamp"), count),
            "timestampType": _timestamp_types(columns.get("timestampType"), count),
            "key": _cast(columns.get("key"), pa.binary(), count),
            "value": _cast(columns.get("value"), pa.binary(), count),
            "headers": _cast(columns.get("headers"), _HEADERS_TYPE, count),
        }
    except pa.ArrowException as exc:
        # Columns of unexpected types: these rows cannot be records; say which and why.
        reason = f"rows {first_row + 1}-{first_row + count}: columns not of the Spark Kafka "
        error = ExportError(reason + f"export types: {exc}", path=path, line=first_row + 1)
        return KafkaColumns(records_to_arrow([]), pa.array([], pa.int64()), [error])
    topic, partition, offset = (converted[n] for n in ("topic", "partition", "offset"))
    valid = pc.fill_null(
        pc.and_(
            pc.and_(pc.is_valid(topic), pc.greater_equal(offset, 0)),
            pc.and_(pc.greater_equal(partition, 0), pc.less_equal(partition, _INT32_MAX)),
        ),
        False,
    )
    kept = pc.sum(valid).as_py() or 0
    errors = []
    if kept < count:
        bad = pc.invert(valid)
        errors = [
            _bad_row(path, row, t, p, o)
            for row, t, p, o in zip(
                *(pc.filter(a, bad).to_pylist() for a in (rows, topic, partition, offset)),
                strict=True,
            )
        ]
    if kept < count:
        converted = {name: pc.filter(array, valid) for name, array in converted.items()}
        rows = pc.filter(rows, valid)
    arrays = [converted[f.name].cast(f.type) for f in SPARK_KAFKA_SCHEMA]
    records = pa.RecordBatch.from_arrays(arrays, schema=SPARK_KAFKA_SCHEMA)
    return KafkaColumns(records, rows, errors)


# Why a Parquet row is not a record (the first two end with the value found).
NULL_COORDINATES = "topic, partition and offset must not be null"
PARTITION_OUT_OF_RANGE = "`partition` must be in [0, 2^31), found "
NEGATIVE_OFFSET = "`offset` must not be negative, found "


def _bad_row(path: str, row: int, topic, partition, offset) -> ExportError:
    reason = NULL_COORDINATES
    if partition is not None and not 0 <= partition <= _INT32_MAX:
        reason, partition = f"{PARTITION_OUT_OF_RANGE}{partition}", None
    elif offset is not None and offset < 0:
        reason, offset = f"{NEGATIVE_OFFSET}{offset}", None
    return ExportError(
        reason, path=path, line=row + 1, topic=topic, partition=partition, offset=offset
    )


def _cast(column: pa.Array | None, target: pa.DataType, count: int) -> pa.Array:
    return pa.nulls(count, target) if column is None else column.cast(target)


def _as_string(column: pa.Array | None, count: int) -> pa.Array:
    if column is not None and pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return _cast(column, pa.string(), count)


def _timestamps(column: pa.Array | None, count: int) -> pa.Array:
    """UTC microseconds; integer columns are milliseconds; a zone-less timestamp is UTC."""
    target = SPARK_KAFKA_SCHEMA.field("timestamp").type
    if column is None:
        return pa.nulls(count, target)
    if pa.types.is_timestamp(column.type):
        if column.type.tz is None:
            column = column.cast(pa.timestamp(column.type.unit, tz="UTC"))
        return column.cast(target, safe=False)  # ns → µs truncates
    return micros_as_timestamps(pc.multiply(column.cast(pa.int64()), 1000))


def micros_as_timestamps(micros: pa.Array) -> pa.Array:
    return micros.cast(pa.timestamp("us")).cast(SPARK_KAFKA_SCHEMA.field("timestamp").type)


def _timestamp_types(column: pa.Array | None, count: int) -> pa.Array:
    types = _cast(column, pa.int32(), count)
    return pc.if_else(pc.equal(types, -1), pa.scalar(None, pa.int32()), types)


def records_from_arrow(batch: pa.RecordBatch) -> Iterator[KafkaRecord]:
    """KafkaRecords of a ``SPARK_KAFKA_SCHEMA`` batch whose coordinates are all set."""
    columns = {name: batch.column(name).to_pylist() for name in SPARK_KAFKA_SCHEMA.names}
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    for i in range(batch.num_rows):
        headers = columns["headers"][i]
        yield KafkaRecord(
            topic=columns["topic"][i],
            partition=columns["partition"][i],
            offset=columns["offset"][i],
            key=columns["key"][i],
            value=columns["value"][i],
            timestamp_ms=None if micros[i] is None else micros[i] // 1000,
            headers=tuple((h["key"], h["value"]) for h in headers) if headers else (),
            timestamp_type=columns["timestampType"][i],
        )


def records_to_arrow(records: Sequence[KafkaRecord]) -> pa.RecordBatch:
    """``records`` as a ``SPARK_KAFKA_SCHEMA`` batch (``timestampType`` null where unknown)."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([r.topic for r in records], pa.string()),
            pa.array([r.partition for r in records], pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            micros_as_timestamps(
                pa.array(
                    [None if r.timestamp_ms is None else r.timestamp_ms * 1000 for r in records],
                    pa.int64(),
                )
            ),
            pa.array([r.timestamp_type for r in records], pa.int32()),
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records], _HEADERS_TYPE
            ),
        ],
        schema=SPARK_KAFKA_SCHEMA,
    )


def _read_parquet(
    path: str,
    compression: str,
    report: ErrorHandler,
    progress: _Progress,
    *,
    limits: Limits,
    s3: S3Settings | None,
) -> Iterator[KafkaRecord]:
    try:
        parquet = open_parquet_export(path, compression, limits, s3)
    except ExportError as error:
        report(error)
        return
    except CORRUPT_FILE_ERRORS as exc:
        report(broken_file_error(path, "parquet", exc))
        return
    missing = missing_columns_error(parquet, path)
    if missing is not None:
        report(missing)
        return
    for row, rows, batch in parquet_batches(parquet, path, batch_rows=_BATCH_ROWS, limits=limits):
        if isinstance(batch, ExportError):
            report(batch)
            progress.done = row + rows
            continue
        checked = kafka_columns(batch, path=path, first_row=row)
        # Errors are reported where their rows stand among the records.
        errors = iter(checked.errors)
        error = next(errors, None)
        for number, record in zip(
            checked.rows.to_pylist(), records_from_arrow(checked.records), strict=True
        ):
            while error is not None and error.line <= number:
                report(error)
                error = next(errors, None)
            yield record
        if error is not None:
            report(error)
        for error in errors:
            report(error)
        progress.done = row + rows


def _read_avro(
    path: str,
    _compression: str,
    report: ErrorHandler,
    progress: _Progress,
    *,
    s3: S3Settings | None,
) -> Iterator[KafkaRecord]:
    with _open_decompressed(path, s3) as stream:
        for number, row in enumerate(fastavro.reader(stream), start=1):
            progress.done = number
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
            stamp_type = row.get("timestampType")
            yield KafkaRecord(
                topic=topic,
                partition=partition,
                offset=offset,
                key=row.get("key"),
                value=row.get("value"),
                timestamp_ms=stamp,
                headers=tuple((h["key"], h.get("value")) for h in row.get("headers") or ()),
                timestamp_type=stamp_type if _is_int(stamp_type) and stamp_type >= 0 else None,
            )


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
    if record.timestamp_type is not None:
        document["timestamp_type"] = record.timestamp_type
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
        document["tstype"] = _KCAT_TSTYPE_NAMES.get(record.timestamp_type, "create")
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


def _spark_like(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Spark's Kafka source always says a timestamp type: CreateTime (what TiCDC's producer
    sets) unless the record says otherwise, -1 for a record without a timestamp."""
    types = batch.column("timestampType")
    default = pc.if_else(batch.column("timestamp").is_valid(), 0, -1).cast(pa.int32())
    index = SPARK_KAFKA_SCHEMA.get_field_index("timestampType")
    return batch.set_column(index, "timestampType", pc.coalesce(types, default))


def _write_parquet(sink: BinaryIO, records: Iterable[KafkaRecord]) -> int:
    count = 0
    with pq.ParquetWriter(sink, SPARK_KAFKA_SCHEMA, compression="zstd") as writer:
        chunk: list[KafkaRecord] = []
        size = 0
        for record in records:
            chunk.append(record)
            size += len(record.value or b"")
            if len(chunk) >= _BATCH_ROWS or size >= _BATCH_BYTES:
                writer.write_batch(_spark_like(records_to_arrow(chunk)))
                count += len(chunk)
                chunk, size = [], 0
        if chunk or count == 0:
            writer.write_batch(_spark_like(records_to_arrow(chunk)))
            count += len(chunk)
    return count


def _avro_timestamp_type(record: KafkaRecord) -> int | None:
    if record.timestamp_type is not None:
        return record.timestamp_type
    return None if record.timestamp_ms is None else CREATE_TIME


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
                "timestampType": _avro_timestamp_type(record),
                "headers": [{"key": k, "value": v} for k, v in record.headers] or None,
            }

    fastavro.writer(sink, fastavro.parse_schema(AVRO_CONTAINER_SCHEMA), rows(), codec="deflate")
    return count
