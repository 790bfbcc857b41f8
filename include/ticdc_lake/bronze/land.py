"""Land: new Kafka export files from the landing area → bronze (issue 3, stage 1).

    land(spark, config) -> LandResult

Every run that finds something to land is one **batch** (ids 1, 2, 3, ...): the files matched
by ``config.inputs`` that are new, or changed since they were landed, are read by Spark's
executors (``export_source``) and their records appended to bronze. Matching stays inside the
folders the patterns name and takes regular files only (``land_inputs``); the matches refused
are counted, and listed, in the result. Tables, all under
``<lake>/bronze/``, each at ``LakeLayout.<name>`` (``records`` at ``LakeLayout.bronze``):

- ``records``, partitioned by ``topic``: one row per
  (topic, partition, offset) ever landed (``BRONZE_SCHEMA``). Partitioned by topic because
  every later stage works topic by topic (each topic has its own protocol), a re-export
  overlaps only its own topic, and topics are few, so a batch writes few files. Not by Kafka
  partition or by batch: either would multiply small files with every run.
- ``landed_files``: per file and batch, its size and modification
  time when planned and what became of its records. A file whose latest entry matches its
  current size and time is skipped without being opened; a file changed at the same path
  (appended to, rewritten) is read again whole, and the offset dedup keeps bronze right.
- ``export_errors``: every line, row or file ``exports`` could not read: file, line, reason,
  whatever coordinates could be read and the raw line. The rest of the file lands.
- ``offset_conflicts``: records whose (topic, partition, offset) was already landed, or came
  earlier in the batch, with *different* bytes (key, value or headers). The first copy stays
  in bronze; the other is kept here, whole, beside where the first one came from.
- ``offset_ranges``: per (topic, partition), the contiguous runs of offsets bronze holds.
- ``offset_gaps``: offsets missing between landed records of a
  partition (``from_offset``..``to_offset`` inclusive, ``size``) and the batch that first saw
  the gap. Derived from ``offset_ranges`` and the batch's new offsets: no bronze scan.

Deduplication: each (topic, partition, offset) is landed once. Within a batch the first copy
wins (files in planned order, oldest modification time first, then path; rows in file order);
against bronze, the landed copy wins. A later copy with the same bytes is a duplicate, one with
other bytes a conflict. Bronze keeps a 64-bit hash of each record's bytes (``record_hash``), so
the comparison reads a few narrow columns of bronze, and only in the offset windows where
``offset_ranges`` says the batch overlaps bronze: a batch of new offsets never reads bronze.

Idempotency and crashes: a batch is planned first (its files with their size and time, the
versions of the tables it reads, its landing time) and the plan saved (``layout.land_plan``). The
commits follow, each tagged with the Delta app transaction ("land", batch id): bronze,
export_errors, offset_conflicts, offset_ranges, offset_gaps, then landed_files, which marks the
batch done. A run killed anywhere in between leaves the plan behind, and the next run finishes
that same batch: it reads the same files against the same table versions (Delta time travel),
so it computes the same rows, and each commit already made is skipped by its app transaction.
A run with nothing new writes nothing and adds no Delta version. Run one land job at a time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from ticdc_lake.bronze.export_source import ExportFile, describe_file, describe_object
from ticdc_lake.bronze.kafka_source import (
    export_files,
    read_kafka_inputs,
    remove_landed_exports,
)
from ticdc_lake.bronze.land_batch import BatchOutcome, run_batch
from ticdc_lake.bronze.land_inputs import discover_files, discover_objects
from ticdc_lake.bronze.land_tables import (
    APP_ID,
    BRONZE_PARTITION_BY,
    BRONZE_SCHEMA,
    LandError,
    LandPlan,
    LandTables,
    to_micros,
)
from ticdc_lake.bronze.offset_runs import merge_runs, overlap_windows
from ticdc_lake.config import PipelineConfig
from ticdc_lake.delta import delta_table_exists, open_table
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.storage import ObjectInfo, S3Settings, is_object_uri

REFUSED_SHOWN = 20  # refused matches listed in the result (all are counted)


@dataclass(frozen=True)
class LandResult:
    batch_id: int | None  # None: nothing to land
    files_seen: int
    files_landed: int
    files_skipped: int  # unchanged since they were landed
    records_read: int
    records_added: int
    duplicates: int  # same offset, same bytes: already in bronze or earlier in the batch
    conflicts: int  # same offset, other bytes: kept in offset_conflicts
    errors: int  # unreadable lines, rows or files: kept in export_errors
    offset_gaps: int  # open gaps in bronze after this run
    missing_offsets: int  # offsets in those gaps
    files_waiting: int = 0  # new or changed, left for the next batch (after a recovery)
    # Matches never opened: outside the pattern's folder, devices, FIFOs, sockets, ...
    files_refused: int = 0
    refused: tuple[str, ...] = ()  # "path: reason" of the first REFUSED_SHOWN
    recovered: bool = False  # this run finished a batch a killed run had started
    reader: str = ""  # what read the batch's files: Spark's Parquet reader or the export reader
    reader_fallback: str = ""  # why Spark's Parquet reader was tried and not used
    seconds: float = 0.0

    def __str__(self) -> str:
        batch = f"batch {self.batch_id}" if self.batch_id is not None else "nothing new"
        return (
            f"land: {batch}{' (recovered)' if self.recovered else ''}: files "
            f"{self.files_landed} landed / {self.files_skipped} skipped / "
            f"{self.files_waiting} waiting / {self.files_seen} seen / "
            f"{self.files_refused} refused; records "
            f"{self.records_read} read, {self.records_added} added, "
            f"{self.duplicates} duplicates, {self.conflicts} conflicts; {self.errors} errors; "
            f"{self.offset_gaps} offset gaps ({self.missing_offsets} offsets); "
            f"{self._read_by()}{self.seconds:.1f} s"
        )

    def _read_by(self) -> str:
        if not self.reader:
            return ""
        if self.reader_fallback:
            return f"read by {self.reader} (Spark's Parquet reader: {self.reader_fallback}); "
        return f"read by {self.reader}; "

    def to_dict(self) -> dict:
        return asdict(self)


# --- the stage --------------------------------------------------------------------------------


def land(spark: SparkSession, config: PipelineConfig) -> LandResult:
    """Land the new and changed export files of ``config.inputs`` as one bronze batch."""
    started = time.perf_counter()
    layout = LakeLayout(config.lake)
    tables = LandTables.of(layout)
    plan = pending_plan(tables)
    recovered = plan is not None
    if plan is None and config.kafka_inputs:
        read_kafka_inputs(spark, config.kafka_inputs, tables.offset_ranges, layout.kafka_exports)
    found = find_inputs(config, layout, tables)
    remove_landed_exports(layout.kafka_exports, [f.path for f in found.changed])
    if plan is None:
        if not found.changed:
            return _nothing_new(tables, found, started)
        plan = plan_batch(tables, found.changed)
        save_plan(tables, plan)
    outcome = run_batch(spark, tables, plan.reaching(config.s3), config.limits)
    tables.plan.unlink(missing_ok=True)
    planned = {f.path for f in plan.files}
    waiting = [f for f in found.changed if f.path not in planned]
    remove_landed_exports(layout.kafka_exports, [f.path for f in waiting])
    return _batch_result(plan, outcome, found, len(waiting), recovered, started)


@dataclass(frozen=True)
class FoundInputs:
    """The files a run sees, the matches it refused, and the seen files to land."""

    seen: list[str]
    refused: tuple[str, ...]  # "path: reason"
    changed: list[ExportFile]  # new, or changed since they were landed


def find_inputs(config: PipelineConfig, layout: LakeLayout, tables: LandTables) -> FoundInputs:
    """The export files of ``config.inputs`` and of the Kafka exports, and which to land."""
    local = [pattern for pattern in config.inputs if not is_object_uri(pattern)]
    # A glob reaching into the lake must not land the lake's own files.
    discovered = discover_files(local, exclude=(config.lake, config.reports))
    stored = discover_objects([p for p in config.inputs if is_object_uri(p)], config.s3)
    kafka = export_files(layout.kafka_exports)
    refused = tuple(str(r) for r in [*discovered.refused, *stored.refused])
    landed = landed_state(tables)
    changed = [
        *changed_files(discovered.files, landed),
        *changed_objects(stored.objects.values(), landed, config.s3),
        *changed_files(kafka, landed),
    ]
    return FoundInputs([*discovered.files, *stored.files, *kafka], refused, changed)


def _nothing_new(tables: LandTables, found: FoundInputs, started: float) -> LandResult:
    gaps, missing = _gap_totals(tables)
    return LandResult(
        batch_id=None,
        files_seen=len(found.seen),
        files_landed=0,
        files_skipped=len(found.seen),
        records_read=0,
        records_added=0,
        duplicates=0,
        conflicts=0,
        errors=0,
        offset_gaps=gaps,
        missing_offsets=missing,
        files_refused=len(found.refused),
        refused=found.refused[:REFUSED_SHOWN],
        seconds=time.perf_counter() - started,
    )


def _batch_result(
    plan: LandPlan,
    outcome: BatchOutcome,
    found: FoundInputs,
    waiting: int,
    recovered: bool,
    started: float,
) -> LandResult:
    counts = outcome.counts
    return LandResult(
        batch_id=plan.batch_id,
        files_seen=len(found.seen),
        files_landed=len(plan.files),
        files_skipped=len(found.seen) - len(found.changed),
        files_waiting=waiting,
        files_refused=len(found.refused),
        refused=found.refused[:REFUSED_SHOWN],
        recovered=recovered,
        records_read=counts.read,
        records_added=counts.new,
        duplicates=counts.duplicates,
        conflicts=counts.conflicts,
        errors=counts.errors,
        offset_gaps=len(outcome.gaps),
        missing_offsets=sum(gap["size"] for gap in outcome.gaps),
        reader=outcome.reader,
        reader_fallback=outcome.reader_fallback,
        seconds=time.perf_counter() - started,
    )


# --- planning ---------------------------------------------------------------------------------


# path -> (size, modification time in µs), or for an s3:// object (size, ETag)
Landed = dict[str, tuple[int, int | str]]


def landed_state(tables: LandTables) -> Landed:
    """path → (size, modification time in µs), or for an s3:// object (size, ETag), as of its
    latest landing."""
    if not delta_table_exists(tables.landed_files):
        return {}
    table = open_table(tables.landed_files)
    columns = ["path", "size", "modification_time", "batch_id"]
    has_etags = "etag" in [f.name for f in table.schema().fields]  # none in an older lake
    if has_etags:
        columns.append("etag")
    rows = table.to_pyarrow_table(columns=columns).to_pylist()
    latest: dict[str, tuple[int, tuple[int, int | str]]] = {}
    for row in rows:
        stamp = row.get("etag") or to_micros(row["modification_time"])
        if row["path"] not in latest or row["batch_id"] > latest[row["path"]][0]:
            latest[row["path"]] = (row["batch_id"], (row["size"], stamp))
    return {path: state for path, (_, state) in latest.items()}


def _table_version(path: Path) -> int | None:
    return open_table(path).version() if delta_table_exists(path) else None


def _land_version(path: Path) -> int:
    """The last batch this table recorded (Delta app transaction "land"), 0 if none."""
    if not delta_table_exists(path):
        return 0
    return open_table(path).transaction_version(APP_ID) or 0


def changed_objects(
    found: Iterable[ObjectInfo], landed: Landed, s3: S3Settings | None
) -> list[ExportFile]:
    """The s3:// objects not landed yet, or whose size or ETag changed since (a re-upload)."""
    return [
        describe_object(info, s3)
        for info in found
        if landed.get(info.uri) != (info.size, info.etag)
    ]


def changed_files(seen: Iterable[str], landed: Landed) -> list[ExportFile]:
    """The files not landed yet, or whose size or modification time changed since."""
    files = []
    for path in seen:
        try:
            stat = os.stat(path)
            if landed.get(path) == (stat.st_size, stat.st_mtime_ns // 1000):
                continue  # unchanged: not even opened
            files.append(describe_file(path))
        except FileNotFoundError:
            continue  # vanished since the glob: nothing to land
    return files


def plan_batch(tables: LandTables, files: Sequence[ExportFile]) -> LandPlan:
    """The next batch, over ``files``: its id, landing time and the table versions it reads."""
    # Any table may be ahead of landed_files if a killed run's plan was lost: never reuse its id.
    batch_id = max(_land_version(path) for path in tables.committed()) + 1
    # Every batch that adds records to bronze also extends offset_ranges, after it.
    stale_ranges = _land_version(tables.bronze) > _land_version(tables.offset_ranges)
    return LandPlan(
        batch_id=batch_id,
        landed_at_us=time.time_ns() // 1000,
        # Oldest first: of two copies of a record in one batch, the older export's is kept.
        files=tuple(sorted(files, key=lambda f: (f.mtime_ns, f.path))),
        versions={
            "bronze": _table_version(tables.bronze),
            "offset_ranges": _table_version(tables.offset_ranges),
            "offset_gaps": _table_version(tables.offset_gaps),
        },
        rebuild_ranges=stale_ranges,
    )


def save_plan(tables: LandTables, plan: LandPlan) -> None:
    """Write the plan atomically: a crash leaves the old file or the new one, never half."""
    tables.plan.parent.mkdir(parents=True, exist_ok=True)
    temporary = tables.plan.with_name(tables.plan.name + ".tmp")
    with open(temporary, "w") as sink:
        sink.write(plan.to_json())
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(temporary, tables.plan)


def pending_plan(tables: LandTables) -> LandPlan | None:
    """The plan of a batch a killed run started and did not finish, if any."""
    if not tables.plan.exists():
        return None
    try:
        plan = LandPlan.from_json(tables.plan.read_text())
    except (ValueError, KeyError, TypeError) as exc:
        raise LandError(
            f"{tables.plan}: unreadable land plan ({exc}); if no land job is running, delete it "
            "and land again (files of the unfinished batch are then re-read and deduplicated)"
        ) from exc
    done = _land_version(tables.landed_files)
    if plan.batch_id <= done:
        tables.plan.unlink(missing_ok=True)  # finished; the run died before removing it
        return None
    if plan.batch_id != done + 1:
        raise LandError(
            f"{tables.plan} plans batch {plan.batch_id} but {tables.landed_files} ends at batch "
            f"{done}: the landed-files table lost commits"
        )
    return plan


def _gap_totals(tables: LandTables) -> tuple[int, int]:
    if not delta_table_exists(tables.offset_gaps):
        return 0, 0
    sizes = open_table(tables.offset_gaps).to_pyarrow_table(columns=["size"]).column("size")
    return len(sizes), sum(sizes.to_pylist())


__all__ = [
    "BRONZE_PARTITION_BY",
    "BRONZE_SCHEMA",
    "LandError",
    "LandPlan",
    "LandResult",
    "LandTables",
    "discover_files",
    "land",
    "merge_runs",
    "overlap_windows",
]
