"""Bronze cut into even splits that decode's tasks read themselves (stages/bronze_splits.py)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ticdc_lake.delta.read import DataFile
from ticdc_lake.stages import bronze_splits
from ticdc_lake.stages.bronze_splits import SplitReader, even_splits

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
def test_splits_hold_every_row_once_in_order_and_as_many_each(files, count):
    splits = even_splits(files, count)
    sizes = [sum(piece.stop - piece.start for piece in split) for split in splits]
    assert sum(sizes) == 64 and len(splits) == min(count, 64)
    assert max(sizes) - min(sizes[:-1] or sizes) == 0 and sizes[-1] <= sizes[0]
    reader = SplitReader(tuple(splits), COLUMNS, (1, 2))
    offsets = [row["offset"] for split in splits for row in rows_of(reader, split)]
    assert offsets == list(range(64))


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


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_a_split_reads_each_file_it_touches_in_one_piece(files, count):
    for split in even_splits(files, count):
        paths = [piece.path for piece in split]
        assert len(paths) == len(set(paths))
