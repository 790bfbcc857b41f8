"""quality/results read a few files at a time: what the report, ``dq-report``, the Airflow page
and a rerun's exit status need, never the whole table, and never GE's JSON.

    history = ResultsHistory.open(layout.quality_results)   # None: no validation recorded yet
    history.latest("silver")          # the rows of silver's last validation
    history.recent("decode_rate", 20) # the check's last 20 rows, oldest first

"Last" is by batch, then finish time (a stage's batches only grow: quality/results records each
one once); the rows of one run in the order of ``ORDER``. The files to read are chosen from the
Delta log alone: a stage's files by partition (or, in a table an older version wrote, by their
min/max statistics of ``stage``), newest first by their highest ``batch``, until no file left
unread can hold a newer row than the ones wanted. A file without statistics is always read. So
a page reads the few files of its stage's last validations whatever the table's size, and the
result is the one a full read gives.

Reads with delta-rs and pyarrow alone (no Spark), and never writes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from ticdc_lake.delta import Table, delta_table_exists, file_actions, open_table
from ticdc_lake.quality.settings import CHECKS

# The columns a page shows: all but GE's JSON (a few KB a row) and the partition month.
SHOWN = ("run_id", "stage", "batch", "changefeed", "table", "check", "policy", "success",
         "observed", "unexpected_count", "sample", "message", "started_at",
         "finished_at")  # fmt: skip
RECENT = ("batch", "changefeed", "table", "check", "observed", "finished_at")
# Newest first: by batch, then finish time; rows of one run in a fixed order.
ORDER = ("batch", "finished_at", "check", "changefeed", "table")
_NEWEST_FIRST = [(name, "descending") for name in ORDER]


class ResultsHistory:
    """An open quality/results table and, from its log, each file's stage and highest batch."""

    def __init__(self, table: Table):
        self.table = table
        self.columns = frozenset(field.name for field in table.schema().fields)
        actions = file_actions(table)
        self._files = list(
            zip(
                _column(actions, "partition.stage", "min.stage"),
                _column(actions, "partition.stage", "max.stage"),
                _column(actions, "max.batch"),
                strict=True,
            )
        )

    @classmethod
    def open(cls, path: str | os.PathLike) -> ResultsHistory | None:
        if not delta_table_exists(path):
            return None
        return cls(open_table(path))

    def latest(self, stage: str, columns: Sequence[str] = SHOWN) -> list[dict[str, Any]]:
        """The rows of ``stage``'s last validation (unordered); [] when it has none."""
        read = self._newest(stage, 1, columns, None)
        if read.num_rows == 0:
            return []
        last = read.column("run_id")[0].as_py()
        return read.filter(ds.field("run_id") == last).to_pylist()

    def recent(self, check: str, count: int, columns: Sequence[str] = RECENT) -> list[dict]:
        """The last ``count`` rows of ``check`` (one per validation, or one per changefeed or
        table it was checked for), oldest first."""
        where = ds.field("check") == check
        newest = self._newest(CHECKS[check].stage, count, columns, where).slice(0, count)
        return newest.to_pylist()[::-1]

    def _newest(
        self, stage: str, count: int, columns: Sequence[str], where: ds.Expression | None
    ) -> pa.Table:
        """Rows of ``stage`` matching ``where``, newest first: the ``count`` newest, and every
        row of a batch at least as high as theirs (all of the last validation's rows).

        The files read are those whose highest batch is at least a floor: first the floor
        of the ``count`` newest files, lowered while the rows found do not fill ``count``
        above it (a file may hold older rows, or rows ``where`` refuses)."""
        tops = sorted(
            (top for low, high, top in self._files
             if top is not None and _may_hold(low, high, stage)),
            reverse=True,
        )  # fmt: skip
        wanted = [name for name in dict.fromkeys([*columns, "run_id", *ORDER])
                  if name in self.columns]  # fmt: skip
        take = count
        while True:
            floor = tops[take - 1] if take < len(tops) else None
            read = self._read(stage, floor, wanted, where).sort_by(_NEWEST_FIRST)
            if floor is None:
                return read
            last = read.column("batch")[count - 1].as_py() if read.num_rows >= count else None
            if last is not None and last >= floor:
                return read
            take *= 4

    def _read(
        self, stage: str, floor: int | None, columns: list[str], where: ds.Expression | None
    ) -> pa.Table:
        prune: list[tuple[str, str, Any]] = [("stage", "=", stage)]
        if floor is not None:
            prune.append(("batch", ">=", floor))
        rows = ds.field("stage") == stage
        if where is not None:
            rows = rows & where
        dataset = self.table.to_pyarrow_dataset(file_pruning_predicate=prune)
        return dataset.to_table(columns=columns, filter=rows)


def _column(actions: pa.Table, *names: str) -> list:
    """The first of ``names`` the log has, per file (None where it has none)."""
    for name in names:
        if name in actions.column_names:
            return actions.column(name).to_pylist()
    return [None] * actions.num_rows


def _may_hold(low: str | None, high: str | None, stage: str) -> bool:
    """Whether a file whose ``stage`` lies in [low, high] may hold ``stage``'s rows (a missing
    bound is no bound; a truncated max statistic is rounded up, so it still bounds)."""
    return (low is None or low <= stage) and (high is None or stage <= high)
