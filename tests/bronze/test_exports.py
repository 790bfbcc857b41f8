"""Kafka export files: every layout and compression round-trips; bad lines are reported."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import io
import itertools
import os
import random
import socket
import subprocess
import sys
import threading

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from ticdc_lake.bronze import exports
from ticdc_lake.bronze.exports import ExportError, read_export, write_export
from ticdc_lake.limits import Limits
from ticdc_lake.records import KafkaRecord

RECORDS = [
    KafkaRecord("t", 0, 0, None, b'{"plain": "json \xc3\xa9"}', 1_700_000_000_000, (), 0),
    # LogAppendTime: the broker's clock.
    KafkaRecord("t", 1, 7, b"\x00\x01key", bytes(range(256)), 1_700_000_000_001, (), 1),
    KafkaRecord("t", 0, 1, b"k", None, None),  # a tombstone without a timestamp
    KafkaRecord("other", 2, 2**40, b"", b"", 5, (("h1", b"\xff\x00"), ("h2", None)), 0),
]


def collect(path):
    errors: list[ExportError] = []
    return list(read_export(path, on_error=errors.append)), errors


@pytest.mark.parametrize("compression", exports.FILE_COMPRESSIONS)
@pytest.mark.parametrize("layout", exports.FORMATS)
def test_every_layout_and_compression_round_trips(tmp_path, layout, compression):
    path = tmp_path / exports.export_file_name("x", layout, compression)
    assert write_export(path, RECORDS, layout, file_compression=compression) == len(RECORDS)
    assert collect(path) == (RECORDS, [])
    assert exports.detect_format(path) == ("jsonl" if layout == "kcat" else layout, compression)


def test_compression_is_told_by_magic_bytes_not_the_name(tmp_path):
    misnamed = tmp_path / "records.json"  # really zstd-compressed Parquet
    write_export(misnamed, RECORDS, "parquet", file_compression="zstd")
    assert exports.detect_format(misnamed) == ("parquet", "zstd")
    assert collect(misnamed) == (RECORDS, [])


def test_parquet_has_the_spark_kafka_source_schema(tmp_path):
    path = tmp_path / "x.parquet"
    write_export(path, RECORDS, "parquet")
    schema = pq.read_schema(path)
    assert schema.names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("headers").type.value_type == pa.struct(
        [("key", pa.string()), ("value", pa.binary())]
    )


def test_parquet_from_another_writer_with_ms_timestamps_and_no_headers(tmp_path):
    path = tmp_path / "spark.parquet"
    table = pa.table(
        {
            "key": pa.array([None], pa.binary()),
            "value": pa.array([b"v"], pa.binary()),
            "topic": ["t"],
            "partition": pa.array([3], pa.int32()),
            "offset": pa.array([9], pa.int64()),
            "timestamp": pa.array([1_700_000_000_123], pa.timestamp("ms")),
        }
    )
    pq.write_table(table, path)
    assert collect(path) == ([KafkaRecord("t", 3, 9, None, b"v", 1_700_000_000_123)], [])


def test_parquet_rows_without_coordinates_are_reported_with_their_row(tmp_path):
    path = tmp_path / "holes.parquet"
    table = pa.table(
        {
            "key": pa.array([None, None, None], pa.binary()),
            "value": pa.array([b"a", b"b", b"c"], pa.binary()),
            "topic": ["t", "t", None],
            "partition": pa.array([0, None, 0], pa.int32()),
            "offset": pa.array([1, 2, 3], pa.int64()),
        }
    )
    pq.write_table(table, path)
    records, errors = collect(path)
    assert [r.value for r in records] == [b"a"]
    assert [(e.line, e.offset) for e in errors] == [(2, 2), (3, 3)]
    assert all("must not be null" in e.reason for e in errors)


def test_parquet_without_the_kafka_columns_is_a_file_error(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    records, errors = collect(path)
    assert records == []
    assert len(errors) == 1
    assert errors[0].line is None
    assert "missing column(s) key, value, topic, partition, offset" in str(errors[0])


def b64_line(partition, offset, value: bytes, **extra) -> bytes:
    document = {
        "topic": "t",
        "partition": partition,
        "offset": offset,
        "timestamp": 1,
        "key_b64": None,
        "value_b64": base64.b64encode(value).decode(),
    }
    return orjson.dumps(document | extra) + b"\n"


def test_malformed_lines_are_reported_not_dropped_and_the_file_goes_on(tmp_path):
    lines = [
        b64_line(0, 1, b"first"),
        b"{not json\n",
        b64_line(0, 2, b"", value_b64="***"),
        b'{"topic": "t", "partition": 1, "value_b64": ""}\n',
        b"[1, 2, 3]\n",
        b"\n",  # blank lines hold no record
        b'{"topic": "t", "partition": 0, "offset": 3, "something": "else"}\n',
        b64_line(0, 4, b"last"),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(lines))
    records, errors = collect(path)
    assert [r.value for r in records] == [b"first", b"last"]
    assert [e.line for e in errors] == [2, 3, 4, 5, 7]
    assert errors[0].raw == b"{not json\n"
    assert (errors[1].partition, errors[1].offset) == (0, 2)
    assert "value_b64" in errors[1].reason and "base64" in errors[1].reason
    assert "offset" in errors[2].reason and errors[2].partition == 1
    assert "expected a JSON object" in errors[3].reason
    assert "expected key_b64/value_b64" in errors[4].reason
    assert f"file {path}, line 3, topic t, partition 0, offset 2" in str(errors[1])


def test_without_a_callback_the_first_bad_line_raises(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b64_line(0, 1, b"ok") + b"garbage\n")
    reader = read_export(path)
    assert next(reader).value == b"ok"
    with pytest.raises(ExportError, match="line 2"):
        next(reader)


def test_kcat_lines_as_kcat_prints_them(tmp_path):
    path = tmp_path / "kcat.jsonl"
    path.write_bytes(
        b'{"topic":"t","partition":2,"offset":5,"tstype":"create","ts":1700000000000,'
        b'"broker":1,"headers":["a","1","b",null],"key":null,"payload":"{\\"x\\":1}"}\n'
        # kcat writes bytes that are not UTF-8 as they are
        b'{"topic":"t","partition":2,"offset":6,"broker":1,"key":"k\xff","payload":"\x80\\u0000"}\n'
        b'{"topic":"t","partition":2,"offset":7,"headers":{"h":["x","y"]},"key":null,'
        b'"payload":null}\n'
        b'{"topic":"t","partition":2,"offset":8,"key":null,"payload":null,'
        b'"payload_error":"schema not found"}\n'
        b'{"topic":"t","partition":2,"offset":9,"tstype":"logappend","ts":7,"key":null,'
        b'"payload":null}\n'
        b'{"topic":"t","partition":2,"offset":10,"tstype":"unknown","ts":-1,"key":null,'
        b'"payload":null}\n'
    )
    records, errors = collect(path)
    headers = (("a", b"1"), ("b", None))
    assert records == [
        KafkaRecord("t", 2, 5, None, b'{"x":1}', 1_700_000_000_000, headers, exports.CREATE_TIME),
        KafkaRecord("t", 2, 6, b"k\xff", b"\x80\x00", None),
        KafkaRecord("t", 2, 7, None, None, None, (("h", b"x"), ("h", b"y"))),
        KafkaRecord("t", 2, 9, None, None, 7, (), exports.LOG_APPEND_TIME),
        KafkaRecord("t", 2, 10, None, None, -1, (), None),
    ]
    assert len(errors) == 1 and "schema not found" in errors[0].reason


# Enough varied records for several zstd blocks (128 KiB each), so a cut-off file still
# yields the lines of its whole blocks.
CUT_RECORDS = [
    KafkaRecord("t", 0, offset, None, random.Random(offset).randbytes(150), 1, (), 0)
    for offset in range(3000)
]


@pytest.mark.parametrize("compression", ["gz", "zstd"])
@pytest.mark.parametrize("layout", ["jsonl", "kcat", "avro"])
def test_a_cut_off_compressed_file_keeps_what_was_read_and_says_where_it_broke(
    tmp_path, layout, compression
):
    path = tmp_path / exports.export_file_name("cut", layout, compression)
    write_export(path, CUT_RECORDS, layout, file_compression=compression)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) * 2 // 3])
    records, errors = collect(path)
    assert 0 < len(records) < len(CUT_RECORDS)
    assert records == CUT_RECORDS[: len(records)]  # each record once, in order
    [error] = errors
    unit = "row" if layout == "avro" else "line"
    name = "gzip" if compression == "gz" else "zstd"
    assert error.reason.startswith(
        f"{'avro' if layout == 'avro' else 'jsonl'} file truncated: "
        f"{name} stream cut off after {unit} {len(records)} ("
    )
    assert error.reason.endswith(" bytes of decompressed data)")
    assert error.line == len(records) + 1
    assert str(path) in str(error)


@pytest.mark.parametrize("compression", ["gz", "zstd"])
def test_a_cut_off_compressed_parquet_file_says_no_row_can_be_read(tmp_path, compression):
    path = tmp_path / exports.export_file_name("cut", "parquet", compression)
    write_export(path, CUT_RECORDS, "parquet", file_compression=compression)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    records, [error] = collect(path)
    assert records == [] and error.line is None
    assert error.reason.startswith("parquet file truncated: ")
    assert "stream cut off (" in error.reason and "no row can be read" in error.reason


def test_a_zstd_file_cut_off_before_its_first_block_ends_is_reported_not_read_as_empty(tmp_path):
    path = tmp_path / "cut.jsonl.zst"
    write_export(path, RECORDS, "jsonl", file_compression="zstd")
    path.write_bytes(path.read_bytes()[:-5])
    records, [error] = collect(path)
    assert records == [] and "zstd stream cut off after 0 bytes" in error.reason


def test_corrupt_compressed_data_says_after_which_line(tmp_path):
    path = tmp_path / "bad.jsonl.gz"
    write_export(path, CUT_RECORDS, "jsonl", file_compression="gz")
    packed = bytearray(path.read_bytes())
    packed[-6] ^= 0xFF  # the CRC at the end of the gzip member
    path.write_bytes(bytes(packed))
    records, [error] = collect(path)
    assert 0 < len(records) < len(CUT_RECORDS)
    assert records == CUT_RECORDS[: len(records)]
    assert "incorrect data check" in error.reason
    assert error.reason.startswith(f"jsonl file is corrupt or truncated after line {len(records)}:")
    assert error.line == len(records) + 1


def test_a_missing_file_is_reported(tmp_path):
    records, errors = collect(tmp_path / "nope.parquet")
    assert records == [] and "cannot open" in errors[0].reason


def test_read_exports_names_the_file_of_each_record(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.parquet"
    write_export(first, RECORDS[:2], "jsonl")
    write_export(second, RECORDS[2:], "parquet")
    found = list(exports.read_exports([first, second]))
    assert [(path, record) for path, record in found] == [
        (str(first), RECORDS[0]),
        (str(first), RECORDS[1]),
        (str(second), RECORDS[2]),
        (str(second), RECORDS[3]),
    ]


def test_fuzzed_lines_give_records_or_export_errors_only(tmp_path):
    """Truncated, bit-flipped and random lines never raise anything but ExportError."""
    rng = random.Random(20)
    seeds = [
        b64_line(1, 2, b"value"),
        exports._kcat_line(RECORDS[3]),
        exports._jsonl_line(RECORDS[1]),
    ]
    lines = []
    for _ in range(3000):
        line = bytearray(rng.choice(seeds).rstrip(b"\n"))
        mutation = rng.randrange(3)
        if mutation == 0:
            del line[rng.randrange(len(line)) :]
        elif mutation == 1:
            for _ in range(rng.randint(1, 4)):
                line[rng.randrange(len(line))] ^= 1 << rng.randrange(8)
        else:
            line = bytearray(rng.randbytes(rng.randint(1, 80)))
        lines.append(bytes(line).replace(b"\n", b" ") + b"\n")
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"".join(lines))
    records, errors = collect(path)
    assert len(records) + len(errors) == sum(1 for line in lines if line.strip())
    assert all(isinstance(record, KafkaRecord) for record in records)
    assert all(error.line is not None for error in errors)


@pytest.mark.parametrize("compression", exports.FILE_COMPRESSIONS)
@pytest.mark.parametrize("layout", ["parquet", "avro"])
def test_corrupted_binary_files_give_records_or_export_errors_only(tmp_path, layout, compression):
    """Bit flips and truncations anywhere in a Parquet or Avro file (compressed or not)."""
    rng = random.Random(f"{layout}-{compression}")
    many = [dataclasses.replace(r, offset=i) for i, r in enumerate(RECORDS * 50)]
    path = tmp_path / "good"
    write_export(path, many, layout, file_compression=compression)
    data = path.read_bytes()
    for attempt in range(40):
        mutated = bytearray(data)
        if attempt % 3 == 0:
            del mutated[rng.randrange(len(mutated)) :]
        else:
            for _ in range(rng.randint(1, 5)):
                mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(mutated))
        records, errors = collect(path)
        assert all(isinstance(record, KafkaRecord) for record in records)
        assert all(isinstance(error, ExportError) for error in errors)


def test_timestamp_types(tmp_path):
    """Kafka's timestamp type is kept where the layout carries it; Parquet and Avro exports, like
    Spark's Kafka source, always say one (CreateTime unless told), and -1 reads as None."""
    records = [
        KafkaRecord("t", 0, 0, None, b"v", None),
        KafkaRecord("t", 0, 1, None, b"v", 10),
        KafkaRecord("t", 0, 2, None, b"v", 11, (), exports.LOG_APPEND_TIME),
    ]
    expected = {"parquet": [None, 0, 1], "avro": [None, 0, 1], "jsonl": [None, None, 1]}
    expected["kcat"] = [None, 0, 1]  # kcat prints a tstype with every timestamp
    for layout, types in expected.items():
        path = tmp_path / exports.export_file_name("x", layout)
        write_export(path, records, layout)
        got, errors = collect(path)
        assert [r.timestamp_type for r in got] == types and errors == [], layout
    assert pq.read_table(tmp_path / "x.parquet").column("timestampType").to_pylist() == [-1, 0, 1]
    path = tmp_path / "types.jsonl"
    path.write_bytes(
        b64_line(0, 1, b"v", timestamp_type=-1) + b64_line(0, 2, b"v", timestamp_type=9)
    )
    got, errors = collect(path)
    assert [r.timestamp_type for r in got] == [None] and "`timestamp_type`" in errors[0].reason


# --- hostile files ----------------------------------------------------------------------------


def fast_compressed(path, compression: str):
    if compression == "gz":
        return gzip.open(path, "wb", compresslevel=1)
    if compression == "zstd":
        return zstandard.ZstdCompressor(level=1).stream_writer(open(path, "wb"))
    return open(path, "wb")


def long_line_file(path, compression: str, value_bytes: int, records=RECORDS[:2]) -> None:
    """A JSON Lines export: a record, a line of about `value_bytes` (a valid record but for its
    length), a record; streamed, so writing it allocates little."""
    head = b'{"topic":"t","partition":0,"offset":99,"timestamp":1,"key_b64":null,"value_b64":"'
    with fast_compressed(path, compression) as sink:
        sink.write(exports._jsonl_line(records[0]))
        sink.write(head)
        for _ in range(value_bytes // (1 << 20)):
            sink.write(b"A" * (1 << 20))
        sink.write(b'"}\n')
        sink.write(exports._jsonl_line(records[1]))


@pytest.mark.parametrize("compression", exports.FILE_COMPRESSIONS)
def test_a_line_longer_than_the_limit_is_reported_and_the_file_goes_on(tmp_path, compression):
    path = tmp_path / "long.jsonl"
    long_line_file(path, compression, 3 << 20)
    errors: list[ExportError] = []
    limits = Limits(max_export_line_bytes=1 << 20)
    records = list(read_export(path, on_error=errors.append, limits=limits))
    assert records == RECORDS[:2]
    (error,) = errors
    assert error.line == 2
    assert "limits.max-export-line-bytes = 1,048,576" in error.reason
    assert f"line 2 ({(3 << 20) + 84:,} bytes)" in error.reason
    assert error.raw.startswith(b'{"topic":"t","partition":0,"offset":99')
    assert len(error.raw) == exports.LONG_LINE_HEAD
    # Within the limit (the default), the same line is a record.
    assert len(list(read_export(path))) == 3


def test_lines_at_the_limit_are_kept_and_one_byte_more_is_not():
    lines = [b"x" * 9 + b"\n", b"y" * 10 + b"\n", b"\n", b"w" * 25 + b"\n", b"z" * 10]
    for piece in (4, 10, 1 << 20):  # a line read in several pieces, or in one
        stream = io.BufferedReader(io.BytesIO(b"".join(lines)))
        original, exports._LINE_PIECE = exports._LINE_PIECE, piece
        try:
            found = list(exports.bounded_lines(stream, 10))
        finally:
            exports._LINE_PIECE = original
        assert found == [
            lines[0],
            exports.LongLine(11, lines[1]),
            lines[2],
            exports.LongLine(26, lines[3][:11]),  # the head it read before giving up
            lines[4],  # the last line of a file may lack its newline
        ], piece


MEMORY_PROBE = """
import sys
from ticdc_lake.bronze.exports import read_export
from ticdc_lake.limits import Limits

def status(name):  # kB
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(name + ":"))

limits = Limits(max_export_line_bytes=int(sys.argv[3]))
list(read_export(sys.argv[1], on_error=lambda e: None, limits=limits))
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak (VmHWM) starts again from here
before = status("VmRSS")
errors = []
records = list(read_export(sys.argv[2], on_error=errors.append, limits=limits))
print(len(records), len(errors), (status("VmHWM") - before) * 1024)
"""


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["gz", "zstd"])
def test_a_huge_line_in_a_small_compressed_file_stays_within_the_memory_bound(
    tmp_path, compression
):
    """A 1 MB gzip export holding one 1 GB line once took 3.4 GB. Here: a line 4x the default
    limit (256 MiB) in a file of about 1 MB (gzip) or 10 kB (zstd); peak memory grows by less
    than 2x the limit (before the limit: 3.4x the line, 870 MB)."""
    limit = Limits().max_export_line_bytes
    huge = 4 * limit
    path, warm = tmp_path / "huge.jsonl", tmp_path / "warm.jsonl"
    long_line_file(path, compression, huge)
    long_line_file(warm, compression, 0)  # imports and first allocations before measuring
    assert path.stat().st_size < 2 << 20
    probe = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(warm), str(path), str(limit)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    records, errors, growth = map(int, probe.stdout.split())
    assert (records, errors) == (2, 1)
    assert growth < 2 * limit, f"peak memory grew by {growth:,} bytes"
    print(f"{compression}: peak memory grew by {growth:,} bytes")


@pytest.mark.parametrize("make", ["fifo", "socket", "directory"])
def test_an_export_that_is_not_a_regular_file_is_reported_not_opened(tmp_path, make):
    path = tmp_path / "export.jsonl"
    server = socket.socket(socket.AF_UNIX)
    if make == "fifo":
        os.mkfifo(path)
    elif make == "socket":
        server.bind(str(path))
    else:
        path.mkdir()
    outcome: list = []
    reader = threading.Thread(target=lambda: outcome.append(collect(path)), daemon=True)
    reader.start()
    reader.join(10)
    server.close()
    if reader.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # let it go
        pytest.fail("reading a FIFO blocked")
    (([], [error]),) = outcome
    assert "not a regular file" in error.reason and error.path == str(path)


def parquet_with_a_large_row_group(path, large: int) -> list[KafkaRecord]:
    """Three row groups of four, four and two records; the second one's values are ``large``
    bytes each (zeros, compressed to almost nothing), the others' a few."""
    records = [
        dataclasses.replace(
            RECORDS[0],
            offset=offset,
            value=b"%d" % offset + b"\0" * (large if 4 <= offset < 8 else 0),
        )
        for offset in range(10)
    ]
    table = pa.Table.from_batches([exports.records_to_arrow(records)])
    pq.write_table(table, path, row_group_size=4, use_dictionary=False, compression="zstd")
    return records


def test_a_row_group_past_the_limit_is_reported_and_the_others_are_read(tmp_path):
    path = tmp_path / "large-group.parquet"
    records = parquet_with_a_large_row_group(path, 256 << 10)
    assert path.stat().st_size < 64 << 10  # what the footer declares is what counts
    errors: list[ExportError] = []
    limits = Limits(max_parquet_row_group_bytes=512 << 10)
    found = list(read_export(path, on_error=errors.append, limits=limits))
    assert found == records[:4] + records[8:]
    (error,) = errors
    assert error.line == 5
    assert pq.ParquetFile(path).metadata.row_group(1).total_byte_size > 4 * (256 << 10)
    assert "row group 1 (rows 5-8) uncompressed (" in error.reason
    assert "exceeds limits.max-parquet-row-group-bytes = 524,288" in error.reason
    # Within the limit (the default), every row group is read.
    assert list(read_export(path)) == records


def test_values_a_dictionary_repeats_are_expanded_a_budget_at_a_time(tmp_path, monkeypatch):
    """A dictionary can repeat one large value for every row: this file of a few KB expands to
    15 MB, which is read in slices of the budget (1 MiB here), not all at once."""
    large = bytes(range(256)) * 400  # 102,400 bytes
    records = [
        dataclasses.replace(
            RECORDS[3], offset=offset, key=b"k", value=large, headers=(("h", large),) * (offset % 2)
        )
        for offset in range(100)
    ]
    path = tmp_path / "repeated.parquet"
    table = pa.Table.from_batches([exports.records_to_arrow(records)])
    pq.write_table(table, path, dictionary_pagesize_limit=1 << 20)
    assert path.stat().st_size < 64 << 10
    monkeypatch.setattr(exports, "EXPANDED_BATCH_BYTES", 1 << 20)

    parquet = exports.open_parquet_export(str(path), "none")
    batches = list(exports.parquet_batches(parquet, str(path), batch_rows=65_536))
    firsts = [first for first, _, _ in batches]
    assert firsts == [0, *itertools.accumulate(rows for _, rows, _ in batches[:-1])]
    assert len(batches) > 10  # rows of 102,400 or 204,800 bytes, at most 1 MiB together
    assert all(batch.nbytes < (1 << 20) + 4096 for _, _, batch in batches)
    assert pa.Table.from_batches([batch for _, _, batch in batches]).equals(table)
    assert list(read_export(path)) == records


@pytest.mark.parametrize("compression", ["gz", "zstd"])
def test_a_whole_file_compressed_parquet_past_the_unpack_limit_is_reported_not_read(
    tmp_path, compression
):
    plain, packed = tmp_path / "plain.parquet", tmp_path / "packed.parquet"
    write_export(plain, RECORDS, "parquet")
    write_export(packed, RECORDS, "parquet", file_compression=compression)
    size = plain.stat().st_size
    errors: list[ExportError] = []
    below = Limits(max_unpacked_parquet_bytes=size - 1)
    assert list(read_export(packed, on_error=errors.append, limits=below)) == []
    (error,) = errors
    assert (error.path, error.line) == (str(packed), None)
    assert f"({compression}), unpacked, exceeds limits.max-unpacked-parquet-bytes" in error.reason
    at = Limits(max_unpacked_parquet_bytes=size)
    assert list(read_export(packed, limits=at)) == RECORDS
