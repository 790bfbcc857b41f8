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
rows in a few files, and keep every file it replaced in the log for a week (a reader loads
them). ``relayout_results`` (``ticdc-lake dq-relayout``) moves such a table to this layout:
a new table beside it, a month a commit, then swapped in; the old one is kept aside.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ticdc_lake.delta import (
    Table,
    WriteResult,
    append_rows,
    compact_partition,
    delta_table_exists,
    file_actions,
    open_table,
    write_arrow,
)
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.quality.results import (
    PARTITION_BY,
    RESULTS_SCHEMA,
    STATS_COLUMNS,
    StageValidation,
    month,
    results_table,
)
from ticdc_lake.quality.settings import CHECKS

_ISO = "%Y-%m-%dT%H:%M:%SZ"
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


def compact_results(table: Table, stage: str, current: str) -> list[str]:
    """Compact each month of ``stage`` that holds several files, the ``current`` month only
    from ``COMPACT_AT`` files; the months compacted. A table not partitioned by
    ``PARTITION_BY`` is left as it is."""
    if tuple(table.metadata().partition_columns) != PARTITION_BY:
        return []
    files = file_actions(table)
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
        compact_partition(table, {"stage": stage, "month": name})
    return due


@dataclass(frozen=True)
class Relayout:
    rows: int
    files_before: int
    files_after: int
    kept_at: Path  # the table as it was, moved aside


def relayout_results(layout: LakeLayout, now: dt.datetime | None = None) -> Relayout | None:
    """Rewrite a results table an older version created in this version's layout; None when
    there is none or it has the layout already. Run it under the lake's lock: no quality job
    may append meanwhile.

    The rows go to a new table beside it (``results.relayout``, left over from an interrupted
    attempt is replaced), a month of them a commit, with each stage's app version; once it
    holds as many rows as the old one, the old table is renamed ``results.before-relayout-<UTC
    time>`` and the new one takes its place. A page rendered in between finds no table."""
    path = layout.quality_results
    if not delta_table_exists(path):
        return None
    old = open_table(path)
    if tuple(old.metadata().partition_columns) == PARTITION_BY:
        return None
    stages = sorted({spec.stage for spec in CHECKS.values()})
    versions = {
        f"quality-{stage}": version
        for stage in stages
        if (version := old.transaction_version(f"quality-{stage}")) is not None
    }
    fresh = path.with_name(f"{path.name}.relayout")
    shutil.rmtree(fresh, ignore_errors=True)
    columns = [name for name in RESULTS_SCHEMA.names if name != "month"]
    chunks = _chunks(old)
    written = 0
    for number, (prune, where) in enumerate(chunks):
        last = number == len(chunks) - 1
        # pruned by the files' statistics: a month reads its own files, not all of them
        dataset = old.to_pyarrow_dataset(file_pruning_predicate=prune)
        rows = dataset.to_table(columns=columns, filter=where)
        if rows.num_rows == 0 and not last:
            continue
        labels = pc.strftime(rows.column("started_at"), format="%Y-%m")
        append_rows(
            fresh,
            rows.append_column("month", labels).cast(RESULTS_SCHEMA),
            partition_by=PARTITION_BY,
            configuration=TABLE_PROPERTIES,
            app_versions=versions if last else None,
        )
        written += rows.num_rows
    counts = file_actions(old).column("num_records").to_pylist()
    before = sum(counts) if None not in counts else old.to_pyarrow_dataset().count_rows()
    if written != before:  # not expected: every row has a month or none
        raise RuntimeError(f"{fresh}: {written} rows written of {before}; {path} left as it was")
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    kept = path.with_name(f"{path.name}.before-relayout-{stamp}")
    os.rename(path, kept)
    os.rename(fresh, path)
    return Relayout(before, len(old.file_uris()), len(open_table(path).file_uris()), kept)


def _chunks(table: Table) -> list[tuple[str, ds.Expression]]:
    """(a predicate pruning files, the exact row filter) per month ``started_at`` spans, rows
    without one first."""
    column, utc = pc.field("started_at"), pa.timestamp("us", tz="UTC")
    chunks = [("started_at IS NULL", column.is_null())]
    for start in _months(table):
        end = (start + dt.timedelta(days=32)).replace(day=1)
        prune = f"started_at >= '{start:{_ISO}}' AND started_at < '{end:{_ISO}}'"
        rows = (column >= pa.scalar(start, utc)) & (column < pa.scalar(end, utc))
        chunks.append((prune, rows))
    return chunks


def _months(table: Table) -> list[dt.datetime]:
    """The first instants (UTC) of the months ``started_at`` spans: from the files' statistics,
    or when a file has none, from the column itself."""
    files = file_actions(table)
    spans: set[tuple] = set()
    if {"min.started_at", "max.started_at"} <= set(files.column_names):
        spans = set(zip(files.column("min.started_at").to_pylist(),
                        files.column("max.started_at").to_pylist(), strict=True))  # fmt: skip
    if not spans or any(low is None or high is None for low, high in spans):
        started = table.to_pyarrow_table(columns=["started_at"]).column("started_at")
        spans = {(low, low) for low in started.to_pylist() if low is not None}
    found = set()
    for low, high in spans:
        at = _utc(low).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        while at <= _utc(high):
            found.add(at)
            at = (at + dt.timedelta(days=32)).replace(day=1)
    return sorted(found)


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)
