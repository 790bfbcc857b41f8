"""One generated workload, encoded in every protocol and decoded back: the same events, up to
what each protocol loses.

What each protocol keeps is stated once, one function per protocol, in
`ticdc_lake.sample.workload.losses` (keep_open_protocol, keep_craft, keep_canal_json,
keep_avro); the silver inputs of the compact tests (tests/gold/silver_input.py) and the
end-to-end tests' check of decoded silver rely on the same functions. Here every protocol is
decoded and compared with those projections partition by partition, the losses are asserted as
facts, and the four decodings are compared with each other on what all of them keep.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from ticdc_lake.limits import LimitExceededError, Limits
from ticdc_lake.protocols import PROTOCOLS, CodecSettings, make_decoder
from ticdc_lake.sample.workload import generate_workload
from ticdc_lake.sample.workload.check import compare_streams, compare_with_workload
from ticdc_lake.sample.workload.dispatch import route
from ticdc_lake.sample.workload.losses import canonical, kept
from ticdc_lake.sample.workload.output import encode_routing
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import DELETE, UPDATE, DdlEvent, ResolvedEvent, RowEvent
from ticdc_lake.silver.rows import ChangeRows
from ticdc_lake.silver.schema_registry import InMemorySchemaRegistry

VARIANTS = {
    "open-protocol": dict(),
    "open-protocol/lz4": dict(compression="lz4"),
    "craft": dict(),
    "canal-json": dict(),
    "canal-json/no-extension/snappy": dict(enable_tidb_extension=False, compression="snappy"),
    "avro": dict(),
    "avro/watermarks": dict(options=(("enable_watermark", True),)),
    "avro/no-extension": dict(enable_tidb_extension=False),
}


@pytest.fixture(scope="module")
def workload():
    return generate_workload(seed=2024, transactions=150)


def run(workload, variant: str, replays: int = 2):
    """(routing, settings, decoded events per partition) for one protocol variant."""
    protocol = variant.split("/")[0]
    settings = CodecSettings(**VARIANTS[variant], schema_source=InMemorySchemaRegistry())
    routing = route(
        workload,
        protocol,
        partitions=3,
        replays=replays,
        avro_watermarks=bool(settings.option("enable_watermark", False)),
    )
    decoder = make_decoder(protocol, settings)
    decoded = {
        key: [event for record in stream.records for event in decoder.decode(record)]
        for key, stream in encode_routing(routing, settings).items()
    }
    return routing, settings, decoded


@pytest.fixture(scope="module")
def decoded_by_protocol(workload):
    return {protocol: run(workload, protocol, replays=0) for protocol in PROTOCOLS}


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_protocol_gives_back_what_it_keeps(workload, variant):
    routing, settings, decoded = run(workload, variant)
    assert compare_streams(routing, decoded, settings) == []
    assert compare_with_workload(workload, routing, decoded, settings) == []
    rows = [e for events in decoded.values() for e in events if isinstance(e, RowEvent)]
    assert len(rows) >= len(workload.row_events)
    assert {e.op for e in rows} == (
        {"update", "delete"} if variant == "avro/no-extension" else {"insert", "update", "delete"}
    )


def rows_of(decoded) -> list[RowEvent]:
    return [e for events in decoded.values() for e in events if isinstance(e, RowEvent)]


def all_columns(rows):
    return [
        c for e in rows for image in (e.columns, e.old_columns) if image for c in image.values()
    ]


def test_open_protocol_and_craft_lose_only_the_full_column_type(decoded_by_protocol):
    for protocol in ("open-protocol", "craft"):
        rows = rows_of(decoded_by_protocol[protocol][2])
        assert {c.mysql_type for c in all_columns(rows)} == {None}
        partition_ids = {e.partition_id for e in rows if e.table == "orders"}
        assert partition_ids and None not in partition_ids
        assert all(e.old_columns for e in rows if e.op == UPDATE)

    def plain(decoded):
        return Counter(
            canonical(dataclasses.replace(e, offset=0, index=0))
            for events in decoded.values()
            for e in events
        )

    assert plain(decoded_by_protocol["open-protocol"][2]) == plain(decoded_by_protocol["craft"][2])


def test_canal_json_loses_partition_ids_some_ddl_types_and_most_flags(decoded_by_protocol):
    _, _, decoded = decoded_by_protocol["canal-json"]
    rows = rows_of(decoded)
    assert {e.partition_id for e in rows} == {None}
    assert not any(
        c.flags & (mysql.FLAG_NULLABLE | mysql.FLAG_UNIQUE_KEY) for c in all_columns(rows)
    )
    accounts = [e for e in rows if e.table == "accounts"]
    assert accounts and all(e.handle_key == () for e in accounts)  # a unique-key handle
    ddl_types = {
        e.ddl_type for events in decoded.values() for e in events if isinstance(e, DdlEvent)
    }
    assert ddl_types == {mysql.ACTION_CREATE_TABLE, mysql.ACTION_TRUNCATE_TABLE, None}
    assert {c.mysql_type for c in all_columns(rows)} == {
        None,
        "date",
        "json",
        "tinytext",
        "text",
        "mediumtext",
        "longtext",
        "tinyblob",
        "blob",
        "mediumblob",
        "longblob",
    }


def test_canal_json_without_the_extension_has_no_commit_ts_and_no_watermarks(workload):
    _, _, decoded = run(workload, "canal-json/no-extension/snappy", replays=0)
    events = [e for stream in decoded.values() for e in stream]
    assert not any(isinstance(e, ResolvedEvent) for e in events)
    assert {e.commit_ts for e in events} == {None}


def test_avro_loses_old_images_delete_rows_and_commit_ts_and_int_widths(decoded_by_protocol):
    _, _, decoded = decoded_by_protocol["avro"]
    events = [e for stream in decoded.values() for e in stream]
    assert all(isinstance(e, RowEvent) for e in events)  # no DDL, no resolved events
    deletes = [e for e in events if e.op == DELETE]
    assert deletes and all(e.commit_ts is None and e.handle_key_only for e in deletes)
    assert all(set(e.old_columns) == set(e.handle_key) for e in deletes)
    assert all(e.old_columns is None for e in events if e.op == UPDATE)
    codes = {c.type_code for c in all_columns(events)}
    assert not codes & {
        mysql.TYPE_TINY,
        mysql.TYPE_SHORT,
        mysql.TYPE_INT24,
        mysql.TYPE_STRING,
        mysql.TYPE_BLOB,
    }
    accounts = [e for e in events if e.table == "accounts" and e.op != DELETE]
    assert all(e.columns["code"].flags & mysql.FLAG_PRIMARY_KEY for e in accounts)


def common(event: RowEvent) -> tuple:
    """What every protocol keeps of a row change (with the TiDB extension, default options):
    table, operation, commit TS except on deletes, the key, and the new values by name."""
    image = event.old_columns if event.op == DELETE else event.columns
    key = tuple(sorted((n, c.value) for n, c in image.items() if n in _KEYS[event.table]))
    values = (
        () if event.op == DELETE else tuple(sorted((n, repr(c.value)) for n, c in image.items()))
    )
    commit_ts = None if event.op == DELETE else event.commit_ts
    return (event.schema, event.table, event.op, commit_ts, key, tuple(values))


_KEYS = {
    "numbers": {"id"},
    "strings": {"id"},
    "times": {"id"},
    "orders": {"id"},
    "accounts": {"code"},
    "order_items": {"order_id", "line_no"},
}


def test_all_protocols_decode_the_same_row_changes(workload, decoded_by_protocol):
    expected = Counter(common(e) for e in workload.row_events)
    for protocol, (_, _, decoded) in decoded_by_protocol.items():
        assert Counter(common(e) for e in rows_of(decoded)) == expected, protocol


def test_the_projections_are_what_the_decoders_give(workload):
    """The projection of a generated event equals its decoding, event by event (no replays):
    the per-protocol functions in losses.py are exact, not merely consistent."""
    for protocol in PROTOCOLS:
        routing, settings, decoded = run(workload, protocol, replays=0)
        for key, events in decoded.items():
            assert [dataclasses.replace(e, offset=0, index=0) for e in events] == [
                dataclasses.replace(e, offset=0, index=0)
                for e in kept(protocol, routing.events(*key), settings)
            ], (protocol, key)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_record_past_max_message_bytes_is_refused_before_it_is_parsed(workload, protocol):
    routing, settings, _ = run(workload, protocol, replays=0)
    records = [r for s in encode_routing(routing, settings).values() for r in s.records]
    largest = max(records, key=lambda r: max(len(r.key or b""), len(r.value or b"")))
    size = max(len(largest.key or b""), len(largest.value or b""))

    def decoder(limit: int):
        limited = dataclasses.replace(settings, limits=Limits(max_message_bytes=limit))
        return make_decoder(protocol, limited)

    def decode(limit: int):
        return decoder(limit).decode(largest)

    assert decode(size)  # exactly at the limit: decoded
    changes = ChangeRows()  # nor is it written into silver's buffers in place
    assert not decoder(size - 1).decode_into(largest, changes, 1) and not len(changes)
    with pytest.raises(LimitExceededError) as refused:
        decode(size - 1)
    error = refused.value
    assert f"({size:,}) exceeds limits.max-message-bytes = {size - 1:,}" in error.reason
    assert (error.protocol, error.topic, error.partition, error.offset) == (
        protocol,
        largest.topic,
        largest.partition,
        largest.offset,
    )


def image_width(events) -> int:
    widths = [len(image) for e in events if isinstance(e, RowEvent)
              for image in (e.columns, e.old_columns) if image is not None]  # fmt: skip
    return max(widths, default=0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_row_image_past_max_table_columns_is_refused(workload, protocol):
    """TiDB allows 4096 columns; a wider image (a hostile export) goes to quarantine before
    gold would make a table of it, whichever reader takes the message."""
    routing, settings, _ = run(workload, protocol, replays=0)
    records = [r for s in encode_routing(routing, settings).values() for r in s.records]
    plain = make_decoder(protocol, settings)
    widest = max(records, key=lambda r: image_width(plain.decode(r)))
    width = image_width(plain.decode(widest))

    def decoder(limit: int):
        limited = dataclasses.replace(settings, limits=Limits(max_table_columns=limit))
        return make_decoder(protocol, limited)

    assert decoder(width).decode(widest)  # exactly at the limit: decoded
    changes = ChangeRows()
    assert not decoder(width - 1).decode_into(widest, changes, 1) and not len(changes)
    with pytest.raises(LimitExceededError) as refused:
        decoder(width - 1).decode(widest)
    assert f"its column count ({width:,}) exceeds limits.max-table-columns" in str(refused.value)


def test_avro_up_to_ticdc_v6_0_gives_back_what_it_keeps():
    """The 2022 layout, from the realistic profile (the ddl-heavy one holds values that version
    stopped on), decoded by partition and compared with what workload.losses says it keeps."""
    workload = generate_workload(seed=2022, transactions=150, profile="realistic")
    settings = CodecSettings(
        enable_tidb_extension=False,
        schema_source=InMemorySchemaRegistry(),
        options=(("layout", "2022"),),
    )
    routing = route(workload, "avro", partitions=3, replays=2)
    decoder = make_decoder("avro", settings)
    decoded = {
        key: [event for record in stream.records for event in decoder.decode(record)]
        for key, stream in encode_routing(routing, settings).items()
    }
    assert compare_streams(routing, decoded, settings) == []
    assert compare_with_workload(workload, routing, decoded, settings) == []
    events = [e for stream in decoded.values() for e in stream]
    assert {type(e) for e in events} == {RowEvent}  # no DDL, no watermarks
    assert len(events) >= len(workload.row_events) > 300
    assert {e.op for e in events} == {"update", "delete"} and {e.commit_ts for e in events} == {
        None
    }
