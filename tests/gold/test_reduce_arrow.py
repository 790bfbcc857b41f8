"""gold/reduce_arrow.py: the driver's key actions and last action per key, against the rules
worked out in Python that Spark's transforms are tested against (test_reduce_keys.py,
test_reduce_last.py), and the bounds of a run it takes. Whole runs, folds included, are
compared with Spark's in tests/gold/test_compact_fold.py."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ticdc_lake.gold import changes, reduce_arrow
from ticdc_lake.gold.catalog import TableName
from ticdc_lake.gold.feed import FeedPlan
from ticdc_lake.gold.state import INCONSISTENT, WATERMARK
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.silver.rows import IMAGE_TYPE

from tests.gold import test_reduce_keys as keys
from tests.gold import test_reduce_last as last


def _groups(members: dict) -> set[frozenset]:
    """The sets of members sharing a value."""
    found: dict = {}
    for member, value in members.items():
        found.setdefault(value, set()).add(member)
    return {frozenset(group) for group in found.values()}


@settings(max_examples=60, deadline=None)
@given(keys.CHANGES)
def test_actions_and_their_keys_are_the_handle_columns_of_each_image(changes):
    actions = reduce_arrow.key_actions(keys.silver_changes(changes), keys.FALLBACK)
    expected = keys._expected(changes)
    found = sorted(
        zip(actions.row.tolist(), actions.sub.tolist(), actions.deleted.tolist(), strict=True)
    )
    assert found == sorted((number, sub, deleted) for number, sub, deleted, _ in expected)
    assert (actions.new_image == ~actions.deleted).all()
    # Keys are codes: the same actions share one (a null key is a key of its own).
    action_ids = zip(actions.row.tolist(), actions.sub.tolist(), strict=True)
    coded = dict(zip(action_ids, actions.key.tolist(), strict=True))
    assert _groups(coded) == _groups({(n, sub): repr(key) for n, sub, _, key in expected})
    assert all((coded[(n, sub)] < 0) == (key is None) for n, sub, _, key in expected)


def _actions(rows: list[tuple]) -> reduce_arrow.Actions:
    """test_reduce_last's rows as the driver's actions: one change per action."""
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in range(12)]
    schema, table, segment, key, event, ts, sub, topic, partition, offset, index, deleted = columns
    count = len(rows)
    changes = pa.table(
        {
            "schema": pa.array(schema, pa.string()),
            "table": pa.array(table, pa.string()),
            "segment": pa.array(segment, pa.int32()),
            "event_id": pa.array(event, pa.string()),
            "commit_ts": pa.array(ts, pa.int64()),
            "order_ts": pa.array(ts, pa.int64()),
            "topic": pa.array(topic, pa.string()),
            "partition": pa.array(partition, pa.int32()),
            "offset": pa.array(offset, pa.int64()),
            "index": pa.array(index, pa.int32()),
            "columns": pa.nulls(count, IMAGE_TYPE),
            "old_columns": pa.nulls(count, IMAGE_TYPE),
            "handle": pa.array([[]] * count, pa.list_(pa.string())),
            "handle_key_only": pa.array([False] * count),
        }
    )
    codes: dict = {}
    key_codes = [-1 if k is None else codes.setdefault(repr(k), len(codes)) for k in key]
    deleted = np.array(deleted, bool)
    return reduce_arrow.Actions(
        changes,
        row=np.arange(count),
        deleted=deleted,
        new_image=~deleted,
        key=np.array(key_codes, np.int64),
        sub=np.array(sub, np.int8),
        key_values=[pa.nulls(count, reduce_arrow.KEY_VALUES_TYPE)] * 2,
    )


@settings(max_examples=60, deadline=None)
@given(last.ACTIONS)
def test_the_last_action_of_each_key_wins_and_copies_after_the_first_are_dropped(actions):
    # On the driver every change has its commit TS (runs that may lack one go to Spark).
    actions = [
        (*action[:4], 6 if action[4] is None else action[4], *action[5:]) for action in actions
    ]
    rows = last._rows(actions)
    expected = {row[10] for row in last._expected(rows)}  # each action's index is its number
    driver = _actions(rows)
    assert set(reduce_arrow.winners(driver, replays=True).tolist()) == expected
    events = [(row[1], row[4], row[5], row[6]) for row in rows]
    if len(set(events)) == len(events):
        assert set(reduce_arrow.winners(driver, replays=False).tolist()) == expected
    chosen = reduce_arrow.winners(driver, replays=True)
    segments = reduce_arrow.by_segment(reduce_arrow.candidates_of(driver, chosen))
    assert all(part.schema == reduce_arrow.REDUCED_SCHEMA for part in segments.values())
    found = sorted(
        (key, row["offset"]) for key, part in segments.items() for row in part.to_pylist()
    )
    assert found == sorted(((s, t, segment), rows[n][9]) for n in expected
                           for s, t, segment in [rows[n][:3]])  # fmt: skip


def _reduced(segments: dict) -> list[str]:
    return sorted(repr((key, row)) for key, part in segments.items() for row in part.to_pylist())


@settings(max_examples=60, deadline=None)
@given(
    keys.CHANGES,
    st.lists(st.integers(1, 3), min_size=12, max_size=12),
    st.lists(st.integers(1, 11), max_size=4),
)
def test_a_run_reduced_chunk_by_chunk_is_the_run_reduced_at_once(changes, stamps, cuts):
    silver = keys.silver_changes(changes)
    silver = silver.set_column(1, "commit_ts", pa.array(stamps[: len(changes)], pa.int64()))
    barriers = {("s", "t"): [2]}  # table t's changes at TS 2 and 3 in a segment of their own
    whole = reduce_arrow.reduce_chunk(silver, barriers, {}, keys.FALLBACK, replays=False)
    bounds = [0, *sorted({cut for cut in cuts if cut < len(changes)}), len(changes)]
    chunks = [
        reduce_arrow.reduce_chunk(
            silver.slice(start, stop - start), barriers, {}, keys.FALLBACK, replays=False
        )
        for start, stop in itertools.pairwise(bounds)
    ]
    candidates = pa.concat_tables(chunks)
    merged = candidates.take(pa.array(reduce_arrow.latest(candidates)))
    assert _reduced(reduce_arrow.by_segment(merged)) == _reduced(reduce_arrow.by_segment(whole))


@settings(max_examples=60, deadline=None)
@given(
    keys.CHANGES,
    st.lists(st.integers(1, 3), min_size=12, max_size=12),
    st.lists(st.booleans(), min_size=12, max_size=12),
    st.booleans(),
    st.booleans(),
)
@example(
    changes=[("insert", ["id"], "t", [keys._column("id", "1", None)], None)] * 3,
    stamps=[1] * 12,
    chosen=[False, True, True, *[True] * 9],
    replays=False,
    unknown_ts=True,
)
def test_the_changes_selected_of_a_chunk_reduce_as_those_changes_alone(
    changes, stamps, chosen, replays, unknown_ts
):
    """The driver reads whole row groups and selects the changes of the run in them: the
    others (settled, past the watermark, copies) must neither win nor lose; one without a
    commit TS among them (a topic whose protocol carries none) must not change how the
    selected ones' TSs rank."""
    silver = keys.silver_changes(changes)
    count = silver.num_rows
    selected = np.array(chosen[:count])
    # Within a stamp, later in Kafka is earlier in TS, by less than a float64 can tell.
    ts = [stamp * 10**17 + 11 - number for number, stamp in enumerate(stamps[:count])]
    if unknown_ts and not selected.all():
        ts[int(np.flatnonzero(~selected)[0])] = None
    silver = silver.set_column(1, "commit_ts", pa.array(ts, pa.int64()))
    # The first change sent again, as TiCDC replays it: a copy the replays rule drops.
    again = silver.slice(0, 1)
    again = again.set_column(again.schema.get_field_index("offset"), "offset", pa.array([99]))
    silver, selected = pa.concat_tables([silver, again]), np.append(selected, True)
    barriers = {("s", "t"): [2 * 10**17]}
    alone = reduce_arrow.reduce_chunk(
        silver.filter(pa.array(selected)), barriers, {}, keys.FALLBACK, replays=replays
    )
    among = reduce_arrow.reduce_chunk(
        silver, barriers, {}, keys.FALLBACK, replays=replays, selected=selected
    )
    assert _reduced(reduce_arrow.by_segment(among)) == _reduced(reduce_arrow.by_segment(alone))


@settings(max_examples=60, deadline=None)
@given(last.ACTIONS)
def test_dropping_copies_row_by_row_then_reducing_drops_what_the_replays_rule_drops(actions):
    """One change per action; an event's copies (same table, id and TS) share its segment,
    key, sub and kind, as in silver, where its id hashes its images."""
    actions = [
        (*action[:4], 6 if action[4] is None else action[4], *action[5:]) for action in actions
    ]
    shared, rows = {}, []
    for row in last._rows(actions):
        segment, key, sub, deleted = shared.setdefault(
            (row[1], row[4], row[5]), (row[2], row[3], row[6], row[11])
        )
        rows.append((*row[:2], segment, key, row[4], row[5], sub, *row[7:11], deleted))
    expected = {row[10] for row in last._expected(rows)}
    changes = _actions(rows).changes
    event = reduce_arrow.event_codes(changes.column("event_id"))
    kept = [rows[n] for n in reduce_arrow.first_copies(changes, event)]
    found = reduce_arrow.winners(_actions(kept), replays=False)
    assert {kept[n][10] for n in found} == expected


def test_a_run_whose_winners_are_too_wide_for_the_driver_is_left_to_spark(tmp_path, monkeypatch):
    images = [keys._column(name, "1", None) for name in keys.NAMES]
    silver = keys.silver_changes([("insert", ["id"], "t", images, None)] * 3)
    layout = LakeLayout(tmp_path)
    write_deltalake(str(layout.changes), silver, partition_by=["bronze_batch"])
    plan = FeedPlan(
        name="f", topics=("k",), mode=WATERMARK, target=5, prior={}, zones={}, lacks_ts=False,
        mode_reason=None, rebuild=False, generation=0, low_ts=-1, low_batch=-1,
    )  # fmt: skip
    reduced, counted, _ = changes.reduce_on_driver(layout, plan, {}, {}, {})
    assert reduced.sizes == {("s", "t", 0): 1} and counted[TableName("s", "t")].read == 3
    # Three inserts of one key: one winner, of three columns.
    monkeypatch.setattr(changes, "DRIVER_REDUCE_ELEMENTS", len(keys.NAMES))
    assert changes.reduce_on_driver(layout, plan, {}, {}, {}) is not None
    monkeypatch.setattr(changes, "DRIVER_REDUCE_ELEMENTS", len(keys.NAMES) - 1)
    assert changes.reduce_on_driver(layout, plan, {}, {}, {}) is None


def test_changes_without_a_commit_ts_are_left_to_spark(tmp_path):
    """A run without watermarks selects by bronze batch, so a change without a commit TS may
    be selected: its order comes from the TSs around it (reduce.with_order_ts), in Spark."""
    images = [keys._column("id", "1", None)]
    silver = keys.silver_changes([("insert", ["id"], "t", images, None)] * 2)
    silver = silver.set_column(1, "commit_ts", pa.array([5, None], pa.int64()))
    layout = LakeLayout(tmp_path)
    write_deltalake(str(layout.changes), silver, partition_by=["bronze_batch"])
    plan = FeedPlan(
        name="f", topics=("k",), mode=INCONSISTENT, target=None, prior={}, zones={},
        lacks_ts=False, mode_reason=None, rebuild=False, generation=0, low_ts=-1, low_batch=-1,
    )  # fmt: skip
    assert changes.reduce_on_driver(layout, plan, {}, {}, {}) is None


def test_chunks_reduced_two_at_a_time_come_back_in_order_and_stop_when_told():
    started = []

    def work(number, delay):
        started.append(number)
        time.sleep(delay)
        return number

    # The first chunk is the slowest: its result still comes first.
    delays = [(number, 0.05 if number == 0 else 0) for number in range(6)]
    assert list(changes.in_parallel(work, iter(delays))) == list(range(6))
    started.clear()
    for found in changes.in_parallel(work, iter(delays)):
        if found == 1:
            break  # as reduce_on_driver stops at a chunk only Spark can reduce
    # Two running, one waiting its turn, when the loop stopped after two.
    assert sorted(started) == list(range(len(started))) and len(started) <= 4


def test_a_thread_done_before_the_oldest_chunk_starts_the_next():
    finished = {}

    def work(number, delay):
        time.sleep(delay)
        finished[number] = time.perf_counter()
        return number

    delays = [(0, 0.3), (1, 0), (2, 0), (3, 0)]
    assert list(changes.in_parallel(work, iter(delays))) == [0, 1, 2, 3]
    assert finished[2] < finished[0]  # not held back until chunk 0 was done


def test_a_failing_chunk_fails_the_reduce():
    def work(number):
        if number == 2:
            raise ValueError("chunk 2")
        return number

    found = changes.in_parallel(work, iter([(n,) for n in range(5)]))
    assert next(found) == 0 and next(found) == 1
    with pytest.raises(ValueError, match="chunk 2"):
        next(found)


@given(
    st.integers(1, 4).flatmap(
        lambda width: st.lists(
            st.lists(st.integers(0, 2**62), min_size=width, max_size=width)
            | st.lists(st.integers(0, 3), min_size=width, max_size=width),
            max_size=40,
        ).map(lambda rows: np.array(rows, np.int64).reshape(-1, width))
    )
)
def test_row_codes_are_numpys_unique_rows(matrix):
    # Small values take the one-number path, values near 2^62 the sorting one.
    expected = np.unique(matrix, axis=0, return_inverse=True)[1].reshape(-1)
    assert reduce_arrow._row_codes(matrix).tolist() == expected.tolist()


def _sort_column(rows: int):
    """A column of ``rows`` values of one of the kinds the reduce sorts by: small codes, TSs,
    Kafka offsets, flags, and ranges too wide to pack (int64's and uint64's extremes)."""
    kinds = [
        (st.integers(-3, 3), np.int64),
        (st.integers(0, 100), np.int32),
        (st.integers(2**62, 2**62 + 2**40), np.int64),
        (st.booleans(), np.bool_),
        (st.sampled_from([-(2**63), 0, 2**63 - 1]), np.int64),
        (st.integers(0, 2**64 - 1), np.uint64),
    ]
    return st.sampled_from(kinds).flatmap(
        lambda kind: st.lists(kind[0], min_size=rows, max_size=rows).map(
            lambda values: np.array(values, kind[1])
        )
    )


@settings(max_examples=300, deadline=None)
@example([np.array([2**32 - 1, 0]), np.array([2**31, 0])])  # together 2^63 values and more
@given(
    st.integers(0, 30).flatmap(lambda rows: st.lists(_sort_column(rows), min_size=1, max_size=7))
)
def test_lexsort_orders_as_numpys_lexsort(columns):
    # Columns packed into one number where their ranges allow, and not where they do not.
    expected = np.lexsort(tuple(reversed(columns)))
    assert reduce_arrow._lexsort(columns).tolist() == expected.tolist()


def same_grouping(codes: np.ndarray, ids: list) -> bool:
    """Equal codes exactly where the ids are equal."""
    return (
        len(set(zip(codes.tolist(), ids, strict=True))) == len(set(codes.tolist())) == len(set(ids))
    )


event_ids = st.lists(
    st.sampled_from([f"{n:032x}" for n in (0, 1, 2**64, 2**64 + 1, 2**127)]) | st.none(),
    max_size=30,
)


@given(event_ids, st.booleans())
def test_event_codes_group_equal_ids(ids, hashes_collide):
    # Ids sharing their first 16 digits, nulls (code 0) and, when `hashes_collide`, every id
    # hashed alike: the whole ids still decide.
    array = pa.array(ids, pa.string())
    if hashes_collide:
        real = reduce_arrow._id_hashes
        reduce_arrow._id_hashes = lambda ids: None if real(ids) is None else np.zeros(len(ids))
    try:
        codes = reduce_arrow.event_codes(array)
    finally:
        if hashes_collide:
            reduce_arrow._id_hashes = real
    assert same_grouping(codes, ids)
    assert all((code == 0) == (id_ is None) for code, id_ in zip(codes, ids, strict=True))


def test_event_codes_of_ids_silver_does_not_write_are_still_grouped():
    ids = ["a" * 32, "short", "a" * 32, "short", None]
    assert same_grouping(reduce_arrow.event_codes(pa.array(ids)), ids)


@given(st.permutations(range(5)), st.integers(0, 5))
def test_rows_at_takes_the_rows_asked_for(order, count):
    rows = pa.table({"n": list(range(5)), "s": [f"v{n}" for n in range(5)]})
    numbers = np.array(sorted(order[:count]) if count < 5 else order, np.int64)
    taken = changes.rows_at(rows, numbers)
    assert taken.column("n").to_pylist() == numbers.tolist()
    assert taken.column("s").to_pylist() == [f"v{n}" for n in numbers]
