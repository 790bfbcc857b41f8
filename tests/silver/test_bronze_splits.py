"""Bronze cut into even splits that decode's tasks read themselves (silver/bronze_splits.py)."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ticdc_lake.delta.read import DataFile
from ticdc_lake.silver import bronze_splits
from ticdc_lake.silver.bronze_splits import RowRange, SplitReader, even_splits

COLUMNS = ("topic", "offset", "batch_id")


@pytest.fixture
def files(tmp_path):
    """Three files of 23, 0 and 41 rows, in row groups of up to 10 rows; topic is a partition
    value, kept in the log, not in the files."""
    written, offset = [], 0
    for number, (rows, topic) in enumerate([(23, "a"), (0, "a"), (41, "b")]):
        path = tmp_path / f"part-{number}.parquet"
        table = pa.table(
            {
                "offset": pa.array(range(offset, offset + rows), pa.int64()),
                "batch_id": pa.array([1 + i % 2 for i in range(rows)], pa.int64()),
            }
        )
        pq.write_table(table, path, row_group_size=10)
        written.append(DataFile(str(path), path.stat().st_size, (("topic", topic),)))
        offset += rows
    return written


def rows_of(reader: SplitReader, split) -> list[dict]:
    return [row for piece in split for batch in reader.read(piece) for row in batch.to_pylist()]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 64, 200])
def test_splits_hold_every_row_once_in_order_and_as_much_work_each(files, count):
    splits = even_splits(files, count)
    assert 0 < len(splits) <= min(count, 64)
    reader = SplitReader(tuple(splits), COLUMNS, (1, 2))
    offsets = [row["offset"] for split in splits for row in rows_of(reader, split)]
    assert offsets == list(range(64))
    work = {
        (file.path, number): (size + bronze_splits.RECORD_COST_BYTES * rows) / rows
        for file in files
        for number, (rows, size) in enumerate(bronze_splits._row_group_sizes(file.path))
        if rows
    }
    done = [
        sum(work[piece.path, number] * rows for piece in split for number, rows in _rows(piece))
        for split in splits
    ]
    share, most = sum(done) / count, max(work.values())
    # Each split but the last reaches its share of the work by less than a row's worth.
    assert all(share - most < figure < share + most for figure in done[:-1] if count <= 64)
    assert done[-1] < share + most


def _rows(piece: RowRange) -> list[tuple[int, int]]:
    """(row group, rows of it in the piece) for each group the piece reads."""
    sizes = pq.ParquetFile(piece.path).metadata
    taken, at = [], 0
    for number in piece.row_groups:
        rows = sizes.row_group(number).num_rows
        low, high = max(piece.start, at), min(piece.stop, at + rows)
        taken.append((number, high - low))
        at += rows
    return taken


def test_splits_hold_as_much_work_not_as_many_records(tmp_path):
    """A thousand watermark-sized records and twenty large ones: as many records each would put
    every large record in the second of two splits; as much work each gives the first all the
    small ones and some of the large."""
    small, large = tmp_path / "small.parquet", tmp_path / "large.parquet"
    pq.write_table(pa.table({"offset": range(1000), "value": [b"x" * 8] * 1000}), small)
    values = [random.Random(row).randbytes(50_000) for row in range(20)]  # no dictionary
    pq.write_table(pa.table({"offset": range(1000, 1020), "value": values}), large)
    files = [DataFile(str(path), path.stat().st_size) for path in (small, large)]

    first, second = even_splits(files, 2)

    assert next((p.path, p.start, p.stop) for p in first) == (str(small), 0, 1000)
    large_rows = [
        p.stop - p.start for split in (first, second) for p in split if p.path == str(large)
    ]
    assert sum(large_rows) == 20 and 0 < large_rows[0] < large_rows[1]


def test_the_reader_adds_partition_values_and_keeps_the_wanted_batches(files):
    splits = tuple(even_splits(files, 3))
    reader = SplitReader(splits, COLUMNS, (2,))
    numbers = pa.record_batch({"id": pa.array([2, 0], pa.int64())})
    rows = pa.Table.from_batches(list(reader(iter([numbers])))).to_pylist()
    assert {row["batch_id"] for row in rows} == {2}
    expected = [row for number in (2, 0) for row in rows_of(reader, splits[number])]
    assert rows == [row for row in expected if row["batch_id"] == 2]
    assert {row["topic"] for row in rows} == {"a", "b"}
    assert all(row["topic"] == ("a" if row["offset"] < 23 else "b") for row in rows)


@pytest.mark.parametrize("count", [1, 3, 7])
def test_a_row_group_is_read_a_few_records_at_a_time(files, count, monkeypatch):
    monkeypatch.setattr(bronze_splits, "BATCH_RECORDS", 3)
    reader = SplitReader(tuple(even_splits(files, count)), COLUMNS, (1, 2))
    batches = [batch for split in reader.splits for p in split for batch in reader.read(p)]
    assert max(batch.num_rows for batch in batches) == 3
    assert [row["offset"] for b in batches for row in b.to_pylist()] == list(range(64))


def _groups(file: DataFile) -> list[pq.RowGroupMetaData]:
    metadata = pq.ParquetFile(file.path).metadata
    return [metadata.row_group(number) for number in range(metadata.num_row_groups)]


@pytest.mark.parametrize("records", [1, 4, 7])
def test_batches_hold_batch_bytes_of_records(files, records, monkeypatch):
    """Records of many KB each (a realistic export's): batches by bytes, not by count."""
    groups = _groups(files[2])
    rows, size = sum(g.num_rows for g in groups), sum(g.total_byte_size for g in groups)
    monkeypatch.setattr(bronze_splits, "BATCH_BYTES", -(-records * size // rows))
    assert bronze_splits.batch_records(groups) == records
    reader = SplitReader(tuple(even_splits(files[2:], 1)), COLUMNS, (1, 2))
    batches = [batch for split in reader.splits for p in split for batch in reader.read(p)]
    assert max(batch.num_rows for batch in batches) == records
    assert [row["offset"] for b in batches for row in b.to_pylist()] == list(range(23, 64))


def test_a_batch_holds_a_record_however_large(files, monkeypatch):
    monkeypatch.setattr(bronze_splits, "BATCH_BYTES", 1)
    assert bronze_splits.batch_records(_groups(files[0])) == 1
    assert bronze_splits.batch_records([]) == 1


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_a_split_reads_each_file_it_touches_in_one_piece(files, count):
    for split in even_splits(files, count):
        paths = [piece.path for piece in split]
        assert len(paths) == len(set(paths))
