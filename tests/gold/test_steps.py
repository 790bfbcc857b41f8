"""Which of a run's steps on gold may run at once."""

from __future__ import annotations

from types import SimpleNamespace

from ticdc_lake.gold.plan import Barrier
from ticdc_lake.gold.steps import SegmentStep, _batches


def _segment(item) -> SegmentStep:
    return SegmentStep(item, segment=None, key=None)


def test_segments_between_barriers_run_together_each_table_once_per_batch():
    orders, users = SimpleNamespace(name="orders"), SimpleNamespace(name="users")
    barrier = Barrier(ddl=None, effects=[], catalog=None, ts=7)
    late = Barrier(ddl=None, effects=[], catalog=None, ts=None)
    steps = [
        _segment(orders), _segment(users), barrier, _segment(orders),
        # Two segments of a table with no barrier between (both end at no TS): one at a time.
        _segment(users), _segment(users), late, _segment(orders),
    ]  # fmt: skip
    batches = [[number for number, _ in batch] for batch in _batches(steps)]
    assert batches == [[0, 1], [2], [3, 4], [5], [6], [7]]
    assert [step for batch in _batches(steps) for _, step in batch] == steps
