"""Per-file statistics for Delta ``add`` actions, computed while a file is written.

Readers skip files with these (delta-rs merge, delete, ``file_uris`` predicates), so a wrong
minimum or maximum silently loses rows. Only values with an exact JSON form are recorded;
leaving a statistic out is always safe. Recorded:

- ``numRecords`` for every file;
- ``nullCount`` for top-level columns that are not nested;
- ``minValues``/``maxValues`` for integers, booleans, dates, finite floats, strings
  (a minimum longer than 32 characters is cut to a prefix, which is still ≤ every value; a
  maximum that long is left out), timestamps with a time zone (to the millisecond, as the Delta
  protocol writes them: the minimum rounded down and the maximum up so both still bound the data)
  and decimals of precision ≤ 15 (delta-rs reads statistics as binary floating point, and 15
  significant digits survive that round trip exactly; delta-rs's own writer clamps DECIMAL(20,0)
  values above 2^63 − 1 and rounds DECIMAL(38,x), which makes its skipping lose rows).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

STRING_PREFIX = 32
_EXACT_DECIMAL_DIGITS = 15
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _ordered_kind(arrow_type: pa.DataType) -> str | None:
    """How a column's min/max is recorded, or None when it is not."""
    if pa.types.is_integer(arrow_type):
        return "int"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_floating(arrow_type):
        return "float"
    if pa.types.is_date32(arrow_type):
        return "date"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return "timestamp"
    if pa.types.is_decimal(arrow_type) and arrow_type.precision <= _EXACT_DECIMAL_DIGITS:
        return "decimal"
    return None


def _is_nested(arrow_type: pa.DataType) -> bool:
    return pa.types.is_nested(arrow_type)


def _timestamp_text(micros: int, round_up: bool) -> str:
    millis, rest = divmod(micros, 1000)
    if round_up and rest:
        millis += 1
    moment = _EPOCH + dt.timedelta(milliseconds=millis)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class FileStats:
    """Accumulates the statistics of one data file, batch by batch."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.num_records = 0
        self.null_count: dict[str, int] = {f.name: 0 for f in schema if not _is_nested(f.type)}
        self._kinds = {f.name: k for f in schema if (k := _ordered_kind(f.type)) is not None}
        self._min: dict[str, Any] = {}
        self._max: dict[str, Any] = {}
        # Columns whose min/max cannot be recorded for this file (NaN or infinity seen).
        self._dropped: set[str] = set()

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        self.num_records += batch.num_rows
        for name in self.null_count:
            self.null_count[name] += batch.column(name).null_count
        for name, kind in self._kinds.items():
            if name in self._dropped:
                continue
            column = batch.column(name)
            if kind == "float" and not pc.all(pc.is_finite(column)).as_py():
                # NaN has no order and JSON has no infinities: record no bounds for the file.
                self._dropped.add(name)
                continue
            if kind == "timestamp":
                column = column.cast(pa.int64())
            bounds = pc.min_max(column)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if low is None:
                continue
            if name not in self._min or low < self._min[name]:
                self._min[name] = low
            if name not in self._max or high > self._max[name]:
                self._max[name] = high

    def _encode(self, kind: str, value: Any, is_max: bool) -> Any:
        if kind == "timestamp":
            return _timestamp_text(value, round_up=is_max)
        if kind == "date":
            return value.isoformat()
        if kind == "decimal":
            # An exact JSON number: at most 15 significant digits, so a float parse is exact.
            return json.loads(str(value))
        if kind == "float":
            # -0.0 == 0.0 for ordering; JSON has no negative zero worth keeping.
            return value + 0.0
        return value

    def to_json(self) -> str:
        minimum, maximum = {}, {}
        for name, kind in self._kinds.items():
            if name in self._dropped or name not in self._min:
                continue
            low, high = self._min[name], self._max[name]
            if kind == "string":
                minimum[name] = low[:STRING_PREFIX]
                if len(high) <= STRING_PREFIX:
                    maximum[name] = high
                continue
            minimum[name] = self._encode(kind, low, is_max=False)
            maximum[name] = self._encode(kind, high, is_max=True)
        stats = {
            "numRecords": self.num_records,
            "minValues": minimum,
            "maxValues": maximum,
            "nullCount": self.null_count,
        }
        # allow_nan=False: delta-rs commits stats text unchecked, and a log line that is not
        # JSON makes the whole table unreadable.
        return json.dumps(stats, separators=(",", ":"), allow_nan=False)
