"""A land batch in one pass: a batch of new offsets in plain Parquet files lands in one Spark
job whose tasks read the files, write bronze's files and tally them; any other batch leaves no
file of that pass behind and is sorted as before."""

from __future__ import annotations

import dataclasses
import math
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from ticdc_lake.bronze import export_source, exports, land_batch, land_pass
from ticdc_lake.bronze.land import LandTables, land
from ticdc_lake.bronze.land_batch import EXPORT_READER, SPARK_PARQUET
from ticdc_lake.bronze.land_pass import IS_RECORD, TALLIED, OffsetSpan, PassTally, TaskTally
from ticdc_lake.config import load_config
from ticdc_lake.lake.layout import LakeLayout

from tests.bronze.test_export_parquet import ODD_ROWS, kafka_table, parquet_landing, write
from tests.bronze.test_land import (
    SimulatedKill,
    bronze_records,
    expected,
    retopic,
    table,
    write_config,
)


def tally(*spans: tuple[int, int, int, int]) -> PassTally:
    """Each (partition, lowest offset, highest, count) a task's span of distinct offsets."""
    found = [OffsetSpan("t", partition, low, high, count, count) for partition, low, high, count
             in spans]  # fmt: skip
    return PassTally([], [], found)


def test_offsets_are_unique_when_no_task_repeats_one_and_their_spans_are_disjoint():
    assert tally((0, 0, 9, 10), (0, 10, 19, 10), (1, 0, 9, 10)).offsets_unique() is True
    assert tally((0, 0, 9, 5), (0, 20, 29, 3)).offsets_unique() is True  # holes are not repeats
    assert tally().offsets_unique() is True


def test_a_task_writes_a_batch_of_records_as_it_is_and_drops_the_rows_that_are_not():
    every = pa.record_batch({"offset": [1, 2, 3], IS_RECORD: [True, True, True]})
    mixed = pa.record_batch({"offset": [1, 2, 3], IS_RECORD: [True, False, None]})
    assert land_pass._records(every) is every
    assert land_pass._records(mixed).column("offset").to_pylist() == [1]


def test_spans_that_meet_leave_it_to_the_offsets():
    assert tally((0, 0, 9, 10), (0, 9, 19, 11)).offsets_unique() is None
    assert tally((0, 0, 100, 50), (0, 1, 99, 50)).offsets_unique() is None  # interleaved


def test_a_task_that_saw_an_offset_twice_says_no():
    repeated = PassTally([], [], [OffsetSpan("t", 0, 0, 9, count=10, distinct=9)])
    assert repeated.offsets_unique() is False


def batch(rows: list[tuple]) -> pa.RecordBatch:
    """(file_index, partition, offset or None, is_record) rows of topic t."""
    file_index, partition, offset, is_record = zip(*rows, strict=True)
    return pa.record_batch(
        [pa.array(file_index, pa.int32()), pa.array(["t"] * len(rows)),
         pa.array(partition, pa.int32()), pa.array(offset, pa.int64()), pa.array(is_record)],
        names=list(TALLIED),
    )  # fmt: skip


def test_a_task_tally_stays_one_span_while_batches_follow_each_other():
    tally = TaskTally()
    for start in range(0, 50, 10):  # five batches of file 0, partition 0, in offset order
        tally.add(batch([(0, 0, offset, True) for offset in range(start, start + 10)]))
    tally.add(batch([(1, 0, None, False), (1, 1, 7, True)]))  # an error row, another partition
    report = tally.report()
    assert sorted(report["spans"]) == [["t", 0, 0, 49, 50, 50], ["t", 1, 7, 7, 1, 1]]
    assert sorted(report["cells"], key=str) == sorted(
        [[0, "t", 0, True, 0, 49, 50], [1, "t", 0, False, None, None, 1],
         [1, "t", 1, True, 7, 7, 1]], key=str,
    )  # fmt: skip
    assert PassTally.of([{"adds": [], **report}]).offsets_unique() is True


def test_a_batch_going_back_starts_a_span_and_spans_that_meet_are_left_to_the_offsets():
    tally = TaskTally()
    tally.add(batch([(0, 0, offset, True) for offset in range(10, 20)]))
    tally.add(batch([(0, 0, offset, True) for offset in (0, 1, 2)]))  # before: disjoint
    # After the last span: merged with it, and the merged span meets the first one.
    tally.add(batch([(0, 0, offset, True) for offset in (15, 30)]))
    report = tally.report()
    assert report["spans"] == [["t", 0, 10, 19, 10, 10], ["t", 0, 0, 30, 5, 5]]
    assert PassTally.of([{"adds": [], **report}]).offsets_unique() is None
    tally.add(batch([(0, 0, 40, True), (0, 0, 40, True)]))
    assert PassTally.of([{"adds": [], **tally.report()}]).offsets_unique() is False


def test_a_batch_of_several_files_is_tallied_file_by_file():
    """Spark hands a task its files largest first, several in one Arrow batch: one span per
    file keeps the tasks' spans disjoint (one per batch, 0-12 here, would meet the other
    task's 4-5 and leave it to a count of the offsets)."""
    first, second = TaskTally(), TaskTally()
    first.add(batch([(2, 0, o, True) for o in (10, 11, 12)] + [(0, 0, o, True) for o in (0, 1, 2)]))
    first.add(batch([(0, 0, 3, True)]))  # file 0 again, after file 0's last: not a span of its own
    second.add(batch([(1, 0, o, True) for o in (4, 5)]))
    assert first.report()["spans"] == [["t", 0, 10, 12, 3, 3], ["t", 0, 0, 3, 4, 4]]
    reports = [{"adds": [], **tally.report()} for tally in (first, second)]
    assert PassTally.of(reports).offsets_unique() is True


def spark_jobs(spark, run) -> tuple[object, int]:
    """``run()``'s result and how many Spark jobs it ran."""
    context, group = spark.sparkContext, f"land-pass-test-{uuid.uuid4().hex}"
    context.setJobGroup(group, "counted")
    try:
        result = run()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return result, len(context.statusTracker().getJobIdsForGroup(group))


def unreferenced_files(tables: LandTables) -> set[Path]:
    """Data files in bronze's directory that its Delta table does not reference."""
    root = Path(tables.bronze)
    referenced = {Path(uri.removeprefix("file://")) for uri in DeltaTable(str(root)).file_uris()}
    present = {path for path in root.rglob("*.parquet") if "_delta_log" not in path.parts}
    assert referenced <= present
    return present - referenced


@pytest.mark.spark
def test_a_batch_of_new_offsets_lands_in_one_spark_job(spark, generated, tmp_path):
    config, records = parquet_landing(tmp_path, generated)
    result, jobs = spark_jobs(spark, lambda: land(spark, config))
    assert jobs == 1
    assert result.reader == EXPORT_READER
    everything = [r for stream in records.values() for r in stream]
    assert (result.records_added, result.duplicates, result.conflicts) == (len(everything), 0, 0)
    tables = LandTables.of(LakeLayout(config.lake))
    assert bronze_records(tables) == expected(everything)
    assert not unreferenced_files(tables)


@pytest.mark.spark
def test_a_batch_the_pass_lands_never_plans_spark_s_reader(spark, generated, tmp_path, monkeypatch):
    """Its frames take a few hundred ms of the driver's planning: made only when used."""
    config, records = parquet_landing(tmp_path, generated)

    def unused(*args):
        raise AssertionError("Spark's Parquet reader planned for a batch the pass lands")

    monkeypatch.setattr(land_batch, "read_kafka_parquet", unused)
    result = land(spark, config)
    assert (result.reader, result.reader_fallback) == (EXPORT_READER, "")
    everything = [r for stream in records.values() for r in stream]
    assert bronze_records(LandTables.of(LakeLayout(config.lake))) == expected(everything)


@pytest.mark.spark
def test_the_pass_runs_whole_rounds_of_the_cores(spark, generated, tmp_path, monkeypatch):
    """Three tasks of one size on two cores would take two rounds, the second on one core."""
    config, records = parquet_landing(tmp_path, generated)
    monkeypatch.setattr(land_batch, "write_tasks", lambda *args: 3)
    dealt = []

    def shares(partitions, tasks):
        dealt.append(tasks)
        return land_pass.shares(partitions, tasks)

    monkeypatch.setattr(land_batch, "shares", shares)
    result = land(spark, config)
    assert dealt == [2 * math.ceil(3 / 2)] and spark.sparkContext.defaultParallelism == 2
    assert result.records_added == sum(len(stream) for stream in records.values())


@pytest.mark.spark
def test_a_batch_that_is_not_all_new_leaves_no_file_of_its_pass(spark, generated, tmp_path):
    config, records = parquet_landing(tmp_path, generated)
    land(spark, config)
    again = [dataclasses.replace(r, value=b"other") if r.offset == 3 else r for r in records[0]]
    exports.write_export(tmp_path / "landing" / "again.parquet", again, "parquet")
    second, jobs = spark_jobs(spark, lambda: land(spark, config))
    assert jobs > 1  # the pass, then the batch sorted by its records' bytes
    assert (second.records_added, second.duplicates, second.conflicts) == (0, len(again) - 1, 1)
    tables = LandTables.of(LakeLayout(config.lake))
    assert bronze_records(tables) == expected(r for stream in records.values() for r in stream)
    assert not unreferenced_files(tables)


@pytest.fixture
def file_per_task(spark):
    """Spark's reader, sorting a batch, reads each file in a task of its own (it packs small
    files into one task); land's pass deals two files of about one size to two tasks itself."""
    name = "spark.sql.files.openCostInBytes"
    before = spark.conf.get(name)
    spark.conf.set(name, str(1 << 30))
    yield
    spark.conf.set(name, before)


@pytest.fixture
def offsets_read(monkeypatch) -> list[bool]:
    """What each check of the offsets themselves (``land_batch._offsets_unique``) found."""
    found, check = [], land_batch._offsets_unique

    def checked(*args):
        found.append(check(*args))
        return found[-1]

    monkeypatch.setattr(land_batch, "_offsets_unique", checked)
    return found


def interleaved_landing(tmp_path, generated, repeat: bool = False):
    """One partition in two files, one holding its even offsets and the other its odd ones
    (and, with ``repeat``, the odd one also the first record again): each task's offsets
    span the other's."""
    config = load_config(write_config(tmp_path, ["orders"]))
    stream = retopic(generated[0], "orders")
    even, odd = stream[0::2], stream[1::2] + (stream[:1] if repeat else [])
    exports.write_export(tmp_path / "landing" / "even.parquet", even, "parquet")
    exports.write_export(tmp_path / "landing" / "odd.parquet", odd, "parquet")
    return config, stream


@pytest.mark.spark
def test_interleaved_files_of_new_offsets_land_in_the_pass(
    spark, generated, tmp_path, file_per_task, offsets_read
):
    config, stream = interleaved_landing(tmp_path, generated)
    result = land(spark, config)
    assert offsets_read == [True]  # the tasks' spans met: the offsets were read to tell
    assert (result.records_added, result.duplicates) == (len(stream), 0)
    tables = LandTables.of(LakeLayout(config.lake))
    assert bronze_records(tables) == expected(stream)
    assert DeltaTable(str(tables.bronze)).version() == 0
    assert not unreferenced_files(tables)


@pytest.mark.spark
def test_an_offset_twice_in_interleaved_files_is_a_duplicate(
    spark, generated, tmp_path, file_per_task, offsets_read
):
    config, stream = interleaved_landing(tmp_path, generated, repeat=True)
    result = land(spark, config)
    assert offsets_read[0] is False  # the pass's files deleted, and the batch sorted
    assert (result.records_added, result.duplicates) == (len(stream), 1)
    tables = LandTables.of(LakeLayout(config.lake))
    assert bronze_records(tables) == expected(stream)
    assert not unreferenced_files(tables)


@pytest.mark.spark
def test_a_pass_killed_before_its_commit_is_landed_whole_by_the_next_run(
    spark, generated, tmp_path, monkeypatch
):
    config, records = parquet_landing(tmp_path, generated)

    def killed(*args, **kwargs):
        raise SimulatedKill("after the pass wrote its files")

    with monkeypatch.context() as patch:
        patch.setattr(land_batch, "commit_files", killed)
        with pytest.raises(SimulatedKill):
            land(spark, config)
    tables = LandTables.of(LakeLayout(config.lake))
    assert not DeltaTable.is_deltatable(str(tables.bronze))  # nothing visible
    result = land(spark, config)
    assert result.recovered
    everything = [r for stream in records.values() for r in stream]
    assert bronze_records(tables) == expected(everything)
    assert not unreferenced_files(tables)


def test_tasks_share_the_partitions_in_order_in_runs_of_about_equal_size():
    file = export_source.ExportFile("/x", 100, 0, "parquet", "none")
    sizes = [40, 10, 10, 30, 5, 5, 60, 20, 20]
    partitions = [export_source.ExportPartition(n, file, size=size) for n, size in enumerate(sizes)]
    runs = land_pass.shares(partitions, 3)
    assert [p for run in runs for p in run] == partitions  # each once, in the planned order
    # Each in the run whose third of the 200 bytes holds its middle: the 60 (bytes 100-160) in
    # the second.
    assert [sum(p.size for p in run) for run in runs] == [60, 100, 40]
    assert land_pass.shares(partitions[:1], 4) == [(partitions[0],)]  # no task without work
    empty = [export_source.ExportPartition(0, file, size=0)] * 2
    assert land_pass.shares(empty, 2) == [tuple(empty)]


def landed_bronze(tables: LandTables) -> list[dict]:
    """Bronze's rows, all but the landing time, in coordinate order."""
    rows = [dict(row, landed_at=None) for row in table(tables.bronze)]
    return sorted(rows, key=lambda row: (row["topic"], row["partition"], row["offset"]))


@pytest.mark.spark
def test_the_pass_lands_what_spark_s_reader_and_the_sorting_lands(spark, tmp_path, monkeypatch):
    """Every column of bronze, record_hash among them, alike either way, over files with µs,
    INT96 and ms timestamps in another zone, headers with null values, null keys and values, an
    extra column, small row groups, an empty file, and files without headers or timestamps."""
    odd = kafka_table([row for row in ODD_ROWS if _has_coordinates(row)])
    millis = kafka_table(ODD_ROWS[:1] * 3, pa.timestamp("ms", tz="Europe/Paris"))
    millis = millis.set_column(4, "offset", pa.array([20, 21, 22], pa.int64()))
    millis = millis.append_column("extra", pa.array([1, 2, 3]))
    landing = tmp_path / "landing"
    write(landing / "odd.parquet", odd, row_group_size=2)
    int96 = odd.set_column(4, "offset", pa.array(range(30, 30 + odd.num_rows), pa.int64()))
    write(landing / "int96.parquet", int96, use_deprecated_int96_timestamps=True)
    write(landing / "ms.parquet", millis, coerce_timestamps="ms", allow_truncated_timestamps=True)
    write(landing / "empty.parquet", kafka_table([]))
    # Spark's Kafka source without includeHeaders, and a file without timestamps at all.
    offsets = pa.array(range(60, 60 + odd.num_rows), pa.int64())
    write(
        landing / "no-headers.parquet", odd.set_column(4, "offset", offsets).drop_columns("headers")
    )
    offsets = pa.array(range(90, 90 + odd.num_rows), pa.int64())
    bare = odd.set_column(4, "offset", offsets).drop_columns(["timestamp", "timestampType"])
    write(landing / "bare.parquet", bare)
    lakes = []
    for name in ("pass", "sorted"):
        (tmp_path / name).mkdir()
        config = load_config(write_config(tmp_path / name, ["t"]))
        config = dataclasses.replace(config, inputs=(str(landing / "*"),))
        with monkeypatch.context() as patch:
            if name == "sorted":
                patch.setattr(land_batch, "land_in_one_pass", lambda *args: None)
            result = land(spark, config)
        assert result.records_added == 4 * odd.num_rows + 3 and result.errors == 0
        assert result.reader == (EXPORT_READER if name == "pass" else SPARK_PARQUET)
        lakes.append(LandTables.of(LakeLayout(config.lake)))
    assert landed_bronze(lakes[0]) == landed_bronze(lakes[1])


def _has_coordinates(row: dict) -> bool:
    coordinates = [row.get(name) for name in ("topic", "partition", "offset")]
    return None not in coordinates and coordinates[1] >= 0 and coordinates[2] >= 0


@pytest.mark.spark
def test_rows_without_coordinates_leave_the_batch_to_spark_s_reader(spark, generated, tmp_path):
    config, records = parquet_landing(tmp_path, generated)
    exports_errors = kafka_table([{"topic": "orders", "partition": 1, "offset": None}])
    write(tmp_path / "landing" / "no-offset.parquet", exports_errors)
    result, jobs = spark_jobs(spark, lambda: land(spark, config))
    assert jobs > 1 and result.reader == SPARK_PARQUET  # the pass's files deleted
    assert result.errors == 1
    tables = LandTables.of(LakeLayout(config.lake))
    assert bronze_records(tables) == expected(r for stream in records.values() for r in stream)
    (error,) = table(tables.export_errors)
    assert error["source_file"].endswith("no-offset.parquet")
    assert not unreferenced_files(tables)
