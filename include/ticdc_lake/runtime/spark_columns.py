"""Columns named by upstream, referenced in Spark: one quoting rule for every such name.

Spark parses a string column reference: ``a.b`` is field ``b`` of ``a`` and a backtick ends a
quoted name. TiDB allows nearly any character in a quoted identifier, so every reference to
a column whose name comes from upstream goes through ``named_column`` (or ``quoted``), which
quotes the whole name and doubles the backticks in it; ``map_in_arrow`` does for
``mapInArrow`` what PySpark does not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType


def quoted(name: str) -> str:
    """``name`` as one Spark identifier: in backticks, any backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def named_column(name: str) -> Column:
    """The column named exactly ``name``."""
    return F.col(quoted(name))


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def map_in_arrow(frame: DataFrame, function: Callable, schema: StructType) -> DataFrame:
    """``frame.mapInArrow(function, schema)`` for any column names: PySpark refers to each
    input column by its name unquoted, which fails on a backtick and misreads a dot, so such a
    frame goes in under positional names and ``function`` sees its batches renamed back."""
    names = frame.columns
    if all(_PLAIN.fullmatch(name) for name in names):
        return frame.mapInArrow(function, schema)
    positional = frame.toDF(*[f"_{i}" for i in range(len(names))])
    return positional.mapInArrow(_Renamed(function, tuple(names)), schema)


@dataclass(frozen=True)
class _Renamed:
    """A mapInArrow function given batches whose columns are renamed to ``names`` first."""

    function: Callable
    names: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return self.function(batch.rename_columns(list(self.names)) for batch in batches)
