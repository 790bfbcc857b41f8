"""Errors of the gold layer: DDL that cannot be read, values that cannot be typed, compaction."""

from __future__ import annotations

from ticdc_lake.errors import TicdcLakeError


class GoldError(TicdcLakeError):
    """Base of the gold layer's errors."""


class DdlParseError(GoldError):
    """A DDL query the parser does not understand, with where it stopped and what it expected."""

    def __init__(self, query: str, position: int, expected: str, found: str):
        self.query = query
        self.position = position
        self.expected = expected
        self.found = found
        excerpt = query if len(query) <= 160 else query[:157] + "..."
        super().__init__(
            f"cannot parse DDL at character {position}: expected {expected}, found {found} "
            f"(query: {excerpt!r})"
        )


class ConversionError(GoldError):
    """A silver value that does not fit its gold column type, with the change it came from."""


class CompactError(GoldError):
    """Compaction of one or more gold tables failed; the others were compacted."""

    def __init__(self, failures: dict[str, str]):
        self.failures = dict(failures)
        lines = "; ".join(f"{table}: {reason}" for table, reason in sorted(failures.items()))
        super().__init__(f"{len(failures)} gold table(s) not compacted: {lines}")
