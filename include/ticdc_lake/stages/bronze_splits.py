"""Bronze records for decoding, cut into splits of about as many records, which decode's tasks
read from the files themselves (pyarrow).

Spark scanning bronze and handing the records to the Python workers as Arrow cost as much CPU
as a third of the decoding (realistic 1M: 10 s of CPU to hand over 122k records, against
3.5 s read in the tasks), on cores the decoding needs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ticdc_lake.delta.read import DataFile

# Records per Arrow batch handed to the decoder, as Spark's default for mapInArrow.
BATCH_RECORDS = 10_000


@dataclass(frozen=True)
class RowRange:
    """Rows [start, stop) of row groups of one bronze file read one after another, counted from
    the first, with the file's partition values (which Delta keeps in its log, not in the
    file)."""

    path: str
    row_groups: tuple[int, ...]
    start: int
    stop: int
    partition: tuple[tuple[str, object], ...] = ()


def even_splits(files: Sequence[DataFile], count: int) -> list[tuple[RowRange, ...]]:
    """The rows of ``files``, in order, cut into ``count`` splits of about as many rows (fewer
    splits when there are fewer rows); a split reads each file it touches in one piece."""
    groups = [
        (file, number, rows)
        for file in files
        for number, rows in enumerate(_row_group_sizes(file.path))
        if rows
    ]
    per_split = max(1, -(-sum(rows for *_, rows in groups) // max(1, count)))
    splits: list[tuple[RowRange, ...]] = []
    current: list[RowRange] = []
    room = per_split  # rows the current split still takes
    for file, number, rows in groups:
        start = 0
        while start < rows:
            stop = min(rows, start + room)
            last = current[-1] if current else None
            if last is not None and last.path == file.path and start == 0:
                # The split's previous piece ends where this group starts: one piece for both.
                current[-1] = RowRange(
                    file.path, (*last.row_groups, number), last.start, last.stop + stop,
                    file.partition,
                )  # fmt: skip
            else:
                current.append(RowRange(file.path, (number,), start, stop, file.partition))
            room -= stop - start
            start = stop
            if not room:
                splits.append(tuple(current))
                current, room = [], per_split
    if current:
        splits.append(tuple(current))
    return splits


def _row_group_sizes(path: str) -> list[int]:
    metadata = pq.ParquetFile(path).metadata
    return [metadata.row_group(number).num_rows for number in range(metadata.num_row_groups)]


@dataclass(frozen=True)
class SplitReader:
    """The records of the splits whose numbers a task is given (``mapInArrow`` batches of one
    integer column), as Arrow batches of ``columns``, only those whose ``batch_id`` is one of
    ``batches``."""

    splits: tuple[tuple[RowRange, ...], ...]
    columns: tuple[str, ...]
    batches: tuple[int, ...]

    def __call__(self, numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        wanted = pa.array(self.batches, pa.int64())
        for numbered in numbers:
            for number in numbered.column(0).to_pylist():
                for piece in self.splits[number]:
                    for records in self.read(piece):
                        keep = pc.is_in(records.column("batch_id"), wanted)
                        yield records if pc.all(keep).as_py() else records.filter(keep)

    def read(self, piece: RowRange) -> Iterator[pa.RecordBatch]:
        """The rows of ``piece``, a batch of up to BATCH_RECORDS at a time (a row group is
        never held whole)."""
        partition = dict(piece.partition)
        stored = [name for name in self.columns if name not in partition]
        batches = pq.ParquetFile(piece.path).iter_batches(
            batch_size=BATCH_RECORDS, row_groups=list(piece.row_groups), columns=stored
        )
        at = 0  # the row, counted from the piece's first row group, the next batch starts at
        for batch in batches:
            start, stop = max(piece.start - at, 0), min(piece.stop - at, batch.num_rows)
            at += batch.num_rows
            if start < stop:
                rows = batch.slice(start, stop - start)
                yield pa.record_batch(
                    [
                        pa.array([partition[name]] * rows.num_rows)
                        if name in partition
                        else rows.column(name)
                        for name in self.columns
                    ],
                    names=list(self.columns),
                )
            if at >= piece.stop:
                return
