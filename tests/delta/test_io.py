"""Table IO: Spark → Delta writes, Delta → Spark reads, idempotent commits and merges."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, TableFeatures, WriterProperties, write_deltalake
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from ticdc_lake.delta import (
    MergeSourceError,
    SchemaMismatchError,
    TableFileMissingError,
    TableNotFoundError,
    UnsupportedTableError,
    delta_table_exists,
    merge_delta,
    merge_frame,
    read_delta,
    write_arrow,
    write_delta,
)
from ticdc_lake.delta import merge as merge_module
from ticdc_lake.delta.files import (
    ROW_GROUP_BYTES,
    ROW_GROUP_ROWS,
    TaskFiles,
    WritePlan,
    WriteTask,
    commit_files,
    discard_uncommitted,
)
from ticdc_lake.delta.partitions import directory, directory_values
from ticdc_lake.delta.read import RowGroups
from ticdc_lake.delta.schema import TableSchema
from ticdc_lake.delta.stats import FileStats

pytestmark = pytest.mark.spark

UTC = dt.UTC
U64_MAX = Decimal(2**64 - 1)
D38_MAX = Decimal("9999999999999999999999999999.9999999999")

EVERY_TYPE = StructType(
    [
        StructField("id", LongType()),
        StructField("u64", DecimalType(20, 0)),
        StructField("dec", DecimalType(38, 10)),
        StructField("raw", BinaryType()),
        StructField("text", StringType()),
        StructField("ts", TimestampType()),
        StructField("day", DateType()),
        StructField("real", DoubleType()),
        StructField("flag", BooleanType()),
        StructField("small", IntegerType()),
        StructField("tags", ArrayType(LongType())),
        StructField("attrs", MapType(StringType(), LongType())),
        StructField(
            "pos", StructType([StructField("x", LongType()), StructField("y", StringType())])
        ),
    ]
)
EVERY_TYPE_ROWS = [
    (
        1,
        U64_MAX,
        D38_MAX,
        b"\x00\xff\xfe",
        "héllo ✓ 𝄞",
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
        dt.date(9999, 12, 31),
        1.5,
        True,
        -(2**31),
        [1, None, 3],
        {"a": 1, "b": None},
        (1, "p"),
    ),
    (
        2,
        Decimal(0),
        Decimal("-9999999999999999999999999999.9999999999"),
        b"",
        "",
        dt.datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
        dt.date(1000, 1, 1),
        float("nan"),
        False,
        2**31 - 1,
        [],
        {},
        (None, None),
    ),
    (
        3,
        Decimal(2**63),
        Decimal("0.0000000001"),
        bytes(range(256)),
        "a" * 100,
        dt.datetime(1000, 1, 1, tzinfo=UTC),
        dt.date(1, 1, 1),
        float("-inf"),
        None,
        0,
        None,
        None,
        None,
    ),
    (4, None, None, None, None, None, None, None, None, None, None, None, None),
]


def _files_on_disk(path: Path) -> set[str]:
    return {str(p) for p in path.rglob("*.parquet")}


def _delta_rows(path: Path, sort_key: str) -> list[dict]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table().to_pylist(), key=lambda r: r[sort_key])


def _spark_rows(df, sort_key: str) -> list[dict]:
    return sorted(df.toArrow().to_pylist(), key=lambda r: r[sort_key])


# --- pure helpers (no Spark) ------------------------------------------------------------------


def test_partition_directories_round_trip():
    values = {"a": "x:y/z=1 %2F", "b": None, "c": "ünï"}
    path = directory(values) + "/part-0.parquet"
    assert path.startswith("a=x%3Ay%2Fz%3D1%20%252F/b=__HIVE_DEFAULT_PARTITION__/c=ünï/")
    assert directory_values(path) == values


def test_file_stats_bound_the_data_and_skip_what_is_inexact():
    data = pa.table(
        {
            "ts": pa.array([1_000_500, 2_000_001, None], pa.timestamp("us", tz="UTC")),
            "real": pa.array([1.0, float("nan"), 2.0]),
            "long_text": pa.array(["b" * 40, "a" * 40, None]),
            "short_text": pa.array(["b", "a", "c"]),
            "u64": pa.array([U64_MAX, Decimal(1), None], pa.decimal128(20, 0)),
            "d15": pa.array(
                [Decimal("-1.5"), Decimal("12345678901.2345"), None], pa.decimal128(15, 4)
            ),
        }
    )
    stats = FileStats(data.schema)
    stats.update(data.slice(0, 2))
    stats.update(data.slice(2))
    result = json.loads(stats.to_json())
    assert result["numRecords"] == 3
    assert result["nullCount"] == {
        "ts": 1,
        "real": 0,
        "long_text": 1,
        "short_text": 0,
        "u64": 1,
        "d15": 1,
    }
    # Millisecond precision: the minimum rounds down, the maximum up.
    assert result["minValues"]["ts"] == "1970-01-01T00:00:01.000Z"
    assert result["maxValues"]["ts"] == "1970-01-01T00:00:02.001Z"
    assert "real" not in result["minValues"]  # NaN: no order to record
    assert result["minValues"]["long_text"] == "a" * 32 and "long_text" not in result["maxValues"]
    assert (result["minValues"]["short_text"], result["maxValues"]["short_text"]) == ("a", "c")
    assert "u64" not in result["minValues"]  # delta-rs would read it back wrong
    assert (result["minValues"]["d15"], result["maxValues"]["d15"]) == (-1.5, 12345678901.2345)


def test_schema_evolution_rules():
    table = TableSchema((("id", "long"), ("n", "integer"), ("p", "string")), ("p",))
    evolved, added = table.evolve(TableSchema((("id", "integer"), ("new", "string"))))
    assert added == ["new"] and evolved.names == ["id", "n", "p", "new"]
    assert evolved.type_of("id") == "long"  # narrower data is cast up, the table keeps its type
    with pytest.raises(SchemaMismatchError, match="cannot write"):
        table.evolve(TableSchema((("n", "string"),)))
    with pytest.raises(SchemaMismatchError, match="partitioned by"):
        table.evolve(TableSchema((("id", "long"),), ("id",)))
    with pytest.raises(SchemaMismatchError, match="only in case"):
        table.evolve(TableSchema((("ID", "long"),)))


# --- writes and reads -------------------------------------------------------------------------


def test_every_type_round_trips(spark, tmp_path):
    df = spark.createDataFrame(EVERY_TYPE_ROWS, EVERY_TYPE)
    result = write_delta(df, tmp_path / "t")
    assert (result.committed, result.version, result.num_records) == (True, 0, 4)

    back = read_delta(spark, tmp_path / "t")
    assert back.schema == EVERY_TYPE  # every column stored nullable, types exact
    # (chispa's ignore_row_order cannot sort maps: order by id instead.)
    assert_df_equality(df.orderBy("id"), back.orderBy("id"), allow_nan_equality=True)
    # Plain delta-rs reads the same values (NaN compared as text).
    as_text = [{k: repr(v) for k, v in row.items()} for row in _delta_rows(tmp_path / "t", "id")]
    assert as_text == [{k: repr(v) for k, v in row.items()} for row in _spark_rows(back, "id")]
    assert _delta_rows(tmp_path / "t", "id")[0]["u64"] == U64_MAX


def test_partitioned_round_trip_keeps_partition_columns(spark, tmp_path):
    awkward = ["x:y", "a/b=c", "sp ace%", "007", "ünï", "", None]
    rows = [(i, awkward[i % len(awkward)], i % 2, dt.date(2024, 1, 1 + i % 3)) for i in range(20)]
    # One task: the files are one per partition, not one per partition and task.
    df = spark.createDataFrame(rows, "id long, topic string, part int, day date").coalesce(1)
    write_delta(df, tmp_path / "t", partition_by=["topic", "part"])

    back = read_delta(spark, tmp_path / "t")
    assert back.columns == ["id", "topic", "part", "day"]
    # Spark (and Delta) read an empty partition value as null.
    expected = df.withColumn("topic", F.when(F.col("topic") == "", None).otherwise(F.col("topic")))
    assert_df_equality(expected, back, ignore_row_order=True, ignore_nullable=True)
    assert _spark_rows(back, "id") == _delta_rows(tmp_path / "t", "id")


def test_a_value_range_reads_only_the_files_that_can_hold_it(spark, tmp_path):
    """Files whose statistics (or partition value) rule the range out are not read; a file
    without statistics is read; the rows of the files read are all there, to be filtered."""
    plain, partitioned, bare = tmp_path / "plain", tmp_path / "partitioned", tmp_path / "bare"
    for batch in (1, 2, 3):
        rows = spark.createDataFrame(
            [(batch, batch * 10), (batch, batch * 10 + 1)], "b long, v long"
        )
        write_delta(rows, plain)
        write_delta(rows, partitioned, partition_by=["b"])
        write_deltalake(  # a writer that records no statistics
            str(bare), pa.table({"b": [batch], "v": [batch]}), mode="append",
            configuration={"delta.dataSkippingNumIndexedCols": "0"},
        )  # fmt: skip

    def values(path, within):
        return sorted(row.v for row in read_delta(spark, path, within=within).collect())

    assert values(plain, ("b", 2, 2)) == [20, 21]
    assert values(plain, ("b", 2, 9)) == [20, 21, 30, 31]
    assert values(partitioned, ("b", 3, 3)) == [30, 31]
    assert values(plain, ("b", 4, 9)) == []
    assert values(bare, ("b", 2, 2)) == [1, 2, 3]
    assert values(plain, None) == [10, 11, 20, 21, 30, 31]


def test_parquet_statistics_only_for_columns_a_reader_prunes_by(spark, tmp_path):
    rows = [(1, "a", b"payload", [("x", "1")]), (2, "b", None, None)]
    schema = "id long, name string, value binary, image array<struct<name: string, text: string>>"
    write_delta(spark.createDataFrame(rows, schema).coalesce(1), tmp_path / "t")
    (path,) = DeltaTable(str(tmp_path / "t")).file_uris()
    group = pq.ParquetFile(path).metadata.row_group(0)
    with_stats = {
        group.column(i).path_in_schema
        for i in range(group.num_columns)
        if group.column(i).is_stats_set
    }
    assert with_stats == {"id", "name"}


def test_row_groups_read_on_the_driver_number_rows_alike_whatever_the_columns(tmp_path):
    """RowGroups prunes partitions and row groups by ``where``, reads the rest whole, in the
    same order each time: a narrow read's row numbers pick rows from a wide read of just the
    row groups holding them."""
    path = str(tmp_path / "t")
    for batch in (1, 2, 3):
        rows = pa.table(
            {"b": [batch] * 6, "ts": [batch * 10 + n for n in range(6)],
             "wide": [[f"{batch}-{n}"] * 50 for n in range(6)]}
        )  # fmt: skip
        write_deltalake(
            path, rows, mode="append", partition_by=["b"],
            writer_properties=WriterProperties(max_row_group_size=2, write_batch_size=2),
        )  # fmt: skip
    where = (pc.field("b") > 1) & (pc.field("ts") > 22) & (pc.field("ts") != 31)
    groups = RowGroups.of(DeltaTable(path), where)
    # Batch 1 is pruned by partition, batch 2's first row group (TS 20, 21) by statistics.
    assert sum(groups.sizes) == 10 and len(groups.groups) == 5
    narrow = groups.read_all(["b", "ts"])
    assert narrow.num_rows == 10
    chosen = groups.matching(narrow)
    chosen_ts = narrow.column("ts").take(pa.array(chosen)).to_pylist()
    assert sorted(chosen_ts) == [23, 24, 25, 30, 32, 33, 34, 35]
    last_two = groups.read(groups.groups[-2:], ["ts", "wide"])
    assert last_two.column("ts").to_pylist() == narrow.column("ts").to_pylist()[-4:]
    assert all(column.num_chunks == 1 for column in last_two.columns)
    # A nested string field read dictionary-encoded, as Parquet holds it: the same values.
    encoded = groups.read(groups.groups[-2:], ["ts", "wide"], ["wide.list.element"])
    assert encoded.schema.field("wide").type == pa.list_(pa.dictionary(pa.int32(), pa.string()))
    assert encoded.column("wide").cast(last_two.schema.field("wide").type) == last_two["wide"]


def test_a_partitioned_table_reached_through_a_symlink_reads(spark, tmp_path):
    # A lake under a symlinked directory (/data -> /mnt/disk1): delta-rs resolves the link, and
    # Spark refused the files as outside the base path it was given.
    (tmp_path / "disk").mkdir()
    (tmp_path / "lake").symlink_to(tmp_path / "disk")
    rows = spark.createDataFrame([(1, "a"), (2, "b")], "id long, topic string")
    write_delta(rows, tmp_path / "lake" / "t", partition_by=["topic"])

    back = read_delta(spark, tmp_path / "lake" / "t")
    assert sorted(map(tuple, back.collect())) == [(1, "a"), (2, "b")]


def test_append_overwrite_and_schema_evolution(spark, tmp_path):
    path = tmp_path / "t"
    write_delta(spark.createDataFrame([(1, "a")], "id long, v string"), path)
    write_delta(spark.createDataFrame([(2, "b")], "id int, v string"), path)  # int fits long
    evolved = write_delta(
        spark.createDataFrame([(3, "c", 1.5)], "id long, v string, w double"), path
    )
    assert evolved.committed

    back = read_delta(spark, path)
    assert back.schema.simpleString() == "struct<id:bigint,v:string,w:double>"
    assert sorted(map(tuple, back.collect())) == [(1, "a", None), (2, "b", None), (3, "c", 1.5)]

    with pytest.raises(SchemaMismatchError, match="cannot write"):
        write_delta(spark.createDataFrame([("x",)], "w string"), path)

    write_delta(spark.createDataFrame([(9, "z")], "id long, v string"), path, mode="overwrite")
    back = read_delta(spark, path)
    assert [tuple(r) for r in back.collect()] == [(9, "z", None)]  # column w stays, null

    write_delta(
        spark.createDataFrame([("only",)], "name string"),
        path,
        mode="overwrite",
        overwrite_schema=True,
    )
    assert [tuple(r) for r in read_delta(spark, path).collect()] == [("only",)]
    # Time travel reads an older snapshot with its own schema.
    assert read_delta(spark, path, version=0).collect()[0].asDict() == {"id": 1, "v": "a"}


def test_overwrite_of_chosen_partitions(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.createDataFrame(
        [(i, t) for i in range(6) for t in ("a", "b", "c")], "id long, t string"
    )
    write_delta(df, path, partition_by=["t"])
    version = DeltaTable(str(path)).version()

    new_b = spark.createDataFrame([(100, "b")], "id long, t string")
    write_delta(new_b, path, mode="overwrite", replace_where={"t": ["b"]})
    counts = {r["t"]: r["count"] for r in read_delta(spark, path).groupBy("t").count().collect()}
    assert counts == {"a": 6, "b": 1, "c": 6}

    before = _files_on_disk(path)
    outside = spark.createDataFrame([(200, "a")], "id long, t string")
    with pytest.raises(Exception, match="replace_where"):
        write_delta(outside, path, mode="overwrite", replace_where={"t": "c"})
    assert DeltaTable(str(path)).version() == version + 1  # nothing committed
    assert _files_on_disk(path) == before  # abort deleted the written file


def test_empty_and_missing_tables(spark, tmp_path):
    assert not delta_table_exists(tmp_path / "t")
    with pytest.raises(TableNotFoundError):
        read_delta(spark, tmp_path / "t")

    empty = spark.createDataFrame([], "id long, amount decimal(20,0), p string")
    result = write_delta(empty, tmp_path / "t", partition_by=["p"])
    assert (result.committed, result.version, result.num_files) == (True, 0, 0)
    back = read_delta(spark, tmp_path / "t")
    assert back.count() == 0
    assert back.schema.simpleString() == "struct<id:bigint,amount:decimal(20,0),p:string>"
    # An empty append with nothing to record adds no version.
    assert not write_delta(empty, tmp_path / "t").committed
    assert DeltaTable(str(tmp_path / "t")).version() == 0


def test_tables_under_paths_with_spaces_non_ascii_and_glob_characters(spark, tmp_path):
    """delta-rs reports percent-encoded URIs; Spark is given the paths on disk."""
    path = tmp_path / "lake dir" / "数据 ü [1] {a,b}" / "t"
    df = spark.createDataFrame([(1, "x y"), (2, "ü/%"), (3, None)], "id long, p string")
    write_delta(df, path, partition_by=["p"])
    back = read_delta(spark, path)
    assert sorted(back.collect()) == sorted(df.collect())
    merge_delta(pa.table({"id": [2], "p": ["ü/%"]}), path, keys=["id"], delete_column=None)
    assert read_delta(spark, path).count() == 3


def test_a_data_file_missing_from_disk_is_named_before_spark_reads(spark, tmp_path):
    path = tmp_path / "t"
    write_delta(spark.createDataFrame([(1, "a"), (2, "b")], "id long, p string"), path,
                partition_by=["p"])  # fmt: skip
    gone = sorted(path.glob("p=b/*.parquet"))[0]
    gone.unlink()
    with pytest.raises(TableFileMissingError) as caught:
        read_delta(spark, path)
    message = str(caught.value)
    assert f"Delta table {path} (version 0): data file {gone} is missing" in message
    assert "restore it from a backup" in message and "--rebuild" in message


def test_replayed_write_adds_nothing(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.createDataFrame([(1,), (2,)], "id long")
    assert write_delta(df, path, app_id="land", version=7).version == 0
    replay = write_delta(df, path, app_id="land", version=7)
    older = write_delta(df, path, app_id="land", version=3)
    assert replay.skipped and older.skipped and not replay.committed
    table = DeltaTable(str(path))
    assert (table.version(), table.transaction_version("land")) == (0, 7)
    assert read_delta(spark, path).count() == 2
    assert write_delta(df, path, app_id="land", version=8).version == 1
    assert write_delta(df, path, app_id="other", version=1).version == 2


def test_arrow_writes_from_the_driver_are_idempotent_too(spark, tmp_path):
    path = tmp_path / "small"
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    first = write_arrow(rows, path, mode="overwrite", app_id="watermark", version=4)
    assert (first.committed, first.version, first.num_records) == (True, 0, 2)
    replay = write_arrow(rows, path, mode="overwrite", app_id="watermark", version=4)
    assert replay.skipped and not replay.committed and replay.version == 0
    more = pa.table({"id": pa.array([3], pa.int64())})
    assert write_arrow(more, path, mode="overwrite", app_id="watermark", version=5).version == 1
    assert write_arrow(more, path).version == 2  # append, no app transaction
    assert sorted(r.id for r in read_delta(spark, path).collect()) == [3, 3]
    assert DeltaTable(str(path)).transaction_version("watermark") == 5
    with pytest.raises(ValueError, match="give app_id and version together"):
        write_arrow(more, path, app_id="watermark")


def test_commit_time_replay_check_drops_the_files(tmp_path):
    """A write that started before another run committed the same (app, version) adds nothing."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64())}))
    schema = TableSchema((("id", "long"),))
    plan = WritePlan(path, "w1", "append", schema, schema, app_id="app", version=1, start_version=0)
    files = TaskFiles(plan)
    files.write(pa.record_batch({"id": pa.array([2, 3], pa.int64())}))
    adds = files.close()
    assert all(os.path.exists(os.path.join(path, a["path"])) for a in adds)

    DeltaTable(path).create_write_transaction(  # the concurrent run commits first
        [], "append", pa.schema([("id", pa.int64())]), commit_properties=_txn("app", 1)
    )
    commit_files(plan, adds)
    assert DeltaTable(path).version() == 1
    assert not any(os.path.exists(os.path.join(path, a["path"])) for a in adds)


def _txn(app_id, version):
    from deltalake.transaction import CommitProperties, Transaction

    return CommitProperties(app_transactions=[Transaction(app_id, version)])


def test_failed_job_leaves_no_files(spark, tmp_path):
    path = tmp_path / "t"
    write_delta(spark.createDataFrame([(-1,)], "id long"), path)
    before = _files_on_disk(path)
    # One task fails after writing its first 10k-row batches; its failure cancels the stage,
    # which may kill the other task's Python worker before that task can clean up.
    boom = F.when(F.col("id") == 35_000, F.raise_error(F.lit("boom")))
    ids = spark.range(0, 40_000, numPartitions=2)
    failing = ids.select(boom.otherwise(F.col("id")).alias("id"))
    with pytest.raises(Exception, match="boom"):
        write_delta(failing, path)
    assert _files_on_disk(path) == before
    assert DeltaTable(str(path)).version() == 0


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from ticdc_lake.runtime.spark import build_session
    from ticdc_lake.delta import write_delta

    spark = build_session("killed-write", master="local[1]", conf={"spark.ui.enabled": "false"})

    def slow(batches):
        for batch in batches:
            yield batch
            time.sleep(0.5)

    df = spark.range(0, 1_000_000, numPartitions=1).mapInArrow(slow, "id long")
    write_delta(df, sys.argv[1], app_id="killed", version=1)
    """
)


@pytest.mark.slow
def test_killed_write_leaves_table_readable_and_rerun_correct(spark, tmp_path):
    path = tmp_path / "t"
    write_delta(spark.createDataFrame([(-1,)], "id long"), path)
    committed = _files_on_disk(path)

    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path)],
        start_new_session=True,  # its own process group: the JVM and Python workers die with it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while not (_files_on_disk(path) - committed):
            assert child.poll() is None, "the writer ended before it started writing"
            assert time.monotonic() < deadline, "the writer never started writing"
            time.sleep(0.2)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()

    orphans = _files_on_disk(path) - committed
    assert orphans
    table = DeltaTable(str(path))
    assert table.version() == 0 and table.transaction_version("killed") is None
    assert [r.id for r in read_delta(spark, path).collect()] == [-1]

    rerun = write_delta(spark.range(0, 1000), path, app_id="killed", version=1)
    assert rerun.committed and read_delta(spark, path).count() == 1001
    removed = DeltaTable(str(path)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    assert {str(path / f) for f in removed} == orphans
    assert read_delta(spark, path).count() == 1001


# --- merge ------------------------------------------------------------------------------------


def _merge_rows(path) -> dict:
    return {r["k"]: r["v"] for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist()}


def test_merge_upserts_deletes_and_key_changes(spark, tmp_path):
    path = tmp_path / "gold"
    first = spark.createDataFrame(
        [(k, f"v{k}", False) for k in range(1, 6)] + [(99, "gone", True)],
        "k long, v string, deleted boolean",
    )
    created = merge_delta(first, path, ["k"], delete_column="deleted", app_id="gold", version=1)
    assert created.committed and _merge_rows(path) == {k: f"v{k}" for k in range(1, 6)}
    assert "deleted" not in DeltaTable(str(path)).schema().to_arrow().names

    changes = spark.createDataFrame(
        [
            (1, "updated", False),  # update
            (2, None, True),  # delete
            (3, None, True),  # key change 3 → 30: a delete and an insert
            (30, "v3", False),
            (6, "new", False),  # insert
            (77, None, True),  # delete of an absent key: nothing
        ],
        "k long, v string, deleted boolean",
    )
    merged = merge_delta(changes, path, ["k"], delete_column="deleted", app_id="gold", version=2)
    assert merged.committed and merged.version == 1
    expected = {1: "updated", 4: "v4", 5: "v5", 30: "v3", 6: "new"}
    assert _merge_rows(path) == expected
    assert {r.k: r.v for r in read_delta(spark, path).collect()} == expected

    replay = merge_delta(changes, path, ["k"], delete_column="deleted", app_id="gold", version=2)
    assert replay.skipped and DeltaTable(str(path)).version() == 1

    with pytest.raises(MergeSourceError, match="more than once"):
        merge_delta(pa.table({"k": [1, 1], "v": ["a", "b"]}), path, ["k"])
    with pytest.raises(MergeSourceError, match="nulls"):
        merge_delta(pa.table({"k": pa.array([None], pa.int64()), "v": ["a"]}), path, ["k"])


def test_merge_by_unsigned_bigint_key_above_int64(tmp_path):
    """delta-rs clamps DECIMAL(20,0) file statistics at 2^63 − 1; a merge that skipped files by
    them would insert a second row for the key instead of updating it."""
    path = str(tmp_path / "gold")
    key = pa.decimal128(20, 0)
    merge_delta(pa.table({"k": pa.array([U64_MAX, Decimal(1)], key), "v": ["a", "b"]}), path, ["k"])
    merge_delta(pa.table({"k": pa.array([Decimal(5)], key), "v": ["e"]}), path, ["k"])
    merge_delta(pa.table({"k": pa.array([U64_MAX], key), "v": ["updated"]}), path, ["k"])
    assert _merge_rows(path) == {U64_MAX: "updated", Decimal(1): "b", Decimal(5): "e"}


def test_merge_with_file_skipping_by_key_range(tmp_path, monkeypatch):
    monkeypatch.setattr(merge_module, "REWRITE_ROWS", 0)  # delta-rs's merge, not a rewrite
    path = str(tmp_path / "gold")
    for start in (0, 200, 400):  # three files of even keys with disjoint ranges
        keys = list(range(start, start + 200, 2))
        merge_delta(pa.table({"k": keys, "v": ["old"] * 100}), path, ["k"])
    # Two updates and an insert inside the middle file's range: the other files are skipped.
    result = merge_delta(pa.table({"k": [250, 251, 300], "v": ["new"] * 3}), path, ["k"])
    assert result.metrics["num_target_files_skipped_during_scan"] == 2
    rows = _merge_rows(path)
    assert len(rows) == 301 and rows[250] == rows[251] == rows[300] == "new"
    assert rows[0] == rows[252] == rows[598] == "old"


@pytest.mark.parametrize(
    "keys, key_type",
    [(["k"], pa.int64()), (["k"], pa.decimal128(20, 0)), (["k", "s"], pa.string())],
)
def test_a_small_table_rewritten_whole_ends_as_delta_rs_merges_it(
    tmp_path, monkeypatch, keys, key_type
):
    """Upserts, deletes (of present and absent keys), key changes, a replay and a merge that
    deletes every row: the rewrite of a small table and delta-rs's merge leave the same rows,
    versions and results; a table above REWRITE_ROWS, partitioned, or given other columns
    goes to delta-rs, as does one of more than REWRITE_BYTES."""
    rng = random.Random(7)

    def key_array(keys):
        if pa.types.is_decimal(key_type):
            return pa.array([Decimal(k) for k in keys], key_type)
        return pa.array([str(k) for k in keys] if key_type == pa.string() else keys, key_type)

    def change_sets():
        live = set()
        for version in range(1, 11):
            chosen = rng.sample(range(40), 15)
            deleted = [rng.random() < 0.3 for _ in chosen]
            if version == 8:  # new keys only: appended, the table's files stay
                chosen, deleted = [100, 101, 102], [False] * 3
            if version == 9:  # a key that was never there: nothing to commit
                chosen, deleted = [999], [True]
            if version == 10:  # every row goes, and a key that was never there
                chosen = sorted(live | {99})
                deleted = [True] * len(chosen)
            for key, gone in zip(chosen, deleted, strict=True):
                (live.discard if gone else live.add)(key)
            yield (
                version,
                pa.table(
                    {
                        "k": key_array(chosen),
                        "s": [f"s{k % 3}" for k in chosen],
                        "v": pa.array([rng.random() for _ in chosen]),
                        "deleted": deleted,
                    }
                ),
            )

    outcomes = {}
    for limit in (0, merge_module.REWRITE_ROWS):  # delta-rs's merge, then the rewrite
        monkeypatch.setattr(merge_module, "REWRITE_ROWS", limit)
        rng.seed(7)
        path = str(tmp_path / f"limit{limit}")
        results = []
        for version, changes in change_sets():
            files = set(DeltaTable(path).file_uris()) if version == 8 else set()
            for _ in range(2):  # the second is a replay
                result = merge_delta(changes, path, keys, delete_column="deleted", app_id="g",
                                     version=version)  # fmt: skip
                results.append((result.committed, result.version, result.skipped))
            rows = DeltaTable(path).to_pyarrow_table().sort_by([(k, "ascending") for k in keys])
            results.append(rows.to_pylist())
            assert files <= set(DeltaTable(path).file_uris())
        outcomes[limit] = (results, DeltaTable(path).version())
        operations = {info["operation"] for info in DeltaTable(path).history() if info["version"]}
        assert operations == ({"WRITE"} if limit else {"MERGE"})
        assert (DeltaTable(path).version(), len(results)) == (8, 30)  # version 9: no commit
    assert outcomes[merge_module.REWRITE_ROWS] == outcomes[0]
    assert outcomes[0][0][-1] == []  # the last merge deleted every row

    def merged_by_delta_rs(path, changes, **options):
        return "rewritten" not in merge_delta(changes, path, ["k"], **options).metrics

    wide = pa.table({"k": pa.array(range(merge_module.REWRITE_ROWS + 1), pa.int64())})
    merge_delta(wide, str(tmp_path / "wide"), ["k"])
    assert merged_by_delta_rs(str(tmp_path / "wide"), pa.table({"k": pa.array([1], pa.int64())}))
    blobs = pa.table(
        {"k": pa.array([1, 2], pa.int64()), "b": [os.urandom(40 << 20) for _ in range(2)]}
    )
    merge_delta(blobs, str(tmp_path / "blobs"), ["k"])
    assert merged_by_delta_rs(str(tmp_path / "blobs"), blobs.slice(0, 1))
    small = pa.table({"k": pa.array([1, 2], pa.int64()), "p": ["a", "b"]})
    merge_delta(small, str(tmp_path / "parts"), ["k"], partition_by=["p"])
    assert merged_by_delta_rs(str(tmp_path / "parts"), small)
    merge_delta(small, str(tmp_path / "cols"), ["k"])
    assert not merged_by_delta_rs(str(tmp_path / "cols"), small)
    extra = small.append_column("x", pa.array([1, 2]))
    assert merged_by_delta_rs(str(tmp_path / "cols"), extra, merge_schema=True)
    assert merged_by_delta_rs(str(tmp_path / "cols"), small)  # the table has x now


@pytest.mark.parametrize("key_type", [pa.int64(), pa.decimal128(20, 0)])
def test_merge_on_the_executors_ends_as_the_driver_merge(spark, tmp_path, monkeypatch, key_type):
    """delta-spark's MERGE (merge_frame) and delta-rs's (merge_delta) leave the same rows and
    versions from the same change sets: upserts, deletes of present and absent keys, a
    replay of each step, a column added by the changes; its commits are delta-spark's, with
    the step's app transaction, and delta-rs reads the table."""
    monkeypatch.setattr(merge_module, "REWRITE_ROWS", 0)  # delta-rs's merge, not a rewrite
    rng = random.Random(11)
    odd = "v.x"

    def key_array(keys):
        return pa.array([Decimal(k) for k in keys] if key_type != pa.int64() else keys, key_type)

    def change_set(version):
        chosen = rng.sample(range(60), 20) if version < 6 else [U64_KEYS.get(key_type, 7)]
        columns = {
            "k": key_array(chosen),
            odd: pa.array([rng.random() for _ in chosen]),
            "deleted": [rng.random() < 0.3 and version > 1 for _ in chosen],
        }
        if version >= 4:  # a column the table lacks: the merge adds it
            columns["added"] = pa.array([f"a{version}"] * len(chosen))
        return pa.table(columns)

    results = {}
    for engine in ("delta-rs", "delta-spark"):
        rng.seed(11)
        path = str(tmp_path / engine)
        seen = []
        for version in range(1, 7):
            changes = change_set(version)
            for _ in range(2):  # the second is a replay
                step = {"delete_column": "deleted", "app_id": "g", "version": version}
                if engine == "delta-spark" and version > 1:
                    frame = spark.createDataFrame(changes)
                    result = merge_frame(frame, path, ["k"], **step)
                else:
                    result = merge_delta(changes, path, ["k"], merge_schema=True, **step)
                seen.append((result.committed, result.version, result.skipped))
            table = DeltaTable(path)
            seen.append(table.to_pyarrow_table().sort_by("k").to_pylist())
        results[engine] = (seen, table.version(), table.transaction_version("g"))
        history = sorted(table.history(), key=lambda info: info["version"])
    assert results["delta-spark"] == results["delta-rs"]
    assert results["delta-rs"][1:] == (5, 6)
    # Every merge after the first write is delta-spark's, and Spark reads what delta-rs reads.
    assert {info["engineInfo"] for info in history[1:]} == {"Apache-Spark/4.1.1 Delta-Lake/4.1.0"}
    assert {info["operation"] for info in history[1:]} == {"MERGE"}
    assert read_delta(spark, tmp_path / "delta-spark").count() == len(results["delta-rs"][0][-1])
    with pytest.raises(MergeSourceError, match="lacks key"):
        merge_frame(spark.createDataFrame(change_set(7)), path, ["nope"])


def test_a_column_name_with_a_backtick_is_merged_by_delta_spark(spark, tmp_path, monkeypatch):
    """MySQL allows a backtick in a column name; delta-rs's MERGE fails on it ("Expected close
    delimiter"), so such a change set goes to delta-spark, whose SQL quotes it."""
    monkeypatch.setattr(merge_module, "REWRITE_ROWS", 0)
    path = str(tmp_path / "gold")
    odd = "a``b`c"
    merge_delta(pa.table({"k": [1, 2], odd: ["x", "y"]}), path, ["k"], app_id="g", version=1)
    changes = pa.table({"k": [2, 3], odd: ["z", "w"], "gone": [True, False]})
    merged = merge_delta(changes, path, ["k"], delete_column="gone", app_id="g", version=2)
    assert merged.committed and merged.version == 1
    table = DeltaTable(path)
    assert table.to_pyarrow_table().sort_by("k").to_pylist() == [
        {"k": 1, odd: "x"},
        {"k": 3, odd: "w"},
    ]
    assert table.history(1)[0]["engineInfo"].startswith("Apache-Spark/")
    replay = merge_delta(changes, path, ["k"], delete_column="gone", app_id="g", version=2)
    assert replay.skipped and DeltaTable(path).version() == 1


U64_KEYS = {pa.decimal128(20, 0): int(U64_MAX)}


def test_reader_matches_deltalake_after_merges_and_deletes(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.range(0, 500).select("id", (F.col("id") % 5).cast("string").alias("p"))
    write_delta(df, path, partition_by=["p"])
    merge_delta(pa.table({"id": [3, 1000], "p": ["3", "0"]}), path, ["id", "p"])
    DeltaTable(str(path)).delete("id < 100")
    back = read_delta(spark, path)
    assert back.count() == 401
    assert _spark_rows(back, "id") == _delta_rows(path, "id")


def test_refuses_deletion_vectors_and_column_mapping(spark, tmp_path):
    data = pa.table({"id": pa.array([1], pa.int64())})
    write_deltalake(str(tmp_path / "dv"), data)
    DeltaTable(str(tmp_path / "dv")).alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    write_deltalake(str(tmp_path / "cm"), data, configuration={"delta.columnMapping.mode": "name"})

    with pytest.raises(UnsupportedTableError, match="deletion vectors"):
        read_delta(spark, tmp_path / "dv")
    with pytest.raises(UnsupportedTableError, match="column mapping"):
        read_delta(spark, tmp_path / "cm")
    with pytest.raises(UnsupportedTableError, match="column mapping"):
        write_delta(spark.createDataFrame([(2,)], "id long"), tmp_path / "cm")


def test_a_failed_write_deletes_its_files_unless_its_commit_reached_the_log(tmp_path):
    path = str(tmp_path / "t")
    schema = TableSchema((("id", "long"),), ())
    ids = pa.record_batch({"id": pa.array([1, 2], pa.int64())})

    def written(write_id: str) -> tuple[WritePlan, list[dict]]:
        plan = WritePlan(path, write_id, "append", schema, schema)
        (report,) = WriteTask(plan)(iter([ids]))
        return plan, [json.loads(add) for add in report.column("add").to_pylist()]

    committed, adds = written("w1")
    commit_files(committed, adds)
    discard_uncommitted(committed)  # e.g. an error raised after the commit was written
    assert DeltaTable(path).to_pyarrow_table().num_rows == 2

    failed, _ = written("w2")
    assert len(_files_on_disk(tmp_path / "t")) == 2
    discard_uncommitted(failed)
    assert {os.path.basename(f) for f in _files_on_disk(tmp_path / "t")} == {
        os.path.basename(add["path"]) for add in adds
    }


def test_task_files_roll_over_by_parquet_size_and_split_by_partition(tmp_path):
    path = str(tmp_path / "t")
    schema = TableSchema((("id", "long"), ("p", "integer")), ("p",))
    plan = WritePlan(path, "w1", "append", schema, schema, max_file_bytes=1)
    files = TaskFiles(plan)
    rows, batch = 300_000, 10_000
    for start in range(0, rows, batch):  # one partition value per batch: no grouping
        ids = pa.array(range(start, start + batch), pa.int64())
        files.write(pa.record_batch({"id": ids, "p": pa.array([1] * batch, pa.int32())}))
    mixed = {"id": pa.array([0, 1, 2], pa.int64()), "p": pa.array([2, None, 2], pa.int32())}
    files.write(pa.record_batch(mixed))
    adds = files.close()
    # Row groups are written once ROW_GROUP_ROWS are buffered; a file closes after the row
    # group that takes it past max_file_bytes.
    group = -(-ROW_GROUP_ROWS // batch) * batch
    sizes = sorted((a["partition_values"]["p"] or "null", a["num_records"]) for a in adds)
    assert sizes == [("1", rows - 2 * group), ("1", group), ("1", group), ("2", 2), ("null", 1)]
    assert all(os.path.getsize(os.path.join(path, a["path"])) == a["size"] for a in adds)


def test_wide_rows_close_row_groups_by_bytes_so_readers_can_split_the_file(tmp_path):
    path = str(tmp_path / "t")
    schema = TableSchema((("id", "long"), ("value", "binary")), ())
    files = TaskFiles(WritePlan(path, "w1", "append", schema, schema))
    batch, width = 1_000, 10_000  # 10 MB of values per batch
    for start in range(0, 40 * batch, batch):
        ids = pa.array(range(start, start + batch), pa.int64())
        files.write(pa.record_batch({"id": ids, "value": pa.array([b"x" * width] * batch)}))
    (add,) = files.close()
    metadata = pq.ParquetFile(os.path.join(path, add["path"])).metadata
    assert add["num_records"] == metadata.num_rows == 40 * batch < ROW_GROUP_ROWS
    groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    # About 400 MB of values: row groups of at most ROW_GROUP_BYTES (plus one batch).
    assert len(groups) >= 400 * 10**6 // (ROW_GROUP_BYTES + batch * width)
    assert all(rows * width <= ROW_GROUP_BYTES + batch * width for rows in groups)


@pytest.mark.spark
def test_size_hint_sets_how_many_tasks_write(spark, tmp_path):
    df = spark.range(0, 4000, numPartitions=8)
    cores = spark.sparkContext.defaultParallelism
    small = write_delta(df, tmp_path / "small", size_hint_bytes=1000)
    assert small.num_files == cores  # small: one file per core, not one per input partition
    larger = write_delta(df, tmp_path / "larger", max_file_bytes=1000, size_hint_bytes=5000)
    assert larger.num_files == max(cores, 5)
    assert write_delta(df, tmp_path / "free").num_files == 8
    assert read_delta(spark, tmp_path / "small").count() == 4000
