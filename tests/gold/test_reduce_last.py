"""``last_per_key``: each key's last action, replays dropped, against the rule worked out in
Python; and a run without replays sorting its actions once."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ticdc_lake.gold.reduce import POSITION, last_per_key

SCHEMA = (
    "schema string, table string, segment int, key array<struct<n:string,t:string,b:binary>>, "
    "event_id string, order_ts long, sub int, topic string, partition int, offset long, "
    "index int, deleted boolean"
)
KEYS = st.one_of(st.none(), st.sampled_from([[], [("id", "1", None)], [("id", "2", None)]]))
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["t", "u"]),  # table
        st.sampled_from([0, 1]),  # segment
        KEYS,
        st.sampled_from(["e1", "e2", "e3"]),  # event id
        st.one_of(st.none(), st.sampled_from([5, 7])),  # order TS
        st.sampled_from([0, 1]),  # sub
        st.sampled_from(["a", "b"]),  # topic
        st.integers(0, 30),  # offset
        st.booleans(),  # deleted
    ),
    max_size=14,
)


def _rows(actions: list[tuple]) -> list[tuple]:
    # A distinct (offset, index) per action: positions are unique in silver.
    return [
        ("s", table, segment, key, event, ts, sub, topic, 0, offset, number, deleted)
        for number, (table, segment, key, event, ts, sub, topic, offset, deleted)
        in enumerate(actions)
    ]  # fmt: skip


def _expected(rows: list[tuple]) -> set[tuple]:
    first: dict[tuple, tuple] = {}
    for row in map(_hashable, rows):
        copy = (*row[:4], row[4], row[5], row[6])  # key columns, event id, order TS, sub
        position = row[7:11]
        if copy not in first or position < first[copy][7:11]:
            first[copy] = row
    last: dict[tuple, tuple] = {}
    for row in first.values():
        rank = (row[5] is None, row[5] or 0, *row[7:11], row[6])  # no order TS: the largest
        held = last.get(row[:4])
        if held is None or rank > (held[5] is None, held[5] or 0, *held[7:11], held[6]):
            last[row[:4]] = row
    return set(last.values())


def _hashable(row) -> tuple:
    key = row[3] if row[3] is None else tuple(tuple(part) for part in row[3])
    return (*row[:3], key, *row[4:])


def _found(frame) -> set[tuple]:
    return {_hashable(tuple(row)) for row in frame.collect()}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ACTIONS)
def test_the_last_action_of_each_key_wins_and_copies_after_the_first_are_dropped(spark, actions):
    rows = _rows(actions)
    frame = spark.createDataFrame(rows, SCHEMA)
    assert _found(last_per_key(frame)) == _expected(rows)
    # Without two actions of one event (what a run's counts tell): the same, sorted once.
    events = [(row[1], row[4], row[5], row[6]) for row in rows]
    if len(set(events)) == len(events):
        assert _found(last_per_key(frame, replays=False)) == _expected(rows)


def test_a_run_without_replays_sorts_its_actions_once(spark):
    rows = _rows([("t", 0, [("id", "1", None)], "e1", 5, 0, "a", 1, False)])
    frame = spark.createDataFrame(rows, SCHEMA)

    def windows(replays: bool) -> int:
        plan = last_per_key(frame, replays=replays)._jdf.queryExecution().executedPlan()
        return plan.toString().count("Window [")

    assert (windows(True), windows(False)) == (2, 1)
    assert set(POSITION) <= set(SCHEMA.replace(",", " ").split())
