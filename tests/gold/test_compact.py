"""Compact stage: gold equals the generator's tables at the watermark, exactly and typed."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from ticdc_lake.config import ChangefeedConfig, PipelineConfig
from ticdc_lake.delta import read_delta
from ticdc_lake.gold import changes as gold_changes
from ticdc_lake.gold import reasons
from ticdc_lake.gold import steps as gold_steps
from ticdc_lake.gold import tables as gold_tables
from ticdc_lake.gold.compact import compact, target_of
from ticdc_lake.gold.exceptions import CompactError
from ticdc_lake.gold.state import TableState, read_state
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.lake.names import split_name
from ticdc_lake.protocols import CodecSettings
from ticdc_lake.sample.cases import BY_NAME, make_column
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import DdlEvent, ResolvedEvent, RowEvent
from ticdc_lake.silver.watermark import ChangefeedWatermark, watermark

from tests.gold import silver_input as si

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
ZONE = "Asia/Shanghai"  # the TiCDC zone the main lake's TIMESTAMP text is read in


def gold_rows(layout: LakeLayout, name: str, version: int | None = None) -> list[dict]:
    schema, table = split_name(name)
    return (
        DeltaTable(str(layout.gold(schema, table)), version=version).to_pyarrow_table().to_pylist()
    )


def _key(row: dict, keys: tuple[str, ...]) -> tuple:
    return tuple(str(row[k]) for k in keys)


def assert_gold_equals_expected(layout, workload, ts, *, zone="UTC", versions=None):
    """Every table, row by row with typed values; _commit_ts never above ``ts``."""
    expected = si.expected_tables(workload, ts, zone)
    assert expected, "the workload created its tables before the first resolved TS"
    for name, (columns, rows) in expected.items():
        keys = workload.expected.handle_keys[name]
        found = gold_rows(layout, name, versions[name] if versions else None)
        stamps = [row.pop("_commit_ts") for row in found]
        # Without commit TSs (Canal-JSON without the TiDB extension) gold cannot say them.
        assert all(stamp is None or stamp <= ts for stamp in stamps), name
        assert sorted(found, key=lambda r: _key(r, keys)) == sorted(
            rows, key=lambda r: _key(r, keys)
        ), name
        if found:
            assert set(found[0]) == set(columns), name


# --- the main lake: Open Protocol, replays, an idle partition, uneven arrival, two runs -------


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    """Two runs; the second is killed after three merges and run again."""
    directory = tmp_path_factory.mktemp("main")
    workload = generate_workload(seed=11, transactions=200)
    streams = si.dispatch(workload, "open-protocol", partitions=4, idle_partitions=1, replays=3)
    config = si.write_config(directory, streams, "open-protocol", time_zone=ZONE)
    layout = LakeLayout(config.lake)
    (topic,) = streams.topics
    # Partitions arrive unevenly: the watermark is the slowest one's.
    first_landing = {(topic, 0): 0.7, (topic, 1): 0.35, (topic, 2): 0.55, (topic, 3): 0.45}
    si.land(spark, layout, streams, first_landing)
    landed_first = dict(streams.landed)
    first_mark = watermark(spark, config).changefeeds[0].watermark
    first = compact(spark, config)
    si.land(spark, layout, streams, 1.0)
    second_mark = watermark(spark, config).changefeeds[0].watermark

    merge = gold_tables.GoldTable.merge
    merges: list[bool] = []

    def dies_on_the_fourth(self, segment, version):
        if len(merges) == 3:
            raise KeyboardInterrupt("killed")  # as a SIGKILL would stop the driver
        merges.append(merge(self, segment, version))
        return merges[-1]

    with pytest.MonkeyPatch.context() as patch:
        # One merge at a time, so the kill comes after exactly the first three in step order
        # (at once, which ones were done would depend on the threads' timing).
        patch.setattr(gold_steps, "in_parallel", lambda work, arguments, threads: map(
            lambda argument: work(*argument), arguments
        ))  # fmt: skip
        patch.setattr(gold_tables.GoldTable, "merge", dies_on_the_fourth)
        with pytest.raises(KeyboardInterrupt):
            compact(spark, config)
        killed = (list(merges), read_state(layout.gold_state))
        merges.clear()
        patch.setattr(
            gold_tables.GoldTable, "merge", lambda *a: merges.append(merge(*a)) or merges[-1]
        )
        second = compact(spark, config)
    return SimpleNamespace(
        workload=workload, streams=streams, config=config, layout=layout, topic=topic,
        landed_first=landed_first, first_mark=first_mark, second_mark=second_mark,
        first=first, second=second, killed=killed, resumed_merges=list(merges),
    )  # fmt: skip


def test_the_workload_has_every_case_the_issue_names(lake):
    workload, streams = lake.workload, lake.streams
    assert workload.counts["key_changes"] > 0
    assert any(replay["row_events"] for replay in streams.routing.replays)
    assert streams.routing.idle_partitions == (3,)
    kinds = {e.ddl_type for e in workload.ddl_events if e.commit_ts <= lake.second_mark}
    assert {mysql.ACTION_ADD_COLUMN, mysql.ACTION_DROP_COLUMN, mysql.ACTION_TRUNCATE_TABLE} <= kinds
    # Some DDLs fall between the two watermarks: the second run crosses barriers.
    assert any(lake.first_mark < e.commit_ts <= lake.second_mark for e in workload.ddl_events)
    assert lake.first_mark in workload.resolved_ts and lake.first_mark < lake.second_mark
    # Transactions spanning partitions that had partly landed, beyond the first watermark.
    landed = {
        (e.partition, e.offset)
        for key, events in streams.events.items()
        for e in events[: lake.landed_first[key]]
    }
    partly = 0
    for transaction in workload.transactions:
        if transaction.commit_ts <= lake.first_mark:
            continue
        where = [
            (key[1], e.offset)
            for key, events in streams.events.items()
            for e in events
            if isinstance(e, RowEvent) and e.commit_ts == transaction.commit_ts
        ]
        if len({p for p, _ in where}) > 1 and 0 < sum(w in landed for w in where) < len(where):
            partly += 1
    assert partly > 0


def test_first_run_gold_is_the_expected_state_at_the_first_watermark(lake):
    versions = {t.table: t.version for t in lake.first.changefeeds[0].tables}
    assert_gold_equals_expected(
        lake.layout, lake.workload, lake.first_mark, zone=ZONE, versions=versions
    )


def test_second_run_gold_is_the_expected_state_at_the_final_watermark(lake):
    assert lake.second_mark == lake.workload.resolved_ts[-1]
    assert_gold_equals_expected(lake.layout, lake.workload, lake.second_mark, zone=ZONE)


def test_results_and_state_table_say_what_gold_holds(spark, lake):
    (feed,) = lake.second.changefeeds
    assert (feed.mode, feed.target, feed.previous) == (
        "watermark",
        lake.second_mark,
        lake.first_mark,
    )
    states = {s.full_name: s for s in read_state(lake.layout.gold_state)}
    expected = si.expected_tables(lake.workload, lake.second_mark, ZONE)
    assert set(states) == set(expected) == {t.table for t in feed.tables}
    for table in feed.tables:
        state = states[table.table]
        found = DeltaTable(state.path).to_pyarrow_table()
        assert table.rows == state.rows == found.num_rows == len(expected[table.table][1])
        assert (state.mode, state.watermark, state.applied_ts) == (
            "watermark",
            lake.second_mark,
            lake.second_mark,
        )
        assert state.reason is None and not state.dropped
        assert tuple(state.handle_key) == lake.workload.expected.handle_keys[table.table]
        columns = {c["name"]: c for c in json.loads(state.columns)}
        assert set(columns) == set(found.column_names)
        assert table.version == DeltaTable(state.path).version() == state.gold_version
    totals = {name: sum(getattr(t, name) for t in feed.tables) for name in ("ddl", "duplicates")}
    assert totals["ddl"] > 0 and totals["duplicates"] > 0
    numbers = json.loads(states["shop.numbers"].columns)
    assert {
        "name": "c_bigint_unsigned",
        "type": "decimal(20,0)",
        "mysql_type": "bigint(20) unsigned",
    } in numbers


def test_plain_deltalake_and_spark_read_the_rows_the_stage_reports(spark, lake):
    for table in lake.second.changefeeds[0].tables:
        schema, name = table.table.split(".")
        path = lake.layout.gold(schema, name)
        plain = DeltaTable(str(path)).to_pyarrow_table()
        through_spark = read_delta(spark, path).toArrow()
        assert plain.num_rows == table.rows == through_spark.num_rows
        keys = lake.workload.expected.handle_keys[table.table]
        assert sorted(plain.to_pylist(), key=lambda r: _key(r, keys)) == sorted(
            through_spark.cast(plain.schema).to_pylist(), key=lambda r: _key(r, keys)
        )


def test_gold_types_follow_the_ddl(lake):
    schema = DeltaTable(str(lake.layout.gold("shop", "numbers"))).schema().to_arrow()
    types = {f.name: str(f.type) for f in pa.schema(schema)}
    assert types["id"] == "int64" and types["_commit_ts"] == "int64"
    assert types["c_bigint_unsigned"] == "decimal128(20, 0)"
    assert types["c_decimal"] == "decimal128(20, 6)" and types["c_decimal_wide"] == "string"
    assert types["c_tinyint"] == "int8" and types["c_float"] == "float"
    times = {f.name: str(f.type) for f in pa.schema(
        DeltaTable(str(lake.layout.gold("shop", "times"))).schema().to_arrow()
    )}  # fmt: skip
    assert times["c_timestamp"] == "timestamp[us, tz=UTC]"
    assert times["c_datetime6"] == "timestamp[us]" and times["c_date"] == "date32[day]"
    assert "c_datetime" not in times  # dropped by ALTER TABLE ... DROP COLUMN


def test_rerun_changes_nothing_and_adds_no_version(spark, lake):
    paths = [lake.layout.gold_state, lake.layout.watermarks] + [
        lake.layout.gold(*t.table.split(".")) for t in lake.second.changefeeds[0].tables
    ]
    before = {str(p): DeltaTable(str(p)).version() for p in paths}
    assert not watermark(spark, lake.config).committed
    again = compact(spark, lake.config)
    assert again.changefeeds[0].noop
    assert {str(p): DeltaTable(str(p)).version() for p in paths} == before
    assert {t.table: t.rows for t in again.changefeeds[0].tables} == {
        t.table: t.rows for t in lake.second.changefeeds[0].tables
    }


@pytest.mark.slow  # the large-run path takes a few more Spark jobs
def test_one_run_to_the_final_watermark_equals_the_two_incremental_runs(
    spark, lake, tmp_path, monkeypatch
):
    streams = si.dispatch(lake.workload, "open-protocol", partitions=4, replays=3)
    config = si.write_config(tmp_path, streams, "open-protocol", time_zone=ZONE)
    layout = LakeLayout(config.lake)
    si.land(spark, layout, streams, 1.0)
    watermark(spark, config)
    # As a run too large to collect: empty tables are loaded by the executors.
    monkeypatch.setattr(gold_changes, "COLLECT_LIMIT", 0)
    monkeypatch.setattr(gold_changes, "DRIVER_REDUCE_LIMIT", -1)
    appends = recorded_calls(monkeypatch, gold_tables.GoldTable, "append")
    once = compact(spark, config)
    # Every table's initial load (and the reload of a truncated one) took that path.
    assert {str(gold.name) for gold in appends} == {t.table for t in once.changefeeds[0].tables}
    assert once.changefeeds[0].target == lake.second_mark
    assert_gold_is_the_incremental_runs(layout, lake, once)
    # A collected run reports what a spilled one does, and so does one reduced on the driver,
    # a row group at a time.
    monkeypatch.setattr(gold_changes, "COLLECT_LIMIT", 10**9)
    collected = compact(spark, config, rebuild=True)
    assert _counted(collected) == _counted(once)
    monkeypatch.setattr(gold_changes, "DRIVER_REDUCE_LIMIT", 10**9)
    monkeypatch.setattr(gold_changes, "DRIVER_CHUNK_ROWS", 1)
    monkeypatch.setattr(gold_changes, "RANK_ELEMENTS", 1)
    on_driver = compact(spark, config, rebuild=True)
    assert _counted(on_driver) == _counted(once)
    assert_gold_is_the_incremental_runs(layout, lake, once)


def recorded_calls(monkeypatch, owner, name: str) -> list:
    """The first argument of each call of ``owner.name`` (a method's ``self``), which still
    runs as before."""
    calls, original = [], getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a: calls.append(a[0]) or original(*a))
    return calls


def assert_gold_is_the_incremental_runs(layout: LakeLayout, lake, result) -> None:
    """Gold in ``layout`` is the gold ``lake``'s two incremental runs left, table by table."""
    for table in result.changefeeds[0].tables:
        keys = lake.workload.expected.handle_keys[table.table]
        assert sorted(gold_rows(layout, table.table), key=lambda r: _key(r, keys)) == sorted(
            gold_rows(lake.layout, table.table), key=lambda r: _key(r, keys)
        )


@pytest.mark.slow  # the large-run path takes a few more Spark jobs
def test_a_large_segment_into_a_gold_table_with_rows_is_merged_by_delta_spark(
    spark, lake, tmp_path, monkeypatch
):
    """The second run's segments, too large to collect, are typed by the executors and merged
    into the first run's gold by delta-spark: the same gold as the driver's merges, commits
    that are delta-spark's, and a rerun that changes nothing."""
    streams = si.dispatch(lake.workload, "open-protocol", partitions=4, replays=3)
    config = si.write_config(tmp_path, streams, "open-protocol", time_zone=ZONE)
    layout = LakeLayout(config.lake)
    si.land(spark, layout, streams, 0.5)
    watermark(spark, config)
    compact(spark, config)
    si.land(spark, layout, streams, 1.0)
    watermark(spark, config)
    monkeypatch.setattr(gold_changes, "COLLECT_LIMIT", 0)
    monkeypatch.setattr(gold_changes, "DRIVER_REDUCE_LIMIT", -1)
    merged = recorded_calls(monkeypatch, gold_tables.GoldTable, "merge_frame")
    second = compact(spark, config)
    assert merged and second.changefeeds[0].target == lake.second_mark
    assert_gold_is_the_incremental_runs(layout, lake, second)
    for gold in merged:
        history = DeltaTable(str(gold.path)).history()
        engines = {i["engineInfo"].split(" ")[0] for i in history if i["operation"] == "MERGE"}
        assert "Apache-Spark/4.1.1" in engines
    versions = {str(g.path): DeltaTable(str(g.path)).version() for g in merged}
    compact(spark, config)
    assert {str(g.path): DeltaTable(str(g.path)).version() for g in merged} == versions


def _counted(result) -> list[tuple]:
    (feed,) = result.changefeeds
    tables = sorted(
        (t.table, t.changes, t.duplicates, t.upserts, t.deletes, t.ddl, t.rows, t.reason)
        for t in feed.tables
    )
    return [feed.pending, *tables]


def test_a_killed_run_leaves_the_state_behind_and_the_rerun_skips_what_was_done(lake):
    merges, states = lake.killed
    assert merges == [True, True, True]
    assert {s.applied_ts for s in states} == {lake.first_mark}  # the state did not advance
    # The rerun recognises the three merges done before the kill and does the rest.
    assert lake.resumed_merges[:3] == [False, False, False]
    assert len(lake.resumed_merges) > 3 and all(lake.resumed_merges[3:])


# --- changefeeds without watermarks --------------------------------------------------------------


def test_avro_with_a_cutoff_ts(spark, tmp_path):
    """Avro deletes carry no commit TS: they are placed by the next TS in their partition."""
    workload = generate_workload(seed=4, transactions=120)
    settings = CodecSettings(options=(("enable_watermark", True),))
    streams = si.dispatch(workload, "avro", partitions=2, replays=2, settings=settings)
    cutoff = workload.resolved_ts[2 * len(workload.resolved_ts) // 3]
    config = si.write_config(
        tmp_path, streams, "avro", partitions=2, watermarks=False, cutoff_ts=cutoff
    )
    layout = LakeLayout(config.lake)
    si.land(spark, layout, streams, 1.0)
    result = compact(spark, config)
    (feed,) = result.changefeeds
    assert (feed.mode, feed.target) == ("cutoff", cutoff)
    assert_gold_equals_expected(layout, workload, cutoff)
    states = read_state(layout.gold_state)
    assert {(s.mode, s.watermark) for s in states} == {("cutoff", cutoff)}
    deletes = sum(
        1 for events in streams.events.values() for e in events
        if isinstance(e, RowEvent) and e.op == "delete" and e.commit_ts is None
    )  # fmt: skip
    assert deletes > 0 and sum(t.deletes for t in feed.tables) > 0
    # Deletes after the last TS <= cut-off in their partition wait for a later TS: the tables
    # they belong to say so, and keep the mode.
    assert feed.pending > 0
    held = {t.table for t in feed.tables if t.reason}
    assert held and all(
        f"changes without a commit TS (deletes after the last TS <= cut-off {cutoff}" in t.reason
        and "raise cutoff-ts" in t.reason
        for t in feed.tables
        if t.table in held
    )
    counts = [int(t.reason.split("held back: ")[1].split()[0]) for t in feed.tables if t.reason]
    assert sum(counts) == feed.pending
    assert {s.full_name: s.reason for s in states if s.reason}.keys() == held
    # A rerun is a no-op and keeps the reasons; they are not carried twice.
    again = compact(spark, config)
    assert again.changefeeds[0].noop
    assert {s.full_name: s.reason for s in read_state(layout.gold_state)} == {
        s.full_name: s.reason for s in states
    }
    # A rebuild empties gold and applies the log again, under a new generation of app ids.
    rebuilt = compact(spark, config, rebuild=True)
    assert rebuilt.changefeeds[0].generation == 1
    assert_gold_equals_expected(layout, workload, cutoff)
    assert {s.generation for s in read_state(layout.gold_state)} == {1}


@pytest.mark.parametrize("spilled", [False, True], ids=["collected", "spilled"])
def test_canal_json_without_commit_ts_is_compacted_but_marked_inconsistent(
    spark, tmp_path, monkeypatch, spilled
):
    if spilled:  # the large-run path: each segment spilled, and gold loaded by Spark
        monkeypatch.setattr(gold_changes, "COLLECT_LIMIT", 0)
    workload = generate_workload(seed=5, transactions=100, ddl=False)
    settings = CodecSettings(enable_tidb_extension=False)
    streams = si.dispatch(workload, "canal-json", partitions=3, replays=0, settings=settings)
    config = si.write_config(
        tmp_path, streams, "canal-json", partitions=3, watermarks=False, cutoff_ts=10**18,
        extension=False,
    )  # fmt: skip
    layout = LakeLayout(config.lake)
    si.land(spark, layout, streams, 0.5)
    first = compact(spark, config)
    assert first.changefeeds[0].mode == "inconsistent" and first.changefeeds[0].target is None
    assert any("cutoff-ts" in note for note in first.changefeeds[0].notes)
    si.land(spark, layout, streams, 1.0)
    second = compact(spark, config)
    assert_gold_equals_expected(layout, workload, workload.resolved_ts[-1])
    states = read_state(layout.gold_state)
    assert {(s.mode, s.watermark) for s in states} == {("inconsistent", None)}
    # Each run derives the reason afresh: one statement of it, however many runs.
    assert {s.reason for s in states} == {
        "no consistent cut: canal-json without the TiDB extension (topics "
        f"{streams.topics}): no commit TS, changes applied in Kafka order per key, DDLs "
        "applied after the changes of the run"
    }
    # The UNIQUE-key handle of shop.accounts comes from its CREATE TABLE (pkNames omits it).
    assert {s.full_name: s.handle_key for s in states}["shop.accounts"] == ["code"]
    assert sum(t.upserts for t in second.changefeeds[0].tables) > 0
    assert compact(spark, config).changefeeds[0].noop  # no new bronze batch


def test_modes_and_targets():
    config = SimpleNamespace(
        topic=lambda t: SimpleNamespace(
            protocol={"o": "open-protocol", "c": "canal-json", "a": "avro"}[t[0]],
            enable_tidb_extension=not t.endswith("-plain"),
        )
    )
    mark = ChangefeedWatermark("f", True, 500)
    feed = ChangefeedConfig("f", ("o1",))
    assert target_of(config, feed, mark, None)[:2] == ("watermark", 500)
    assert target_of(config, feed, mark, 300)[:2] == ("watermark", 300)
    cutoff = ChangefeedConfig("f", ("a1",), watermarks=False, cutoff_ts=200)
    assert target_of(config, cutoff, ChangefeedWatermark("f", False, None), None)[:2] == (
        "cutoff",
        200,
    )
    plain = ChangefeedConfig("f", ("c-plain",), watermarks=False, cutoff_ts=200)
    mode, target, notes = target_of(config, plain, ChangefeedWatermark("f", False, None), None)
    assert (mode, target) == ("inconsistent", None) and "carry no commit TS" in notes[0]


def test_a_truncate_without_commit_ts_says_it_was_applied_after_the_changes(spark, tmp_path):
    log = _Log()
    log.ddl(None, "CREATE TABLE s.x (id int PRIMARY KEY, v int)")
    log.row(None, "x", "insert", _row(1, v=("c_int", 1)))
    log.ddl(None, "TRUNCATE TABLE s.x")
    log.row(None, "x", "insert", _row(2, v=("c_int", 2)))
    log.row(None, "y", "insert", _row(1, v=("c_int", 1)))
    streams = si.Streams(routing=None, events={("t", 0): log.events})
    config = si.write_config(
        tmp_path, streams, "canal-json", partitions=1, watermarks=False, extension=False
    )
    layout = LakeLayout(config.lake)
    si.land(spark, layout, streams, 1.0)
    compact(spark, config)
    states = {s.full_name: s for s in read_state(layout.gold_state)}
    # Upstream holds row 2; gold applied the TRUNCATE after it, and says so.
    assert gold_rows(layout, "s.x") == []
    assert {s.mode for s in states.values()} == {"inconsistent"}
    assert all(s.reason.startswith("no consistent cut: canal-json") for s in states.values())
    assert (
        "DDL at no commit TS (topic t, partition 0, offset 2) (TRUNCATE) applied after the "
        "changes of the run" in states["s.x"].reason
    )
    assert "TRUNCATE" not in states["s.y"].reason


def test_run_reasons_are_not_carried_and_do_not_hide_the_changefeeds_mode():
    def state(mode, reason):
        return TableState("f", "s", "t", "p", mode, None, 0, 0, reason=reason)

    mode_reason = reasons.NO_CONSISTENT_CUT + "watermarks: false and no cutoff-ts"
    held = reasons.HELD_BACK + "3 changes without a commit TS (deletes)"
    ddl = "DDL at commit TS 5 (topic t, partition 0, offset 1): not understood; really"
    carried = reasons.carried_reasons(f"{mode_reason}; {held}; {ddl}")
    assert reasons.join_reasons(*carried) == ddl
    assert reasons.carried_reasons(held) == []
    # An inconsistent changefeed's row says so (so a config change to a consistent mode
    # rebuilds); a row marked by a DDL in a consistent changefeed does not say which mode.
    assert reasons.changefeed_mode(state("inconsistent", mode_reason)) == "inconsistent"
    assert reasons.changefeed_mode(state("inconsistent", f"{mode_reason}; {ddl}")) == (
        "inconsistent"
    )
    assert reasons.changefeed_mode(state("inconsistent", ddl)) is None
    assert reasons.changefeed_mode(state("inconsistent", None)) == "inconsistent"
    assert reasons.changefeed_mode(state("cutoff", held)) == "cutoff"


# --- DDL barriers the generator does not send ---------------------------------------------------


def _column(type_name: str, value, key: bool = False):
    return make_column(BY_NAME[type_name], value, key=key)


class _Log:
    """A hand-written change log on one Kafka partition."""

    def __init__(self, topic: str = "t"):
        self.topic = topic
        self.events = []

    def _next(self) -> dict:
        return {"topic": self.topic, "partition": 0, "offset": len(self.events)}

    def landed(self, spark, root: Path) -> tuple[PipelineConfig, LakeLayout]:
        """The log landed as one Open Protocol partition under ``root``, its watermarks computed."""
        streams = si.Streams(routing=None, events={(self.topic, 0): self.events})
        config = si.write_config(root, streams, "open-protocol", partitions=1)
        layout = LakeLayout(config.lake)
        si.land(spark, layout, streams, 1.0)
        watermark(spark, config)
        return config, layout

    def ddl(self, ts: int, query: str, table: str = "x", schema: str = "s"):
        self.events.append(DdlEvent(ts, schema, table, query, None, **self._next()))

    def row(self, ts, table, op, new=None, old=None, *, key_only=False, schema: str = "s"):
        self.events.append(
            RowEvent(ts, schema, table, op, new, old, **self._next(), handle_key_only=key_only)
        )

    def resolved(self, ts: int):
        self.events.append(ResolvedEvent(ts, **self._next()))


def _row(id_: int, **values) -> dict:
    image = {"id": _column("c_int", id_, key=True)}
    for name, (type_name, value) in values.items():
        image[name] = _column(type_name, value)
    return image


def test_rename_modify_partition_drop_and_unreproducible_ddls(spark, tmp_path):
    log = _Log()
    log.ddl(100, "CREATE TABLE s.a (id int PRIMARY KEY, v int, name varchar(10))", "a")
    log.ddl(
        101,
        "CREATE TABLE s.p (id int PRIMARY KEY, v varchar(5)) PARTITION BY RANGE (id) ("
        "PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20), "
        "PARTITION p2 VALUES LESS THAN MAXVALUE)",
        "p",
    )
    log.ddl(102, "CREATE TABLE s.nokey (v int)", "nokey")
    for id_, v, name in ((1, 5, "x"), (2, 6, "y")):
        log.row(110, "a", "insert", _row(id_, v=("c_int", v), name=("c_varchar", name)))
    for id_, v in ((1, "a"), (15, "b"), (25, "c")):
        log.row(110, "p", "insert", _row(id_, v=("c_varchar", v)))
    log.row(110, "nokey", "insert", {"v": _column("c_int", 1)})
    log.ddl(120, "ALTER TABLE s.a MODIFY COLUMN v bigint", "a")
    old_one = _row(1, v=("c_bigint", 5), name=("c_varchar", "x"))
    log.row(130, "a", "update", _row(1, v=("c_bigint", 2**40), name=("c_varchar", "x")), old_one)
    # An UPDATE that changes the key, as TiCDC sends it with output-raw-change-event=true.
    log.row(
        130,
        "a",
        "update",
        _row(3, v=("c_bigint", 6), name=("c_varchar", "y")),
        _row(2, v=("c_bigint", 6), name=("c_varchar", "y")),
    )
    log.ddl(140, "RENAME TABLE s.a TO s.b", "b")
    log.row(150, "b", "insert", _row(4, v=("c_bigint", 7), name=("c_varchar", "z")))
    log.ddl(160, "ALTER TABLE s.p TRUNCATE PARTITION p1", "p")
    log.ddl(170, "ALTER TABLE s.p DROP PARTITION p0", "p")
    log.row(180, "p", "insert", _row(5, v=("c_varchar", "d")))
    log.resolved(185)
    log.ddl(190, "ALTER TABLE s.p EXCHANGE PARTITION p2 WITH TABLE s.other", "p")
    log.ddl(200, "DROP TABLE s.b", "b")
    log.row(205, "q", "insert", _row(1, v=("c_int", 1)))
    log.ddl(210, "ALTER TABLE s.q FROB", "q")
    log.row(220, "k", "insert", {"id": _column("c_int", 9, key=True)}, key_only=True)
    log.resolved(300)

    config, layout = log.landed(spark, tmp_path)

    with pytest.raises(CompactError) as error:
        compact(spark, config, until_ts=185)
    assert set(error.value.failures) == {"s.nokey"}
    assert "handle key" in error.value.failures["s.nokey"]
    tables = error.value.result.tables
    assert gold_rows(layout, "s.a") == [] and tables["s.a"].dropped
    assert sorted(gold_rows(layout, "s.b"), key=lambda r: r["id"]) == [
        {"id": 1, "v": 2**40, "name": "x", "_commit_ts": 130},
        {"id": 3, "v": 6, "name": "y", "_commit_ts": 130},
        {"id": 4, "v": 7, "name": "z", "_commit_ts": 150},
    ]
    schema = pa.schema(DeltaTable(str(layout.gold("s", "b"))).schema().to_arrow())
    assert schema.field("v").type == pa.int64()  # MODIFY COLUMN int → bigint rewrote it
    # TRUNCATE PARTITION p1 removed 15, DROP PARTITION p0 removed 1.
    assert sorted(r["id"] for r in gold_rows(layout, "s.p")) == [5, 25]
    assert tables["s.nokey"].mode == "failed"

    with pytest.raises(CompactError):
        compact(spark, config)
    states = {s.full_name: s for s in read_state(layout.gold_state)}
    assert states["s.b"].dropped and gold_rows(layout, "s.b") == []
    assert "EXCHANGE PARTITION" in states["s.p"].reason and states["s.p"].mode == "inconsistent"
    assert "not understood" in states["s.q"].reason and gold_rows(layout, "s.q") != []
    assert "handle-key-only" in states["s.k"].reason
    assert states["s.a"].watermark == 300 and states["s.a"].mode == "watermark"
    # A failed table keeps what it reflected (nothing yet), so every run retries it.
    assert states["s.nokey"].applied_ts == -1
    assert states["s.nokey"].reason.startswith("compaction failed: ")


def test_spark_submit_entry_point_reports_failures(spark, tmp_path, monkeypatch, capsys):
    log = _Log()
    log.ddl(1, "CREATE TABLE s.nokey (v int)", "nokey")
    log.row(2, "nokey", "insert", {"v": _column("c_int", 1)})
    # As Open Protocol sends it: a type code, no DECIMAL precision.
    image = _row(1, v=("c_decimal", "1.500000"))
    image["v"] = dataclasses.replace(image["v"], mysql_type=None)
    log.row(2, "ok", "insert", image)
    log.resolved(3)
    config, _ = log.landed(spark, tmp_path)
    spec = importlib.util.spec_from_file_location("job", REPO / "spark_jobs" / "compact.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    monkeypatch.setattr(job, "build_session", lambda name: spark)
    assert job.main(["--config", str(tmp_path / "pipeline.yaml")]) == 1
    out = capsys.readouterr()
    printed = json.loads(out.out)
    assert "s.nokey" in printed["failures"] and "s.nokey" in out.err
    (table,) = [t for t in printed["changefeeds"][0]["tables"] if t["table"] == "s.ok"]
    assert table["rows"] == 1
    # Without a DDL the DECIMAL's precision is unknown (Open Protocol): gold keeps its text.
    assert gold_rows(LakeLayout(config.lake), "s.ok")[0]["v"] == "1.500000"
    assert Decimal("1.5") == Decimal(gold_rows(LakeLayout(config.lake), "s.ok")[0]["v"])


def test_a_gold_table_belongs_to_one_changefeed(spark, tmp_path):
    """Gold paths do not name the changefeed: of two changefeeds carrying s.x the first keeps
    it, and a renamed changefeed finds its tables taken until it is renamed back or handed them
    as the failure says; the other tables compact normally."""
    logs = {"t": _Log("t"), "u": _Log("u")}
    for topic, own, x_id in (("t", "a", 1), ("u", "b", 2)):
        logs[topic].row(110, "x", "insert", _row(x_id, v=("c_int", 7)))
        logs[topic].row(110, own, "insert", _row(1, v=("c_int", 8)))
        logs[topic].resolved(200)
    streams = si.Streams(routing=None, events={(t, 0): log.events for t, log in logs.items()})
    config = si.write_config(
        tmp_path, streams, "open-protocol", partitions=1, changefeeds={"one": ["t"], "two": ["u"]}
    )
    layout = LakeLayout(config.lake)
    si.land(spark, layout, streams, 1.0)
    watermark(spark, config)

    def owners() -> set[tuple[str, str]]:
        return {(s.changefeed, s.full_name) for s in read_state(layout.gold_state)}

    with pytest.raises(CompactError) as error:
        compact(spark, config)
    (message,) = error.value.failures.values()
    assert set(error.value.failures) == {"s.x"}
    assert "'one'" in message and "'two'" in message and "one changefeed only" in message
    assert gold_rows(layout, "s.x") == [{"id": 1, "v": 7, "_commit_ts": 110}]
    assert [len(gold_rows(layout, name)) for name in ("s.a", "s.b")] == [1, 1]
    assert owners() == {("one", "s.x"), ("one", "s.a"), ("two", "s.b")}

    renamed = si.write_config(
        tmp_path, streams, "open-protocol", partitions=1, changefeeds={"uno": ["t"], "two": ["u"]}
    )
    versions = {name: DeltaTable(str(layout.gold("s", name))).version() for name in "xab"}
    with pytest.raises(CompactError) as error:
        compact(spark, renamed, changefeeds=["uno"])
    assert set(error.value.failures) == {"s.x", "s.a"}
    assert all(
        "'one' was renamed 'uno', rename it back" in message and "--rebuild" in message
        for message in error.value.failures.values()
    )
    assert owners() == {("one", "s.x"), ("one", "s.a"), ("two", "s.b")}
    assert {n: DeltaTable(str(layout.gold("s", n))).version() for n in "xab"} == versions

    # What the failure says to hand the tables to 'uno'.
    DeltaTable(str(layout.gold_state)).delete("changefeed = 'one'")
    for name in "xa":
        shutil.rmtree(layout.gold("s", name))
    compact(spark, renamed, changefeeds=["uno"], rebuild=True)
    assert owners() == {("uno", "s.x"), ("uno", "s.a"), ("two", "s.b")}
    assert gold_rows(layout, "s.x") == [{"id": 1, "v": 7, "_commit_ts": 110}]


# --- Avro tombstones (no commit TS) followed by a replay -----------------------------------------


def _tombstone_then_replay() -> _Log:
    """Row 1 is deleted (at a TS in (110, 130]) right before TiCDC replays from an older
    checkpoint; row 2 is deleted and inserted again, and that stretch is replayed too."""
    log = _Log()
    log.ddl(90, "CREATE TABLE s.x (id int PRIMARY KEY, v int)")
    log.row(100, "x", "insert", _row(1, v=("c_int", 1)))
    log.row(100, "x", "insert", _row(2, v=("c_int", 2)))
    log.row(110, "x", "update", _row(1, v=("c_int", 5)))
    log.row(None, "x", "delete", old=_row(1))
    log.row(100, "x", "insert", _row(1, v=("c_int", 1)))  # the replay: TSs below 110
    log.row(110, "x", "update", _row(1, v=("c_int", 5)))
    log.row(130, "x", "insert", _row(3, v=("c_int", 3)))
    log.row(None, "x", "delete", old=_row(2))  # deleted in (130, 160]
    log.row(160, "x", "insert", _row(2, v=("c_int", 9)))
    log.row(None, "x", "delete", old=_row(2))  # a replay of the delete and the insert
    log.row(160, "x", "insert", _row(2, v=("c_int", 9)))
    log.row(170, "x", "insert", _row(4, v=("c_int", 4)))
    return log


def _avro_cutoff_lake(tmp_path, log: _Log, cutoff: int):
    streams = si.Streams(routing=None, events={("t", 0): log.events})
    config = si.write_config(
        tmp_path, streams, "avro", partitions=1, watermarks=False, cutoff_ts=cutoff
    )
    return streams, config, LakeLayout(config.lake)


def _ids(layout: LakeLayout) -> dict[int, int]:
    return {row["id"]: row["v"] for row in gold_rows(layout, "s.x")}


def test_a_tombstone_followed_by_a_replay_is_placed_after_the_rows_before_it(spark, tmp_path):
    streams, config, layout = _avro_cutoff_lake(tmp_path, _tombstone_then_replay(), 200)
    si.land(spark, layout, streams, 1.0)
    result = compact(spark, config)
    assert _ids(layout) == {2: 9, 3: 3, 4: 4}
    (feed,) = result.changefeeds
    assert feed.pending == 0 and not any(t.reason for t in feed.tables)


def test_a_tombstone_before_a_replay_that_may_follow_the_cutoff_is_held_back(spark, tmp_path):
    # The delete of row 1 is at a TS in (110, 130]: a cut-off of 120 cannot say if it is in.
    streams, config, layout = _avro_cutoff_lake(tmp_path, _tombstone_then_replay(), 120)
    si.land(spark, layout, streams, 1.0)
    (feed,) = compact(spark, config).changefeeds
    assert _ids(layout) == {1: 5, 2: 2}
    assert feed.pending == 3  # every delete is after the cut-off's last TS, 110
    (table,) = feed.tables
    assert (table.mode, table.watermark) == ("cutoff", 120)
    assert "held back: 3 changes without a commit TS" in table.reason


def test_a_replay_after_a_tombstone_in_a_later_batch_is_told_from_a_bound(spark, tmp_path):
    """The TSs before the tombstone are in a settled batch, which a later run does not read."""
    streams, config, layout = _avro_cutoff_lake(tmp_path, _tombstone_then_replay(), 110)
    si.land(spark, layout, streams, 4 / 13)  # up to the update at 110
    compact(spark, config)
    assert _ids(layout) == {1: 5, 2: 2}
    si.land(spark, layout, streams, 1.0)
    raised = si.write_config(
        tmp_path, streams, "avro", partitions=1, watermarks=False, cutoff_ts=200
    )
    assert raised.lake == config.lake
    compact(spark, raised)
    assert _ids(layout) == {2: 9, 3: 3, 4: 4}
