"""Offset runs: per (topic, partition), the contiguous runs of offsets bronze holds.

Land keeps them in ``offset_ranges`` and the holes between them in ``offset_gaps``, so a batch
learns where it overlaps bronze without scanning bronze.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

# Per (topic, partition): sorted, disjoint, inclusive offset runs.
Runs = dict[tuple[str, int], list[tuple[int, int]]]


def collect_runs(records: DataFrame) -> Runs:
    """The contiguous offset runs of ``records`` (offsets unique per partition), per
    (topic, partition): gaps and islands, offset minus its rank is constant along a run."""
    order = Window.partitionBy("topic", "partition").orderBy("offset")
    rows = (
        records.select("topic", "partition", "offset")
        .withColumn("run", F.col("offset") - F.row_number().over(order))
        .groupBy("topic", "partition", "run")
        .agg(F.min("offset").alias("low"), F.max("offset").alias("high"))
        .collect()
    )
    runs: Runs = defaultdict(list)
    for row in rows:
        runs[(row.topic, row.partition)].append((row.low, row.high))
    return {key: sorted(value) for key, value in runs.items()}


def run_key(row: dict) -> tuple:
    return row["topic"], row["partition"], row["from_offset"]


def range_rows(ranges: Runs) -> list[dict]:
    return [
        {"topic": t, "partition": p, "from_offset": a, "to_offset": b, "size": b - a + 1}
        for (t, p), runs in sorted(ranges.items())
        for a, b in runs
    ]


def gap_rows(ranges: Runs, old_gaps: list[dict], batch_id: int) -> list[dict]:
    """The gaps between consecutive runs; a gap seen before keeps the batch that first saw it."""
    first_seen = {(*run_key(g), g["to_offset"]): g["batch_id"] for g in old_gaps}
    gaps = []
    for (topic, partition), runs in sorted(ranges.items()):
        for (_, end), (start, _) in itertools.pairwise(runs):
            low, high = end + 1, start - 1
            gaps.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "from_offset": low,
                    "to_offset": high,
                    "size": high - low + 1,
                    "batch_id": first_seen.get((topic, partition, low, high), batch_id),
                }
            )
    return gaps


def overlap_windows(
    extents: dict[tuple[str, int], tuple[int, ...]], ranges: Runs
) -> dict[tuple[str, int], tuple[int, int]]:
    """Per (topic, partition): the offset window where the batch's [low, high] meets bronze's
    runs (absent when it meets none: the batch's offsets there are all new)."""
    windows = {}
    for key, (low, high, *_) in extents.items():
        meeting = [(a, b) for a, b in ranges.get(key, ()) if a <= high and b >= low]
        if meeting:
            windows[key] = (max(low, meeting[0][0]), min(high, meeting[-1][1]))
    return windows


def merge_runs(old: Runs, new: Runs) -> Runs:
    """The union of two sets of inclusive offset runs, adjacent runs joined."""
    merged: Runs = {}
    for key in sorted(set(old) | set(new)):
        runs = sorted([*old.get(key, ()), *new.get(key, ())])
        result: list[tuple[int, int]] = []
        for low, high in runs:
            if result and low <= result[-1][1] + 1:
                result[-1] = (result[-1][0], max(result[-1][1], high))
            else:
                result.append((low, high))
        merged[key] = result
    return merged
