"""Where every table of the lake lives, under one root directory (or object-store prefix).

Every stage takes its paths from here; none joins lake paths by hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LakeLayout:
    root: Path

    @property
    def bronze(self) -> Path:
        """Raw Kafka records, append-only, one row per (topic, partition, offset)."""
        return self.root / "bronze" / "records"

    @property
    def landed_files(self) -> Path:
        """Which export files were landed in which batch (so re-landing adds nothing)."""
        return self.root / "bronze" / "landed_files"

    @property
    def offset_gaps(self) -> Path:
        """Offsets missing between landed records of a partition."""
        return self.root / "bronze" / "offset_gaps"

    @property
    def export_errors(self) -> Path:
        """Lines, rows or files of the exports that could not be read as Kafka records."""
        return self.root / "bronze" / "export_errors"

    @property
    def offset_conflicts(self) -> Path:
        """Records whose offset was landed before with other bytes (bronze keeps the first)."""
        return self.root / "bronze" / "offset_conflicts"

    @property
    def offset_ranges(self) -> Path:
        """Per (topic, partition): the contiguous runs of offsets bronze holds."""
        return self.root / "bronze" / "offset_ranges"

    @property
    def lock(self) -> Path:
        """Who is running stages on this lake now (lake/lock.py; a JSON file, not a table)."""
        return self.root / "_lock.json"

    @property
    def land_plan(self) -> Path:
        """The plan of a land batch not finished yet (a JSON file, not a table)."""
        return self.root / "bronze" / "_land_plan.json"

    @property
    def changes(self) -> Path:
        """Silver change log: one row per row event (silver.CHANGES_SCHEMA)."""
        return self.root / "silver" / "changes"

    @property
    def ddl(self) -> Path:
        return self.root / "silver" / "ddl"

    @property
    def resolved(self) -> Path:
        """Every resolved event decoded, raw (the watermark stage aggregates it)."""
        return self.root / "silver" / "resolved"

    @property
    def quarantine(self) -> Path:
        return self.root / "silver" / "quarantine"

    @property
    def decode_log(self) -> Path:
        """Per decode batch: bronze records read, decoded, quarantined (counts reconcile)."""
        return self.root / "silver" / "decode_log"

    @property
    def watermarks(self) -> Path:
        """Per (topic, partition): the max resolved TS seen."""
        return self.root / "silver" / "watermarks"

    @property
    def gold_state(self) -> Path:
        """Per gold table: the watermark it reflects and whether it is consistent."""
        return self.root / "state" / "gold"

    @property
    def backfills(self) -> Path:
        """One row per finished backfill: its range, and the table versions it left."""
        return self.root / "state" / "backfills"

    def tables(self) -> dict[str, Path]:
        """Every Delta table of the lake but gold (whose tables the state table lists), by name."""
        names = ("bronze", "landed_files", "offset_gaps", "export_errors", "offset_conflicts",
                 "offset_ranges", "changes", "ddl", "resolved", "quarantine", "decode_log",
                 "watermarks", "gold_state")  # fmt: skip
        return {name: getattr(self, name) for name in names}

    def gold(self, schema: str, table: str) -> Path:
        return self.root / "gold" / schema / table
