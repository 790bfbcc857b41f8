"""Writing quality/results so that reading it stays cheap as it grows (quality.history reads it).

    result = write_results(layout, validation, app_id="quality-silver", version=batch)

A validation's rows are one idempotent commit (``write_arrow``). A table this version creates is
partitioned by stage and month and keeps statistics only for ``STATS_COLUMNS``; after each
commit, the stage's months are compacted into one file each: a month already over at once, the
current one once it holds ``COMPACT_AT`` files. So the log lists about one file per stage and
month plus the current month's last few: at 200k rows (13 months of hourly runs) 126 files,
and the report took 0.2 s and 207 MB (bench/report.py), where one file per validation (28.6k)
made the same reads take 3.0 s and 337 MB, opening the table's log 0.6 s of it.

A table an older version created (unpartitioned, one file per validation) is appended to as it
is, in its own columns, and not compacted: compacting it would mix every stage's and month's
rows in a few files, which its readers could then no longer skip.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from deltalake import DeltaTable

from ticdc_lake.delta import WriteResult, open_table, write_arrow
from ticdc_lake.delta.read import delta_table_exists
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.results import (
    PARTITION_BY,
    STATS_COLUMNS,
    StageValidation,
    month,
    results_table,
)

COMPACT_AT = 48  # files in the current month of a stage: then compacted into one
TABLE_PROPERTIES = {"delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS)}


def write_results(
    layout: LakeLayout, validation: StageValidation, *, app_id: str, version: int
) -> WriteResult:
    """Append the validation's rows (a replay of ``(app_id, version)`` commits nothing), then
    compact its stage's months that are due."""
    path = layout.quality_results
    table = open_table(path) if delta_table_exists(path) else None
    columns = None if table is None else [field.name for field in table.schema().fields]
    result = write_arrow(
        results_table(validation, columns),
        path,
        app_id=app_id,
        version=version,
        partition_by=PARTITION_BY,
        configuration=TABLE_PROPERTIES,
    )
    if result.committed:
        if table is None:
            table = open_table(path)
        else:
            table.update_incremental()  # the commits since: not the whole log again
        compact_results(table, validation.stage, month(validation.started_at))
    return result


def compact_results(table: DeltaTable, stage: str, current: str) -> list[str]:
    """Compact each month of ``stage`` that holds several files, the ``current`` month only
    from ``COMPACT_AT`` files; the months compacted. A table not partitioned by
    ``PARTITION_BY`` is left as it is."""
    if tuple(table.metadata().partition_columns) != PARTITION_BY:
        return []
    files = pa.table(table.get_add_actions(flatten=True))
    per_month = Counter(
        found_month
        for found_stage, found_month in zip(
            files.column("partition.stage").to_pylist(),
            files.column("partition.month").to_pylist(),
            strict=True,
        )
        if found_stage == stage
    )
    due = sorted(
        name
        for name, count in per_month.items()
        if count > 1 and (name != current or count >= COMPACT_AT)
    )
    for name in due:
        table.optimize.compact(partition_filters=[("stage", "=", stage), ("month", "=", name)])
    return due
