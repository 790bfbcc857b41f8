"""Delta table IO for every stage: Spark → Delta writes, Delta → Spark reads, merges.

Tables are written through delta-rs (no Delta jars): ``write_delta`` writes a DataFrame with
Spark's executors and commits one transaction; ``read_delta`` reads a snapshot back into Spark;
``merge_delta`` upserts and deletes a change set by key; ``write_arrow`` writes a few rows from
the driver. Writes and merges are idempotent when
given an ``app_id`` and ``version``.
"""

from ticdc_lake.delta.exceptions import (
    DeltaIOError,
    MergeSourceError,
    SchemaMismatchError,
    TableFileMissingError,
    TableFileUnreadableError,
    TableNotFoundError,
    UnsupportedTableError,
)
from ticdc_lake.delta.merge import MergeResult, merge_delta
from ticdc_lake.delta.read import delta_table_exists, open_table, read_delta, read_table, spanning
from ticdc_lake.delta.write import WriteResult, write_arrow, write_delta

__all__ = [
    "DeltaIOError",
    "MergeResult",
    "MergeSourceError",
    "SchemaMismatchError",
    "TableFileMissingError",
    "TableFileUnreadableError",
    "TableNotFoundError",
    "UnsupportedTableError",
    "WriteResult",
    "delta_table_exists",
    "merge_delta",
    "open_table",
    "read_delta",
    "read_table",
    "spanning",
    "write_arrow",
    "write_delta",
]
