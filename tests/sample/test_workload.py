"""The synthetic workload: determinism, TiDB semantics, TiCDC dispatch, replays, manifest."""

from __future__ import annotations

import json
import re
from collections import defaultdict

import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ticdc_lake.bronze.exports import read_exports
from ticdc_lake.config import load_config
from ticdc_lake.lake.names import split_name
from ticdc_lake.protocols import CodecSettings
from ticdc_lake.sample.cases import COLUMN_TYPES
from ticdc_lake.sample.workload import ExpectedLog, canonical_tables, generate_workload
from ticdc_lake.sample.workload.dispatch import route
from ticdc_lake.sample.workload.losses import canonical
from ticdc_lake.sample.workload.output import GenerateOptions, encode_routing, write_generated
from ticdc_lake.silver import mysql
from ticdc_lake.silver.codecs import topic_decoder
from ticdc_lake.silver.events import (
    DELETE,
    INSERT,
    UPDATE,
    DdlEvent,
    ResolvedEvent,
    RowEvent,
    json_value,
)


@pytest.fixture(scope="module")
def workload():
    return generate_workload(seed=11, transactions=300)


def row_key(event: RowEvent) -> tuple:
    image = event.old_columns if event.op == DELETE else event.columns
    return tuple(image[name].value for name in event.handle_key)


# --- generation --------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_workload(workload):
    again = generate_workload(seed=11, transactions=300)
    assert [canonical(e) for e in again.events] == [canonical(e) for e in workload.events]
    assert again.expected.points == workload.expected.points
    other = generate_workload(seed=12, transactions=300)
    assert [canonical(e) for e in other.events] != [canonical(e) for e in workload.events]


def test_tables_cover_every_column_type_and_every_kind_of_handle():
    tables = {table.name: table for table in canonical_tables()}
    covered = {c.column_type.name for table in tables.values() for c in table.columns}
    assert covered == {column_type.name for column_type in COLUMN_TYPES}
    assert tables["orders"].partition_ids == (131, 132, 133, 134)
    code = tables["accounts"].by_name["code"]
    assert code.flags & mysql.FLAG_HANDLE_KEY and code.flags & mysql.FLAG_UNIQUE_KEY
    assert not code.flags & (mysql.FLAG_PRIMARY_KEY | mysql.FLAG_NULLABLE)
    for name in ("order_id", "line_no"):
        flags = tables["order_items"].by_name[name].flags
        assert flags & mysql.FLAG_MULTIPLE_KEY and flags & mysql.FLAG_PRIMARY_KEY
    assert tables["numbers"].by_name["c_int"].flags == mysql.FLAG_BINARY | mysql.FLAG_NULLABLE


def test_values_include_nulls_unicode_binary_extremes_and_zero_dates(workload):
    values = [
        column.value
        for event in workload.row_events
        for image in (event.columns, event.old_columns)
        if image
        for column in image.values()
    ]
    assert None in values
    assert any(isinstance(v, bytes) for v in values)
    assert any(isinstance(v, str) and not v.isascii() for v in values)
    assert any(isinstance(v, str) and v.startswith("0000-00-00") for v in values)
    assert mysql.UINT64_MAX in values and -(2**63) in values


def test_commit_ts_are_tsos_increasing_per_transaction(workload):
    last = 0
    for transaction in workload.transactions:
        assert transaction.commit_ts > last
        last = transaction.commit_ts
        assert {event.commit_ts for event in transaction.events} == {transaction.commit_ts}
        assert (transaction.commit_ts >> 18) // 1000 > 1_700_000_000  # physical ms since 1970
    timed = [e.ts if isinstance(e, ResolvedEvent) else e.commit_ts for e in workload.events]
    assert timed == sorted(timed)
    assert workload.counts["multi_table_transactions"] > 0
    assert max(len(t.events) for t in workload.transactions) >= 10


def test_each_table_of_a_transaction_has_deletes_then_updates_then_inserts(workload):
    rank = {DELETE: 0, UPDATE: 1, INSERT: 2}
    for transaction in workload.transactions:
        by_table = defaultdict(list)
        for event in transaction.events:
            by_table[event.table].append(rank[event.op])
        for ranks in by_table.values():
            assert ranks == sorted(ranks)


def test_key_changes_are_split_into_delete_and_insert_with_one_commit_ts(workload):
    splits = 0
    for transaction in workload.transactions:
        keys = [(e.table, e.op, row_key(e)) for e in transaction.events]
        assert len({(table, key) for table, _, key in keys}) == len(keys), "row touched twice"
        for position, event in enumerate(transaction.events[:-1]):
            after = transaction.events[position + 1]
            if (event.op, after.op, event.table) == (DELETE, INSERT, after.table):
                old, new = event.old_columns, after.columns
                others = [n for n in old if n not in event.handle_key]
                if all(old[n].value == new[n].value for n in others):
                    splits += 1
    assert workload.counts["key_changes"] > 0
    assert splits >= workload.counts["key_changes"] // 2


def test_updates_carry_both_images_and_change_something(workload):
    for event in workload.row_events:
        if event.op == UPDATE:
            assert row_key(event) == tuple(event.old_columns[n].value for n in event.handle_key)
            assert event.columns != event.old_columns
        elif event.op == INSERT:
            assert event.old_columns is None
        else:
            assert event.columns is None and event.old_columns


def test_ddl_changes_the_columns_of_later_rows(workload):
    columns: dict[str, list[str]] = {}
    kinds = set()
    for event in workload.events:
        if isinstance(event, DdlEvent):
            kinds.add(event.ddl_type)
            name = f"{event.schema}.{event.table}"
            if event.ddl_type == mysql.ACTION_CREATE_TABLE:
                columns[name] = re.findall(r"`([^`]+)` [a-z]", event.query)
            elif event.ddl_type == mysql.ACTION_ADD_COLUMN:
                columns[name].append(re.search(r"ADD COLUMN `([^`]+)`", event.query)[1])
            elif event.ddl_type == mysql.ACTION_DROP_COLUMN:
                columns[name].remove(re.search(r"DROP COLUMN `([^`]+)`", event.query)[1])
        elif isinstance(event, RowEvent):
            for image in (event.columns, event.old_columns):
                if image:
                    assert list(image) == columns[f"{event.schema}.{event.table}"]
    assert {
        mysql.ACTION_CREATE_TABLE,
        mysql.ACTION_ADD_COLUMN,
        mysql.ACTION_DROP_COLUMN,
        mysql.ACTION_TRUNCATE_TABLE,
    } <= kinds


def test_partitioned_rows_carry_their_partition_and_truncate_renews_the_ids(workload):
    truncate_ts = next(
        e.commit_ts
        for e in workload.ddl_events
        if e.ddl_type == mysql.ACTION_TRUNCATE_TABLE and e.table == "orders"
    )
    orders = [e for e in workload.row_events if e.table == "orders"]
    before = {e.partition_id for e in orders if e.commit_ts < truncate_ts}
    after = {e.partition_id for e in orders if e.commit_ts > truncate_ts}
    assert before <= {131, 132, 133, 134} and len(before) > 1
    assert after and not after & before
    assert {e.partition_id for e in workload.row_events if e.table != "orders"} == {None}


# --- expected snapshots ------------------------------------------------------------------------


def straightforward_replay(events):
    """Apply the events one by one; a snapshot of every table at every resolved event."""
    tables: dict[str, tuple[list[str], dict]] = {}
    for event in events:
        if isinstance(event, DdlEvent):
            name = f"{event.schema}.{event.table}"
            if event.ddl_type == mysql.ACTION_CREATE_TABLE:
                tables[name] = (re.findall(r"`([^`]+)` [a-z]", event.query), {})
            elif event.ddl_type == mysql.ACTION_ADD_COLUMN:
                column = re.search(r"ADD COLUMN `([^`]+)`", event.query)[1]
                tables[name][0].append(column)
                for row in tables[name][1].values():
                    row[column] = None
            elif event.ddl_type == mysql.ACTION_DROP_COLUMN:
                column = re.search(r"DROP COLUMN `([^`]+)`", event.query)[1]
                tables[name][0].remove(column)
                for row in tables[name][1].values():
                    del row[column]
            elif event.ddl_type == mysql.ACTION_TRUNCATE_TABLE:
                tables[name][1].clear()
        elif isinstance(event, RowEvent):
            rows = tables[f"{event.schema}.{event.table}"][1]
            if event.op == DELETE:
                del rows[row_key(event)]
            else:
                rows[row_key(event)] = {n: json_value(c.value) for n, c in event.columns.items()}
        else:
            yield (
                event.ts,
                {
                    name: comparable(columns, rows.values())
                    for name, (columns, rows) in tables.items()
                },
            )


def comparable(columns, rows):
    return list(columns), sorted(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) for row in rows)


def expected_snapshots(log: ExpectedLog):
    for ts, tables in log.snapshots():
        yield ts, {name: comparable(t.columns, t.rows) for name, t in tables.items()}


def test_expected_snapshots_equal_a_straightforward_replay(workload):
    replayed = list(straightforward_replay(workload.events))
    assert len(replayed) == workload.counts["resolved_points"] > 50
    assert list(expected_snapshots(workload.expected)) == replayed
    final_ts, final = replayed[-1]
    snapshots = list(workload.expected.snapshots())
    assert workload.expected.tables_at(final_ts + 10) == snapshots[-1][1]
    assert workload.expected.tables_at(snapshots[1][0]) == snapshots[1][1]
    assert workload.expected.tables_at(snapshots[0][0] - 1) == {}
    assert sum(len(rows) for _, rows in final.values()) == sum(
        workload.expected.points[-1]["row_counts"].values()
    )


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32), transactions=st.integers(0, 80))
def test_expected_snapshots_equal_a_replay_for_any_seed(seed, transactions):
    generated = generate_workload(seed, transactions, resolved_every=(1, 3))
    assert list(expected_snapshots(generated.expected)) == list(
        straightforward_replay(generated.events)
    )


def test_expected_log_round_trips_through_jsonl(workload, tmp_path):
    path = tmp_path / "expected.jsonl"
    workload.expected.write_jsonl(path)
    again = ExpectedLog.read_jsonl(path)
    assert list(expected_snapshots(again)) == list(expected_snapshots(workload.expected))


# --- dispatch ------------------------------------------------------------------------------------


def rows_by_partition(routing):
    return {
        key: [e for e in routing.events(*key) if isinstance(e, RowEvent)] for key in routing.streams
    }


def test_index_value_sends_every_change_of_a_row_to_one_partition(workload):
    routing = route(workload, "open-protocol", partitions=4, replays=0)
    partitions_of_row = defaultdict(set)
    for (_, partition), rows in rows_by_partition(routing).items():
        for event in rows:
            partitions_of_row[(event.table, row_key(event))].add(partition)
    assert all(len(found) == 1 for found in partitions_of_row.values())
    spans = [
        {partitions_of_row[(e.table, row_key(e))].copy().pop() for e in t.events}
        for t in workload.transactions
    ]
    assert any(len(found) > 1 for found in spans), "some transaction spans partitions"


def test_the_idle_partition_gets_only_resolved_and_ddl_events(workload):
    routing = route(workload, "open-protocol", partitions=4, idle_partitions=1, replays=0)
    assert routing.idle_partitions == (3,)
    rows = rows_by_partition(routing)
    assert rows[("ticdc-open-protocol", 3)] == []
    assert all(rows[("ticdc-open-protocol", p)] for p in range(3))
    idle = routing.events("ticdc-open-protocol", 3)
    assert [e.ts for e in idle if isinstance(e, ResolvedEvent)] == workload.resolved_ts


def test_the_table_dispatcher_keeps_each_table_in_one_partition(workload):
    routing = route(workload, "craft", dispatcher="table", partitions=3, idle_partitions=0)
    partitions_of_table = defaultdict(set)
    for (_, partition), rows in rows_by_partition(routing).items():
        for event in rows:
            partitions_of_table[event.table].add(partition)
    assert all(len(found) == 1 for found in partitions_of_table.values())


@pytest.mark.parametrize("protocol", ["open-protocol", "craft", "canal-json"])
def test_resolved_events_go_everywhere_and_ddl_too_except_canal_json(workload, protocol):
    routing = route(workload, protocol, partitions=3, idle_partitions=0, replays=0)
    ddl_queries = [e.query for e in workload.ddl_events]
    for topic, partition in routing.streams:
        events = routing.events(topic, partition)
        assert [e.ts for e in events if isinstance(e, ResolvedEvent)] == workload.resolved_ts
        ddls = [e.query for e in events if isinstance(e, DdlEvent)]
        everywhere = protocol != "canal-json" or partition == 0
        assert ddls == (ddl_queries if everywhere else [])
        assert {(e.topic, e.partition) for e in events} == {(topic, partition)}


def test_avro_has_a_topic_per_table_and_no_control_events_by_default(workload):
    routing = route(workload, "avro", partitions=2, idle_partitions=0, replays=0)
    assert routing.topics == sorted(f"ticdc-avro_shop_{t.name}" for t in workload.tables)
    for (topic, _), rows in rows_by_partition(routing).items():
        assert {f"ticdc-avro_{e.schema}_{e.table}" for e in rows} <= {topic}
    assert all(isinstance(e, RowEvent) for e in routing.all_events())
    with_watermarks = route(workload, "avro", partitions=2, avro_watermarks=True, replays=0)
    for topic, partition in with_watermarks.streams:
        events = with_watermarks.events(topic, partition)
        table = topic.removeprefix("ticdc-avro_shop_")
        assert [e.table for e in events if isinstance(e, DdlEvent)] == [
            e.table for e in workload.ddl_events if e.table == table
        ]
        assert [e.ts for e in events if isinstance(e, ResolvedEvent)] == workload.resolved_ts


def test_replays_resend_earlier_rows_below_a_watermark_already_sent(workload):
    routing = route(workload, "open-protocol", replays=5)
    assert len(routing.replays) == 5
    for segments in routing.streams.values():
        sent: list = []
        for segment in segments:
            if not segment.replay:
                sent.extend(segment.events)
                continue
            ids = [id(e) for e in sent]
            start = ids.index(id(segment.events[0]))
            window = [e for e in sent[start:] if not isinstance(e, DdlEvent)]
            assert segment.events == window[: len(segment.events)]
            watermark = max(e.ts for e in sent if isinstance(e, ResolvedEvent))
            assert all(e.commit_ts <= watermark for e in segment.events if isinstance(e, RowEvent))
    assert all(r["min_commit_ts"] <= r["watermark_already_sent"] for r in routing.replays)


def test_encoding_numbers_offsets_and_marks_replayed_messages(workload):
    routing = route(workload, "open-protocol", replays=4)
    encoded = encode_routing(routing, CodecSettings())
    replayed = 0
    for (topic, partition), stream in encoded.items():
        assert [r.offset for r in stream.records] == list(range(len(stream.records)))
        assert {(r.topic, r.partition) for r in stream.records} <= {(topic, partition)}
        for first, last in stream.replayed_offsets:
            assert 0 < first <= last < len(stream.records)
            replayed += 1
    assert replayed == 4


# --- files -----------------------------------------------------------------------------------


def test_write_generated_writes_exports_manifest_expected_and_config(tmp_path, workload):
    options = GenerateOptions("open-protocol", layout="jsonl", file_compression="gz")
    out = write_generated(tmp_path, options, workload)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest == json.loads(json.dumps(out.manifest))
    records = [record for _, record in read_exports(out.export_files)]
    per_partition = defaultdict(int)
    for record in records:
        per_partition[str(record.partition)] += 1
    assert manifest["topics"]["ticdc-open-protocol"]["messages_per_partition"] == per_partition
    assert manifest["counts"]["messages"] == len(records)
    assert manifest["counts"]["row_events"] == len(workload.row_events)
    assert [p["ts"] for p in manifest["resolved"]] == workload.resolved_ts
    assert manifest["idle_partitions"] == [3]
    assert manifest["tables"]["shop.accounts"]["handle_key"] == ["code"]
    assert len(manifest["replays"]) == 3 and all(r["offsets"] for r in manifest["replays"])
    assert ExpectedLog.read_jsonl(tmp_path / "expected.jsonl").points == json.loads(
        json.dumps(workload.expected.points)
    )
    config = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    assert config["topics"]["ticdc-open-protocol"] == {
        "protocol": "open-protocol",
        "partitions": 4,
        "compression": "none",
        "enable-tidb-extension": True,
        "claim-check-roots": [],
    }
    assert config["changefeeds"] == {
        "sample-open-protocol": {"topics": ["ticdc-open-protocol"], "watermarks": True}
    }


def test_avro_output_has_its_schemas_as_a_directory_and_a_schemas_topic(tmp_path, workload):
    out = write_generated(tmp_path, GenerateOptions("avro"), workload)
    assert sorted(p.name for p in out.schema_dir.iterdir())[0].endswith(".avsc")
    assert (tmp_path / "registry" / "_schemas.jsonl").stat().st_size > 0
    config = yaml.safe_load(out.config_path.read_text())
    assert len(config["topics"]) == len(workload.tables)
    assert config["changefeeds"]["sample-avro"]["watermarks"] is False


def test_avro_of_ticdc_up_to_v6_0_is_generated_with_each_topics_schema(tmp_path):
    """The 2022 layout's records name no schema: the generated config gives each topic's, and
    reads the _schemas export, which knows the subjects too."""
    options = GenerateOptions(
        "avro", profile="realistic", transactions=60, tenants=2, tidb_extension=False,
        avro_layout="2022",
    )  # fmt: skip
    out = write_generated(tmp_path, options)
    config = load_config(out.config_path)
    assert {topic.schema for topic in config.topics.values()} == {"shop", "shop_2"}
    assert all(topic.schema_dir is None for topic in config.topics.values())
    decoders = {name: topic_decoder(topic, config.limits) for name, topic in config.topics.items()}
    records = [record for _, record in read_exports(out.export_files)]
    events = [event for r in records for event in decoders[r.topic].decode(r)]
    assert {(e.schema, e.table) for e in events} == {
        split_name(name) for name in out.manifest["tables"]
    }
    assert {e.commit_ts for e in events} == {None} and {e.op for e in events} == {UPDATE, DELETE}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"tidb_extension": True}, "no TiDB extension"),
        ({"profile": "ddl-heavy"}, "generate the 2022 layout from the realistic profile"),
        ({"avro_layout": "2021"}, "avro_layout must be current or 2022"),
    ],
)
def test_the_2022_avro_layout_is_generated_only_as_ticdc_v6_0_could_write_it(changes, reason):
    settings = {"profile": "realistic", "tidb_extension": False, "avro_layout": "2022"}
    with pytest.raises(ValueError, match=reason):
        GenerateOptions("avro", **(settings | changes))
