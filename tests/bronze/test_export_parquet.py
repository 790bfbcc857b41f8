"""Spark's Parquet reader, for the batches of plain Parquet files land's pass leaves to it: the
same rows as the export reader on every Spark Kafka Parquet file it takes, the files it leaves
to the export reader, and land falling back to the export reader when Spark's read fails or
its rows do not add up."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pyspark.sql.types import StructType
from ticdc_lake.bronze import export_parquet, export_source, exports, land_batch
from ticdc_lake.bronze.land import LandTables, land
from ticdc_lake.bronze.land_batch import EXPORT_READER, SPARK_PARQUET
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout

from tests.bronze.test_exports import parquet_with_a_large_row_group
from tests.bronze.test_land import bronze_records, expected, retopic, table, write_config

UTC = dt.UTC
MICROS_UTC = pa.timestamp("us", tz="UTC")


def kafka_table(rows: list[dict], timestamp_type: pa.DataType = MICROS_UTC):
    """Spark Kafka columns from ``rows`` (missing keys are null)."""
    types = {f.name: f.type for f in exports.SPARK_KAFKA_SCHEMA} | {"timestamp": timestamp_type}
    return pa.table(
        {name: pa.array([r.get(name) for r in rows], kind) for name, kind in types.items()}
    )


ODD_ROWS = [
    {"topic": "t", "partition": 0, "offset": 0, "key": b"k", "value": b"v", "timestampType": 0,
     "timestamp": dt.datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=UTC),
     "headers": [{"key": "h", "value": b"\xff\x00"}, {"key": "empty", "value": None}]},
    {"topic": None, "partition": 0, "offset": 1, "value": b"no topic"},
    {"topic": "t", "partition": -3, "offset": 2, "value": b"negative partition"},
    {"topic": "t", "partition": 0, "offset": -1, "value": b"negative offset"},
    {"topic": None, "partition": -1, "offset": -5},  # the partition is named first
    {"topic": "t", "partition": None, "offset": 5},
    {"topic": "t", "partition": 1, "offset": None},
    {"topic": "t", "partition": 1, "offset": 7, "timestampType": -1, "headers": []},
    {"topic": "t", "partition": 2**31 - 1, "offset": 2**63 - 1, "key": b"", "value": None},
    {"topic": "t", "partition": 1, "offset": 9, "timestampType": 1,
     "timestamp": dt.datetime(1850, 1, 1, 0, 0, 0, 1, tzinfo=UTC)},
    {"topic": "t", "partition": 1, "offset": 10,
     "timestamp": dt.datetime(3000, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)},
]  # fmt: skip


def write(path: Path, data: pa.Table, **options) -> export_source.ExportFile:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path, **options)
    return export_source.describe_file(str(path))


@pytest.fixture
def varied_files(tmp_path) -> list[export_source.ExportFile]:
    """Spark Kafka Parquet files both readers take: µs, INT96 and ms timestamps, a zone other
    than UTC, columns in another order with one more, small row groups, an empty file, a path
    with spaces, non-ASCII and URI characters, and the optional columns absent."""
    odd = kafka_table(ODD_ROWS)
    millis = kafka_table(ODD_ROWS, pa.timestamp("ms", tz="Europe/Paris")).drop_columns("key")
    millis = millis.append_column("key", pa.array([b"m"] * len(ODD_ROWS))).append_column(
        "extra", pa.array(range(len(ODD_ROWS)))
    )
    # Headers first: two leaves before the timestamp's.
    millis = millis.select(["headers", *(n for n in millis.column_names if n != "headers")])
    return [
        write(tmp_path / "odd.parquet", odd, row_group_size=3),
        write(tmp_path / "int96.parquet", odd, use_deprecated_int96_timestamps=True),
        write(
            tmp_path / "ms.parquet", millis, coerce_timestamps="ms", allow_truncated_timestamps=True
        ),
        write(tmp_path / "empty.parquet", kafka_table([])),
        write(tmp_path / "a b ü" / "x 1%41#y,z=2.parquet", odd),
        # Spark's Kafka source without includeHeaders; and a file with no timestamps at all.
        write(tmp_path / "no-headers.parquet", odd.drop_columns("headers")),
        write(tmp_path / "bare.parquet", odd.drop_columns(["timestamp", "timestampType"])),
    ]


def rows_of(frame) -> list[dict]:
    return sorted(
        (row.asDict(recursive=True) for row in frame.collect()),
        key=lambda row: (row["file_index"], row["position"]),
    )


@pytest.mark.spark
def test_spark_reads_the_rows_the_export_reader_reads(spark, varied_files):
    counts = [export_parquet.footer_rows(file) for file in varied_files]
    assert counts == [len(ODD_ROWS)] * 3 + [0] + [len(ODD_ROWS)] * 3
    mine = rows_of(export_parquet.read_kafka_parquet(spark, varied_files, range(7)))
    theirs = rows_of(export_source.read_export_files(spark, varied_files))
    assert len(mine) == 6 * len(ODD_ROWS)
    assert mine == theirs
    first, int96 = mine[: len(ODD_ROWS)], mine[len(ODD_ROWS) : 2 * len(ODD_ROWS)]
    assert [r["error"] is None for r in first] == [True, False, False, False, False, False, False,
                                                   True, True, True, True]  # fmt: skip
    assert first[4]["error"] == "`partition` must be in [0, 2^31), found -1"
    assert first[4]["partition"] is None and first[3]["offset"] is None
    assert [r["timestamp_type"] for r in first[7:10]] == [None, None, 1]
    # INT96 past 2262 and before 1900, as written (nanoseconds would have overflowed).
    assert (int96[9]["timestamp"].year, int96[9]["timestamp"].microsecond) == (1850, 1)
    assert (int96[10]["timestamp"].year, int96[10]["timestamp"].microsecond) == (3000, 999999)
    bare = mine[-len(ODD_ROWS) :]
    assert {(r["timestamp"], r["timestamp_type"]) for r in bare} == {(None, None)}
    assert {r["source_file"] for r in mine} == {f.path for f in varied_files} - {
        varied_files[3].path  # the empty file has no rows
    }


@pytest.mark.spark
@pytest.mark.parametrize("headers", [True, False])
def test_exports_spark_itself_wrote_are_read_by_spark(spark, tmp_path, headers):
    """As Spark's Kafka source writes them: INT96 timestamps (Spark's default), headers only
    with includeHeaders, part files of a directory."""
    schema = export_parquet.KAFKA_COLUMNS
    if not headers:
        schema = StructType([f for f in schema.fields if f.name != "headers"])
    rows = [
        {k: r.get(k) for k in schema.names}
        | {"timestamp": dt.datetime(2024, 6, 1, 12, 0, 0, 5 * i, tzinfo=UTC)}
        for i, r in enumerate(ODD_ROWS)
    ]
    spark.createDataFrame(rows, schema).coalesce(2).write.parquet(str(tmp_path / "export"))
    paths = sorted((tmp_path / "export").glob("part-*.parquet"))
    files = [export_source.describe_file(str(path)) for path in paths]
    timestamp = pq.ParquetFile(paths[0]).schema.column(5)
    assert (timestamp.name, timestamp.physical_type) == ("timestamp", "INT96")
    assert all(export_parquet.footer_rows(file) for file in files), "for Spark's reader"
    mine = rows_of(export_parquet.read_kafka_parquet(spark, files, range(len(files))))
    assert mine == rows_of(export_source.read_export_files(spark, files))
    assert len(mine) == len(ODD_ROWS)


def with_column(data: pa.Table, name: str, column: pa.Array) -> pa.Table:
    return data.set_column(data.schema.get_field_index(name), name, column)


ONE = kafka_table(ODD_ROWS[:1])
LEFT_TO_PYTHON = {
    "offset missing": ONE.drop_columns("offset"),
    "headers named only in another case": ONE.rename_columns(
        ["Headers" if n == "headers" else n for n in ONE.column_names]
    ),
    "timestampType of 64 bits": with_column(ONE, "timestampType", pa.array([0], pa.int64())),
    "partition of 64 bits": with_column(ONE, "partition", pa.array([0], pa.int64())),
    "topic as bytes": with_column(ONE, "topic", pa.array([b"t"])),
    "timestamp without zone": with_column(
        ONE, "timestamp", pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us"))
    ),
    "timestamp in ns": with_column(
        ONE, "timestamp", pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("ns", tz="UTC"))
    ),
    "headers of another type": with_column(ONE, "headers", pa.array([[1]], pa.list_(pa.int64()))),
    "a column named alike but for case": ONE.append_column("Key", pa.array([b"k"])),
    "a column named only in another case": ONE.rename_columns(
        ["Timestamp" if n == "timestamp" else n for n in ONE.column_names]
    ),
    "headers first, timestamp without zone": with_column(
        ONE, "timestamp", pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us"))
    ).select(["headers", *(n for n in ONE.column_names if n != "headers")]),
}


@pytest.mark.parametrize("case", sorted(LEFT_TO_PYTHON))
def test_files_spark_would_read_otherwise_stay_with_the_export_reader(tmp_path, case):
    file = write(tmp_path / "f.parquet", LEFT_TO_PYTHON[case], coerce_timestamps=None)
    assert export_parquet.footer_rows(file) is None


def test_paths_hadoop_would_misread_and_other_layouts_stay_with_the_export_reader(tmp_path):
    for name in ("t:1.parquet", "t[1].parquet", "t*.parquet", "t{a}.parquet"):
        assert export_parquet.footer_rows(write(tmp_path / name, ONE)) is None, name
    zstd = tmp_path / "z.parquet.zst"
    exports.write_export(zstd, [], "parquet", file_compression="zstd")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    for path in (zstd, broken):
        assert export_parquet.footer_rows(export_source.describe_file(str(path))) is None


# --- land ---------------------------------------------------------------------------------------


def parquet_landing(tmp_path, generated, topic="orders"):
    """A landing area of plain Parquet exports: one file per Kafka partition."""
    config = load_config(write_config(tmp_path, [topic]))
    records = {}
    for partition, stream in sorted(generated.items()):
        records[partition] = retopic(stream, topic)
        exports.write_export(tmp_path / "landing" / f"p{partition}.parquet", records[partition],
                             "parquet")  # fmt: skip
    return config, records


@pytest.mark.spark
def test_a_parquet_landing_area_lands_exactly_and_a_re_export_is_read_by_spark(
    spark, generated, tmp_path
):
    config, records = parquet_landing(tmp_path, generated)
    first = land(spark, config)  # new offsets: land's pass
    assert (first.reader, first.reader_fallback) == (EXPORT_READER, "")
    assert "read by the export reader" in str(first)
    tables = LandTables.of(LakeLayout(config.lake))
    everything = [r for stream in records.values() for r in stream]
    assert bronze_records(tables) == expected(everything)
    # A re-export: partition 0 again, one record's bytes changed: duplicates and a conflict.
    again = [dataclasses.replace(r, value=b"other") if r.offset == 3 else r for r in records[0]]
    exports.write_export(tmp_path / "landing" / "again.parquet", again, "parquet")
    second = land(spark, config)
    assert second.reader == SPARK_PARQUET
    assert (second.records_added, second.duplicates, second.conflicts) == (0, len(again) - 1, 1)
    assert [r["offset"] for r in table(tables.offset_conflicts)] == [3]
    assert bronze_records(tables) == expected(everything)


@pytest.mark.spark
def test_a_mixed_landing_area_reads_its_parquet_with_spark_and_the_rest_in_python(
    spark, generated, tmp_path
):
    config, records = parquet_landing(tmp_path, generated)
    (tmp_path / "landing" / "p1.parquet").unlink()
    exports.write_export(tmp_path / "landing" / "p1.jsonl", records[1], "jsonl")
    result = land(spark, config)
    assert result.reader == f"{SPARK_PARQUET} (2 files) and {EXPORT_READER} (1)"
    everything = [r for stream in records.values() for r in stream]
    tables = LandTables.of(LakeLayout(config.lake))
    assert bronze_records(tables) == expected(everything)
    files = {Path(r["source_file"]).name for r in table(tables.bronze)}
    assert files == {"p0.parquet", "p1.jsonl", "p2.parquet"}


@pytest.mark.spark
@pytest.mark.parametrize("literal_pairs", [export_source.LITERAL_PAIRS, 4])
def test_many_small_files_land_each_record_once_with_its_own_file(
    spark, generated, tmp_path, monkeypatch, literal_pairs
):
    """A landing area of many small exports, a few JSON Lines among the Parquet: each file's
    place and path are looked up from literals, or (past ``literal_pairs``) by a broadcast
    join; a task's Arrow batch holds several files, largest first, whose offsets it tallies
    file by file."""
    monkeypatch.setattr(export_source, "LITERAL_PAIRS", literal_pairs)
    config = load_config(write_config(tmp_path, ["orders"]))
    written, everything = {}, []
    for partition, stream in sorted(generated.items()):
        records = retopic(stream, "orders")
        everything += records
        for start in range(0, len(records), 3):
            layout = "jsonl" if start % 9 == 3 else "parquet"
            name = f"p{partition}-{start:03d}.{layout}"
            exports.write_export(tmp_path / "landing" / name, records[start : start + 3], layout)
            written.update({(r.partition, r.offset): name for r in records[start : start + 3]})
    result = land(spark, config)
    assert result.files_landed == len(set(written.values())) > 3 * 5
    assert result.records_added == len(everything) and result.duplicates == 0
    tables = LandTables.of(LakeLayout(config.lake))
    assert bronze_records(tables) == expected(everything)
    rows = table(tables.bronze)
    assert {(r["partition"], r["offset"]): Path(r["source_file"]).name for r in rows} == written


@pytest.mark.spark
def test_plain_paths_are_their_own_uris_and_the_others_are_asked_of_hadoop(spark, tmp_path):
    paths = [f"{tmp_path}/a.parquet", f"{tmp_path}/with space.parquet", f"{tmp_path}/é.parquet"]
    paths += [f"{tmp_path}/./b.parquet", f"{tmp_path}/.hidden-c_d~e.parquet"]
    asked = [export_parquet._spark_uri(spark, path) for path in paths]
    assert export_parquet._spark_uris(spark, paths) == asked
    assert asked[0] == f"file:{paths[0]}" and asked[1].endswith("/with%20space.parquet")
    assert asked[3].endswith(f"{tmp_path}/b.parquet")  # Hadoop drops the "." part


def break_first_page(path: Path, column: str) -> None:
    """Garbage over the page header of ``column``'s first data page: the footer still reads."""
    metadata = pq.ParquetFile(path).metadata
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    start = metadata.row_group(0).column(names.index(column)).data_page_offset
    with open(path, "r+b") as stream:
        stream.seek(start)
        stream.write(b"\xff" * 24)


@pytest.mark.spark
@pytest.mark.parametrize("column", ["offset", "value"])
def test_a_file_spark_cannot_read_sends_the_batch_to_the_export_reader(
    spark, generated, tmp_path, column
):
    config, records = parquet_landing(tmp_path, generated)
    broken = tmp_path / "landing" / "p1.parquet"
    break_first_page(broken, column)
    result = land(spark, config)
    assert result.reader == EXPORT_READER
    # Spark's own message, naming the file, not py4j's "An error occurred while calling".
    assert result.reader_fallback.startswith("[FAILED_READ_FILE")
    assert "p1.parquet" in result.reader_fallback
    assert "Spark's Parquet reader:" in str(result)
    tables = LandTables.of(LakeLayout(config.lake))
    others = [r for p in (0, 2) for r in records[p]]
    assert bronze_records(tables) == expected(others)
    (error,) = table(tables.export_errors)
    assert error["source_file"] == str(broken) and error["reason"].startswith("parquet file")


@pytest.mark.spark
def test_rows_that_do_not_add_up_to_the_footers_send_the_batch_to_the_export_reader(
    spark, generated, tmp_path, monkeypatch
):
    config, records = parquet_landing(tmp_path, generated)
    counted = export_parquet.footer_rows
    monkeypatch.setattr(land_batch, "footer_rows", lambda file, limits: counted(file, limits) + 1)
    result = land(spark, config)
    assert result.reader == EXPORT_READER
    assert "rows read, its footer has" in result.reader_fallback
    everything = [r for stream in records.values() for r in stream]
    assert bronze_records(LandTables.of(LakeLayout(config.lake))) == expected(everything)


@pytest.mark.spark
def test_a_row_group_past_the_limit_is_an_export_error_and_the_others_land(spark, tmp_path):
    config_path = write_config(tmp_path, ["t"])
    document = yaml.safe_load(config_path.read_text())
    document["limits"] = {"max-parquet-row-group-bytes": "512KiB"}
    config_path.write_text(yaml.safe_dump(document))
    path = tmp_path / "landing" / "large.parquet"
    records = parquet_with_a_large_row_group(path, 256 << 10)
    file = export_source.describe_file(str(path))
    assert export_parquet.footer_rows(file) == len(records)  # Spark's reader takes it...
    config = load_config(config_path)
    assert export_parquet.footer_rows(file, config.limits) is None  # ...but not past the limit
    result = land(spark, config)
    assert result.reader == EXPORT_READER
    tables = LandTables.of(LakeLayout(config.lake))
    assert bronze_records(tables) == expected(records[:4] + records[8:])
    (error,) = table(tables.export_errors)
    assert (error["source_file"], error["line"]) == (str(path), 5)
    assert "row group 1 (rows 5-8) uncompressed" in error["reason"]
    assert "limits.max-parquet-row-group-bytes = 524,288" in error["reason"]
