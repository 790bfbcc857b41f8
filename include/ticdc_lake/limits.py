"""Bounds on what one record or file may make us allocate: hostile input is normal input.

Every size, depth and count read from a message or an export is checked against one of these
before it is trusted. A record past a limit is a DecodeError of that record (it goes to
quarantine), whose reason names the limit and the config setting that raises it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ticdc_lake.errors import DecodeError

MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """The pipeline config's ``limits:`` section; each field's setting is its name with dashes."""

    # TiCDC's own max-message-bytes default is 10 MB; a key or value larger than this as stored,
    # or a value (or a claim-check object's value) larger after decompression, is refused.
    max_message_bytes: int = 10 * MIB
    # Nesting of Avro schemas and JSON documents: Python's recursion would crash far above it.
    max_nesting_depth: int = 64
    # Fields of an Avro record (Avro arrays and maps are refused: TiCDC writes none), columns
    # of a row, events of a batched message.
    max_collection_count: int = 1_000_000
    # Columns of one table: TiDB allows 4096 at most. A row image, a CREATE TABLE or ADD COLUMN
    # with more goes to quarantine; a gold table would take more (changes naming other columns)
    # fails instead of growing: a table's cost in the JVM grows with the square of its columns.
    max_table_columns: int = 4096
    # A claim-check object as stored (its JSON wrapping base64: about 4/3 of the message).
    max_claim_check_bytes: int = 16 * MIB
    # One line of a JSON Lines export, after the file's gzip/zstd is undone.
    max_export_line_bytes: int = 64 * MIB
    # A Parquet export's row group, by the uncompressed size its footer gives: a row group's
    # column chunks are read whole, and a few MB of zstd can hold gigabytes.
    max_parquet_row_group_bytes: int = 1024 * MIB
    # A Parquet export compressed as a whole file (.parquet.gz, .zst), unpacked in memory:
    # Parquet is read from its footer, at the end.
    max_unpacked_parquet_bytes: int = 1024 * MIB

    def __post_init__(self):
        for name, value in vars(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limits.{setting_name(name)} must be a whole number >= 1")


def setting_name(field_name: str) -> str:
    """The config key of a Limits field: ``max_message_bytes`` → ``max-message-bytes``."""
    return field_name.replace("_", "-")


class LimitExceededError(DecodeError):
    """A record (or export line) is larger, deeper or longer than a configured limit allows."""

    def __init__(self, what: str, limit_name: str, limit: int, found: int | None = None, **where):
        self.limit_name = limit_name
        self.limit = limit
        seen = f" ({found:,})" if found is not None else ""
        super().__init__(
            f"{what}{seen} exceeds limits.{setting_name(limit_name)} = {limit:,}; "
            "raise that setting in the pipeline config if such records are expected",
            **where,
        )


def check_limit(what: str, limits: Limits, limit_name: str, found: int) -> int:
    """``found`` if it is within ``limits.<limit_name>``, else LimitExceededError."""
    limit = getattr(limits, limit_name)
    if found > limit:
        raise LimitExceededError(what, limit_name, limit, found)
    return found
