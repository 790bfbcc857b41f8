"""Where every table of the lake lives, under one root directory (or object-store prefix).

Every stage takes its paths from here; none joins lake paths by hand. Names that come from
upstream (schemas, tables) or from the config (changefeeds) become folders only through
``path_segment``, and a gold path is checked to stay inside ``gold/``.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ticdc_lake.errors import TicdcLakeError

ESCAPE = "~"
SCRATCH = "_scratch"  # temporary files of runs (gold/changes.py spills there)
# A folder name longer than this many bytes is refused by most file systems.
MAX_SEGMENT_BYTES = 255


class UnsafeNameError(TicdcLakeError):
    """A name that cannot become a folder of the lake (empty, or too long once encoded)."""


def _kept(char: str) -> bool:
    """Whether ``char`` stands for itself in a folder name: ASCII lowercase letters, digits and
    ``_``; and other scripts' letters and digits that have no other case form, are in composed
    form and compose with nothing before them (so Hangul's vowel and final jamo are escaped).
    Everything else is escaped, so a file system that ignores case or Unicode normalisation
    (macOS, Windows) still tells every name apart."""
    if char.isascii():
        return char.islower() or char.isdigit() or char == "_"
    return (
        unicodedata.category(char) in {"Ll", "Lo", "Lm", "Nd"}
        and char.casefold() == char
        and unicodedata.normalize("NFC", char) == char
        and unicodedata.combining(char) == 0
        and not ("\u1160" <= char <= "\u11ff" or "\ud7b0" <= char <= "\ud7ff")
    )


def path_segment(name: str) -> str:
    """The folder name of an upstream (or config) name: reversible, never ``.``, ``..``,
    absolute or holding a separator, and distinct names give distinct folders.

    Each character that is not kept (``_kept``) is written as ``~`` and the lowercase hex of
    its UTF-8 bytes: ``Orders`` → ``~4frders``, ``a.b`` → ``a~2eb``, ``a/b`` → ``a~2fb``,
    ``é`` (one code point) → ``é``, ``é`` (e + U+0301) → ``e~cc81``, ``订单`` → ``订单``."""
    if not name:
        raise UnsafeNameError("an empty name cannot name a folder of the lake")
    segment = "".join(c if _kept(c) else ESCAPE + c.encode("utf-8").hex() for c in name)
    size = len(segment.encode("utf-8"))
    if size > MAX_SEGMENT_BYTES:
        raise UnsafeNameError(
            f"the name {name[:40]!r}{'...' if len(name) > 40 else ''} encodes to a folder name "
            f"of {size} bytes, more than the {MAX_SEGMENT_BYTES} file systems allow"
        )
    return segment


def name_of_segment(segment: str) -> str:
    """The name ``path_segment`` encoded into ``segment`` (ValueError if it is not one)."""
    out = bytearray()
    at = 0
    while at < len(segment):
        char = segment[at]
        if char != ESCAPE:
            if not _kept(char):
                raise ValueError(f"{segment!r}: {char!r} at {at} should have been escaped")
            out += char.encode("utf-8")
            at += 1
            continue
        lead = int(segment[at + 1 : at + 3], 16)
        size = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        out += bytes.fromhex(segment[at + 1 : at + 1 + 2 * size])
        at += 1 + 2 * size
    name = out.decode("utf-8")
    if path_segment(name) != segment:
        raise ValueError(f"{segment!r} is not the folder name of any name")
    return name


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
        """Held by the run working on the lake (lake/lock.py): one run per lake at a time."""
        return self.root / "_lock.json"

    @property
    def kafka_exports(self) -> Path:
        """Records land read from Kafka itself, as Spark Kafka Parquet files that land like
        any export; each run's folder is removed once its records are in bronze."""
        return self.root / "bronze" / "_kafka"

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

    @property
    def quality_results(self) -> Path:
        """One row per data-quality check of every validation (quality.results.RESULTS_SCHEMA)."""
        return self.root / "quality" / "results"

    @property
    def quality_quarantine(self) -> Path:
        """Silver rows a check with the quarantine policy took out (compaction skips them)."""
        return self.root / "quality" / "quarantine"

    @property
    def gold_root(self) -> Path:
        return self.root / "gold"

    def gold(self, schema: str, table: str) -> Path:
        """A gold table's folder: ``gold/<schema>/<table>``, each name a ``path_segment``.
        Resolved and checked to lie inside ``gold/`` (UnsafeNameError otherwise)."""
        path = self.gold_root / path_segment(schema) / path_segment(table)
        inside(path, self.gold_root)
        return path

    def scratch(self, kind: str, name: str) -> Path:
        """A folder of a run's temporary files: ``_scratch/<kind>-<name>`` (``kind`` one of
        the code's words, ``name`` e.g. a changefeed's, as a ``path_segment``)."""
        return self.root / SCRATCH / f"{kind}-{path_segment(name)}"


def inside(path: Path, root: Path) -> Path:
    """``path``, after checking that it resolves (symbolic links followed) to a place inside
    ``root``: UnsafeNameError if it does not."""
    resolved, base = path.resolve(), root.resolve()
    if resolved == base or not resolved.is_relative_to(base):
        raise UnsafeNameError(f"{path} resolves to {resolved}, outside {base}")
    return path
