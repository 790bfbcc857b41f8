"""Errors of the Delta table IO layer."""

from __future__ import annotations

from ticdc_lake.errors import TicdcLakeError


class DeltaIOError(TicdcLakeError):
    """Base of the table IO errors."""


class TableNotFoundError(DeltaIOError):
    """The path holds no Delta table (no ``_delta_log``)."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"no Delta table at {path} (check with delta_table_exists first)")


class UnsupportedTableError(DeltaIOError):
    """The table uses a Delta feature this reader cannot honour: its files are not its rows."""

    def __init__(self, path: str, features: list[str]):
        self.path = path
        self.features = features
        super().__init__(
            f"Delta table {path} uses {', '.join(features)}: reading its Parquet files directly "
            "would give wrong rows; rewrite it without these features "
            "(e.g. with delta-rs or delta-spark, then disable them)"
        )


class SchemaMismatchError(DeltaIOError):
    """Data to write does not fit the table's schema or partitioning."""


class MergeSourceError(DeltaIOError):
    """A merge's change set is invalid (null or duplicate keys, missing columns)."""


class TableFileMissingError(DeltaIOError):
    """Data files the table's snapshot references are not on disk (deleted or moved)."""

    def __init__(self, path: str, files: list[str], version: int | None = None):
        self.path = path
        self.files = files
        at = f" (version {version})" if version is not None else ""
        more = f" and {len(files) - 1} more" if len(files) > 1 else ""
        super().__init__(
            f"Delta table {path}{at}: data file {files[0]}{more} is missing (deleted or moved "
            "from under the table): restore it from a backup, or rebuild the table: gold "
            "from silver with `--rebuild` (ticdc-lake run --stages compact --rebuild), silver "
            "and bronze by emptying the lake and landing the exports again"
        )


class TableFileUnreadableError(DeltaIOError):
    """A data file of a table could not be read (truncated, corrupt, not Parquet)."""

    def __init__(self, path: str, file: str, cause: str):
        self.path = path
        self.files = [file]
        super().__init__(
            f"Delta table {path}: data file {file} cannot be read ({cause}): restore it from "
            "a backup, or rebuild the table: gold from silver with `--rebuild` (ticdc-lake run "
            "--stages compact --rebuild), silver and bronze by emptying the lake and landing "
            "the exports again"
        )
