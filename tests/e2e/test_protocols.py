"""End to end, per protocol: generated exports → land → decode → watermark → compact → gold
equals the generator's tables at the watermark (or cut-off), exactly, row by row and typed.

Each protocol's lake (tests/e2e/lakes.py) lands in two rounds: first a different share of every
partition, so the watermark sits mid-stream and is compacted there, then a full re-export in
another export format. The workload has replays, primary-key changes, DDLs, an idle partition
and transactions spanning partitions; the first test asserts each is really there.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from itertools import pairwise

import pytest
from deltalake import DeltaTable
from ticdc_lake.delta import read_delta
from ticdc_lake.gold.state import read_state
from ticdc_lake.lake.names import qualified_name
from ticdc_lake.quality.run import STAGES, validate_stage
from ticdc_lake.sample.workload.losses import kept
from ticdc_lake.sample.workload.output import codec_settings
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import DdlEvent, ResolvedEvent, RowEvent

from tests.e2e import lakes

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module", params=lakes.CASES, ids=lambda case: case.name)
def lake(request, spark, tmp_path_factory) -> lakes.Lake:
    case = request.param
    return lakes.build_lake(spark, tmp_path_factory.mktemp(case.name), case)


def needs_watermarks(lake: lakes.Lake) -> None:
    if not lake.case.watermarks:
        pytest.skip(f"{lake.case.name} sends no watermarks: gold waits for the cut-off")


def final_target(lake: lakes.Lake) -> int:
    """The TS gold reflects after the second round."""
    if lake.case.watermarks:
        return lake.watermark_of(lake.second)
    # Without commit TSs everything received is applied: the end of the workload.
    return lake.cutoff_ts if lake.case.commit_ts else lake.workload.resolved_ts[-1]


def generated_events(lake: lakes.Lake, kind: type) -> list:
    """Every event of ``kind`` the generator sent, replays included, over every partition, as
    far as the protocol carries it (Canal-JSON without the extension sends no watermarks)."""
    settings = codec_settings(lake.case.options())
    sent = kept(lake.case.protocol, lake.output.routing.all_events(), settings)
    return [e for e in sent if isinstance(e, kind)]


def key_changes(workload, ts: int) -> int:
    """Primary-key changes at or below ``ts``: a delete and an insert of the same row values
    under a new key, in one transaction (as TiCDC splits an UPDATE of the key)."""
    found = 0
    for transaction in workload.transactions:
        for delete, insert in pairwise(transaction.events):
            same_table = (delete.schema, delete.table) == (insert.schema, insert.table)
            pair = (delete.op, insert.op) == ("delete", "insert")
            if not (same_table and pair) or transaction.commit_ts > ts:
                continue
            keys = workload.expected.handle_keys[qualified_name(delete.schema, delete.table)]
            old, new = delete.old_columns, insert.columns
            moved = any(old[k].value != new[k].value for k in keys)
            found += moved and all(old[c].value == new[c].value for c in new if c not in keys)
    return found


def gold_times(lake: lakes.Lake) -> set[str]:
    """The TIME values gold must hold at the end (issue 53: negative, past 24 h, ±838:59:59)."""
    types = lakes.si.column_types(lake.workload)
    expected = lakes.si.expected_tables(lake.workload, final_target(lake), lake.case.time_zone)
    return {
        row[column]
        for name, (columns, rows) in expected.items()
        for column in columns
        if mysql.parse_column_type(types[name][column]).base == "time"
        for row in rows
        if row[column] is not None
    }


def test_the_workload_has_every_case_the_issue_names(lake):
    workload, routing, manifest = lake.workload, lake.output.routing, lake.output.manifest
    assert key_changes(workload, final_target(lake)) > 0
    times = gold_times(lake)
    assert any(time.startswith("-") for time in times), times
    assert any(int(time.lstrip("-").split(":")[0]) >= 24 for time in times), times
    assert times & {"-838:59:59.00", "838:59:59.00"}, times
    assert manifest["counts"]["replayed_row_events"] > 0
    assert all(replay["offsets"] for replay in manifest["replays"])
    kinds = {e.ddl_type for e in workload.ddl_events if e.commit_ts <= final_target(lake)}
    assert {mysql.ACTION_ADD_COLUMN, mysql.ACTION_DROP_COLUMN, mysql.ACTION_TRUNCATE_TABLE} <= kinds
    # No row event reaches the idle partition (with watermarks, resolved events still do).
    assert routing.idle_partitions == (lakes.PARTITIONS - 1,)
    changes = lakes.silver_changes(lake.layout)
    assert {row["partition"] for row in changes} == set(range(lakes.PARTITIONS - 1))
    if lake.case.watermarks:
        resolved = lakes.table_rows(lake.layout.resolved, partition=lakes.PARTITIONS - 1)
        assert {row["topic"] for row in resolved} == set(routing.topics)
        # Round one left the partitions out of step: the watermark is the laggard's.
        first_mark = lake.watermark_of(lake.first)
        assert first_mark in workload.resolved_ts
        reached = lakes.resolved_in(lake.config, lake.first_records)
        assert first_mark == min(reached.values()) < max(reached.values())
        # The second compaction crosses DDL barriers.
        assert any(first_mark < e.commit_ts <= final_target(lake) for e in workload.ddl_events)


def test_land_adds_each_offset_once_across_overlapping_rounds(lake):
    first, second = lake.first, lake.second
    assert (first.land.records_read, first.land.records_added) == (first.records, first.records)
    assert second.land.records_read == second.records
    assert second.land.records_added == second.records - first.records
    assert (second.land.duplicates, second.land.conflicts) == (first.records, 0)
    for result in (first.land, second.land):
        assert (result.errors, result.offset_gaps) == (0, 0)
    assert second.land.files_skipped == len(first.files)
    assert len(lakes.table_rows(lake.layout.bronze)) == second.records


def test_counts_reconcile_from_bronze_to_silver(lake):
    log = lakes.table_rows(lake.layout.decode_log)
    assert sorted(row["bronze_batch"] for row in log) == [1, 2]
    for row in log:
        assert row["records"] == row["decoded"] + row["quarantined"], row
        assert row["quarantined"] == 0
    assert sum(row["records"] for row in log) == lake.second.records
    assert not lakes.table_rows(lake.layout.quarantine)
    # Silver is a log: every row event the generator sent is there once per copy sent.
    changes = lakes.silver_changes(lake.layout)
    assert len(changes) == len(generated_events(lake, RowEvent))
    assert sum(row["inserts"] + row["updates"] + row["deletes"] for row in log) == len(changes)
    replays = len(changes) - len({row["event_id"] for row in changes})
    assert replays >= lake.output.manifest["counts"]["replayed_row_events"]
    for kind, column in ((ResolvedEvent, "resolved"), (DdlEvent, "ddl")):
        assert sum(row[column] for row in log) == len(generated_events(lake, kind)), column


def test_watermarks_follow_the_slowest_partition_and_ignore_regressions(lake):
    needs_watermarks(lake)
    reached = lakes.resolved_in(lake.config, lake.all_records)
    assert lake.watermark_of(lake.second) == min(reached.values()) == lake.workload.resolved_ts[-1]
    # A replayed resolved event below what its partition already reached is ignored.
    regressions = 0
    for key in lake.output.routing.streams:
        highest = 0
        for event in lake.output.routing.events(*key):
            if isinstance(event, ResolvedEvent):
                regressions += event.ts < highest
                highest = max(highest, event.ts)
    assert regressions > 0
    assert lake.first.watermark.regressions + lake.second.watermark.regressions == regressions


def test_gold_at_the_first_watermark_is_the_expected_state(lake):
    needs_watermarks(lake)
    versions = {t.table: t.version for t in lake.first.compact.changefeeds[0].tables}
    lakes.assert_lake_gold_is_expected(lake, lake.watermark_of(lake.first), versions)


def test_gold_after_everything_landed_is_the_expected_state(lake):
    lakes.assert_lake_gold_is_expected(lake, final_target(lake))


def test_transactions_spanning_partitions_are_wholly_in_gold_or_wholly_out(lake):
    needs_watermarks(lake)
    mark = lake.watermark_of(lake.first)
    first_batch = lake.first.land.batch_id
    where, landed = defaultdict(set), defaultdict(set)
    ids = defaultdict(set)
    for row in lakes.silver_changes(lake.layout):
        if row["commit_ts"] is None:  # Avro deletes: placed by Kafka order, not a transaction
            continue
        where[row["commit_ts"]].add((row["topic"], row["partition"]))
        ids[row["commit_ts"]].add(row["event_id"])
        if row["bronze_batch"] == first_batch:
            landed[row["commit_ts"]].add(row["event_id"])
    versions = {t.table: t.version for t in lake.first.compact.changefeeds[0].tables}
    stamps = Counter(
        row["_commit_ts"]
        for name, version in versions.items()
        for row in lakes.gold_rows(lake.layout, name, version)
    )
    assert max(stamps) <= mark
    surviving = Counter(
        ts for keys in lakes.last_writers(lake.workload, mark).values() for ts in keys.values()
    )
    spanning = [ts for ts, partitions in where.items() if len(partitions) > 1]
    inside = [ts for ts in spanning if ts <= mark]
    partly = [ts for ts in spanning if ts > mark and 0 < len(landed[ts]) < len(ids[ts])]
    assert any(surviving[ts] > 0 for ts in inside) and partly
    for ts in inside:
        assert landed[ts] == ids[ts] and stamps[ts] == surviving[ts], ts
    for ts in partly:
        assert stamps[ts] == 0, ts


def test_state_results_and_plain_readers_agree(spark, lake):
    (feed,) = lake.second.compact.changefeeds
    mode = {True: "watermark", False: "cutoff" if lake.case.commit_ts else "inconsistent"}
    target = final_target(lake) if lake.case.commit_ts else None
    assert (feed.mode, feed.target) == (mode[lake.case.watermarks], target)
    if lake.case.protocol == "avro" and not lake.case.watermarks:
        # Deletes that may lie on either side of the cut-off wait, and the result says so.
        assert feed.pending >= len(lakes.held_deletes(lake, lake.cutoff_ts)) > 0
    states = {s.full_name: s for s in read_state(lake.layout.gold_state)}
    expected = lakes.si.expected_tables(lake.workload, final_target(lake), lake.case.time_zone)
    assert set(states) == set(expected) == {t.table for t in feed.tables}
    for table in feed.tables:
        state = states[table.table]
        assert (state.mode, state.watermark) == (feed.mode, target)
        plain = DeltaTable(state.path).to_pyarrow_table()
        through_spark = read_delta(spark, state.path).toArrow().cast(plain.schema)
        assert table.rows == state.rows == plain.num_rows == through_spark.num_rows
        assert table.version == state.gold_version == DeltaTable(state.path).version()
        assert_state_says_why_gold_is_off(lake, state)
        keys = lake.workload.expected.handle_keys[table.table]
        assert sorted(plain.to_pylist(), key=lambda r: lakes.key_text(r, keys)) == sorted(
            through_spark.to_pylist(), key=lambda r: lakes.key_text(r, keys)
        )

    if feed.mode == "cutoff":
        held = [re.search(r"held back: (\d+) changes", s.reason or "") for s in states.values()]
        assert sum(int(found[1]) for found in held if found) == feed.pending


def assert_state_says_why_gold_is_off(lake, state) -> None:
    if state.mode == "watermark":
        assert not state.reason, state.reason
    elif state.mode == "inconsistent":
        assert state.reason.startswith(f"no consistent cut: {lake.case.protocol} without"), (
            state.reason
        )


def test_compaction_recognises_replays_and_carries_out_ddl(lake):
    runs = [r.compact.changefeeds[0] for r in (lake.first, lake.second) if r.compact]
    totals = Counter()
    for feed in runs:
        for table in feed.tables:
            totals.update(
                changes=table.changes,
                duplicates=table.duplicates,
                ddl=table.ddl,
                deletes=table.deletes,
            )
    assert totals["duplicates"] > 0 and totals["deletes"] > 0
    if lake.case.watermarks:
        # Each change the generator made is applied once, however often it was sent.
        assert totals["changes"] == lake.workload.counts["row_events"]
    assert totals["ddl"] > 0 or (lake.case.protocol == "avro" and not lake.case.watermarks)


def test_every_stage_is_checked_in_every_protocol_and_mode(spark, lake):
    """The data-quality checks of each stage run on every lake: watermarks or a cut-off, with
    the TiDB extension or without (an Avro changefeed with a cut-off and no watermarks crashed
    the gold checks, so ``ticdc-lake run`` exited with a traceback). Last in this module: it
    appends to the lake's quality results."""
    for stage in STAGES:
        validation = validate_stage(spark, lake.config, stage)
        assert validation.batch is not None and validation.outcomes, stage
        assert not validation.failures("fail"), (stage, validation.failures())
