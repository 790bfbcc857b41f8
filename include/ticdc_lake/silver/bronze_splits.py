"""Bronze records for decoding, cut into splits of about as much work, which decode's tasks
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
from ticdc_lake.runtime.spark import ARROW_BATCH_BYTES

# Arrow batches handed to the decoder hold up to BATCH_BYTES of records (uncompressed, by their
# row group's average record) and BATCH_RECORDS records.
BATCH_BYTES = ARROW_BATCH_BYTES
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


# What a record costs to decode beyond its bytes, in bytes: the Python around each record
# (~5-10 us) is what the decoder spends on 300-600 bytes of payload (ddl-heavy 1M: 17 ns/byte).
RECORD_COST_BYTES = 512


def even_splits(files: Sequence[DataFile], count: int) -> list[tuple[RowRange, ...]]:
    """The rows of ``files``, in order, cut into ``count`` splits of about as much decoding
    work (fewer splits when there are fewer rows); a split reads each file it touches in one
    piece. A row group's work is its uncompressed bytes plus RECORD_COST_BYTES per record,
    spread evenly over its rows: records differ in size by orders of magnitude (a watermark's
    few dozen bytes, a batch of row events' hundreds of KB), so as many rows each left one core
    decoding alone for a fifth of the stage."""
    groups = [
        (file, number, rows, size + RECORD_COST_BYTES * rows)
        for file in files
        for number, (rows, size) in enumerate(_row_group_sizes(file.path))
        if rows
    ]
    cuts = iter(_cuts([(rows, work) for _, _, rows, work in groups], count))
    splits: list[tuple[RowRange, ...]] = []
    current: list[RowRange] = []
    at, cut = 0, next(cuts)  # the row the next split starts at (global row number)
    for file, number, rows, _ in groups:
        start = 0
        while start < rows:
            stop = min(rows, start + cut - at)
            last = current[-1] if current else None
            if last is not None and last.path == file.path and start == 0:
                # The split's previous piece ends where this group starts: one piece for both.
                current[-1] = RowRange(
                    file.path, (*last.row_groups, number), last.start, last.stop + stop,
                    file.partition,
                )  # fmt: skip
            else:
                current.append(RowRange(file.path, (number,), start, stop, file.partition))
            at += stop - start
            start = stop
            if at == cut:
                splits.append(tuple(current))
                current, cut = [], next(cuts, None)  # None after the last row
    return splits


def _cuts(groups: Sequence[tuple[int, int]], count: int) -> list[int]:
    """Where each split ends (global row numbers, increasing, the last one all the rows) when
    ``groups`` ((rows, work) each, in order) are cut into at most ``count`` parts of about
    equal work; a cut inside a group falls where its evenly spread work reaches the share."""
    total_rows = sum(rows for rows, _ in groups)
    total_work = sum(work for _, work in groups)
    cuts, share = [], 1  # the next cut is where the work done reaches share / count of it
    first_row, work_before = 0, 0
    for rows, work in groups:
        # Integers throughout: share * total_work / count within this group's work.
        while share < count and share * total_work <= (work_before + work) * count:
            owed = share * total_work - work_before * count  # x count, within this group
            row = first_row + -(-owed * rows // (work * count))  # rounded up
            if row < total_rows and (not cuts or row > cuts[-1]):
                cuts.append(row)
            share += 1
        first_row, work_before = first_row + rows, work_before + work
    return [*cuts, total_rows]


def batch_records(groups: Sequence[pq.RowGroupMetaData]) -> int:
    """Records per batch read from ``groups``: as many of their average size as fill
    BATCH_BYTES, at most BATCH_RECORDS, at least one."""
    rows = sum(group.num_rows for group in groups)
    size = sum(group.total_byte_size for group in groups)
    return max(1, min(BATCH_RECORDS, BATCH_BYTES * rows // max(size, 1)))


def _row_group_sizes(path: str) -> list[tuple[int, int]]:
    """(rows, uncompressed bytes) of each row group of the file."""
    metadata = pq.ParquetFile(path).metadata
    groups = (metadata.row_group(number) for number in range(metadata.num_row_groups))
    return [(group.num_rows, group.total_byte_size) for group in groups]


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
        """The rows of ``piece``, ``batch_records`` of its row groups at a time (a row group
        is never held whole)."""
        partition = dict(piece.partition)
        stored = [name for name in self.columns if name not in partition]
        file = pq.ParquetFile(piece.path)
        groups = [file.metadata.row_group(number) for number in piece.row_groups]
        batches = file.iter_batches(
            batch_size=batch_records(groups), row_groups=list(piece.row_groups), columns=stored
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
