"""Tables on the driver with delta-rs and pyarrow alone (no Spark, so the quality pages can
import them): opening a table or one of its versions, its rows as Arrow, its files' log entries.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ticdc_lake.delta.exceptions import DeltaIOError, TableNotFoundError

# An open snapshot of a table (what ``open_table`` returns): callers hold it to read one
# version several times without reading the log again.
Table = DeltaTable


# Characters Delta on Spark refuses in column names when it writes a table's schema, unless
# the table maps columns (DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES). It reads such tables and
# merges into them while the schema stays; delta-rs writes them; MySQL allows them all.
SPARK_REFUSED_IN_NAMES = frozenset(" ,;{}()\n\t=")


def spark_can_merge(names: Sequence[str], present: Sequence[str]) -> bool:
    """Whether delta-spark can merge columns ``names`` into a table of columns ``present``."""
    if set(names) <= set(present):
        return True
    return not any(SPARK_REFUSED_IN_NAMES.intersection(n) for n in [*names, *present])


@dataclass(frozen=True)
class MergeResult:
    """What a merge did (by delta-rs or delta-spark)."""

    committed: bool
    version: int | None
    skipped: bool = False  # (app_id, version) was already in the table
    metrics: dict[str, Any] = field(default_factory=dict)


def table_path(path: str | os.PathLike) -> str:
    """An absolute local path (the writer and Spark's reader work on local file systems)."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        raise DeltaIOError(f"only local tables are supported, not {text}")
    return os.path.abspath(text)


def delta_table_exists(path: str | os.PathLike) -> bool:
    return DeltaTable.is_deltatable(table_path(path))


def open_table(path: str | os.PathLike, version: int | None = None) -> Table:
    """The table at ``path`` (at ``version``), or TableNotFoundError."""
    location = table_path(path)
    if not DeltaTable.is_deltatable(location):
        raise TableNotFoundError(location)
    return DeltaTable(location, version=version)


def table_location(table: Table) -> str:
    """The local path of an open table (the log holds it percent-encoded)."""
    return table_path(unquote(table.table_uri))


def is_latest(table: Table) -> bool:
    """Whether no commit follows the version ``table`` is open at: one look at the log for
    the next commit's file, where opening the table again reads the log (~2 ms)."""
    log = Path(table_location(table)) / "_delta_log"
    return not (log / f"{table.version() + 1:020d}.json").exists()


def read_arrow(
    path: str | os.PathLike,
    version: int | None = None,
    *,
    columns: Sequence[str] | None = None,
    where: pc.Expression | None = None,
) -> pa.Table:
    """The rows of the table at ``path`` (at ``version``; default: latest) read by delta-rs on
    the driver, ``columns`` of them (default: all) that ``where`` keeps (files it rules out are
    not read): for small tables, or a few columns, where a Spark job's start costs seconds.
    TableNotFoundError for a missing table."""
    table = open_table(path, version)
    return table.to_pyarrow_table(columns=list(columns) if columns else None, filters=where)


def file_actions(table: Table) -> pa.Table:
    """One row per data file of the snapshot, from its log: ``path``, ``size_bytes``,
    ``num_records``, ``partition.<column>`` and the statistics ``min.``/``max.``/
    ``null_count.<column>`` (null where the log has none). No data file is read."""
    return pa.table(table.get_add_actions(flatten=True))
