"""Avro from TiCDC up to v6.0 (the 2022 layout) end to end (issue 53): export files and the
registry's schemas, as that version wrote them, landed, decoded and compacted into typed gold.

Its records name no schema and say a column's type only by its Avro type. One topic takes its
schema from the subjects in the `_schemas` export and declares three column types in
`column-types`; the other reads a schema directory, which knows no subjects, and names its
schema in `schema:`. Gold must land at gold/<schema>/<table>, typed from the Avro types (a
binary column included: it failed compaction when every gold column was text), with the
values this layout keeps and the losses docs/protocols.md lists, and nothing in quarantine.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable
from ticdc_lake.app.pipeline import run_stages
from ticdc_lake.bronze import exports
from ticdc_lake.config import load_config
from ticdc_lake.gold.state import read_state
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.protocols import CodecSettings, make_encoder
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.cases import BY_NAME, make_column
from ticdc_lake.silver import mysql
from ticdc_lake.silver.events import DELETE, INSERT, UPDATE, Column, RowEvent
from ticdc_lake.silver.schema_registry import InMemorySchemaRegistry

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ZONE = "Asia/Shanghai"  # TiCDC's: its TIMESTAMP text was parsed there
RECEIPT = b"\x89PNG\r\n\x1a\n\x00\xff"  # not UTF-8: 'Invalid UTF8 payload' when gold was text
ORDERS = {  # column -> its type in tidb_lake.cases (DECIMAL(12,2) made below)
    "id": "c_bigint", "amount": None, "placed_on": "c_date", "placed_at": "c_datetime",
    "paid_at": "c_timestamp", "dwell": "c_time", "qty": "c_int_unsigned", "tiny": "c_tinyint",
    "big": "c_bigint_unsigned", "flags": "c_bit", "status": "c_enum", "tags": "c_set",
    "doc": "c_json", "note": "c_varchar", "receipt": "c_blob", "fingerprint": "c_varbinary",
    "price": "c_float", "ratio": "c_double", "born": "c_year",
}  # fmt: skip
FULL = {
    "amount": "12.50", "placed_on": "2024-06-01", "placed_at": "2024-06-01 08:00:00",
    "paid_at": "2024-06-01 08:00:00.123", "dwell": "838:59:59.00", "qty": 2**32 - 1,
    "tiny": -128, "big": 2**64 - 1, "flags": 1023, "status": 1, "tags": 5, "doc": '{"k": 1}',
    "note": "héllo", "receipt": RECEIPT, "fingerprint": b"\xff\xfe", "price": 1.5, "ratio": 2.5,
    "born": 2024,
}  # fmt: skip


def order(key: int, **values) -> dict[str, Column]:
    image = {"id": make_column(BY_NAME["c_bigint"], key, key=True)}
    for name, kind in ORDERS.items():
        if name == "amount":
            flags = mysql.FLAG_BINARY | mysql.FLAG_NULLABLE
            image[name] = Column(mysql.TYPE_NEWDECIMAL, flags, values.get(name), "decimal(12,2)")
        elif name != "id":
            image[name] = make_column(BY_NAME[kind], values.get(name))
    return image


def row(op: str, table: str, image: dict, schema: str = "shop") -> RowEvent:
    new, old = (None, image) if op == DELETE else (image, None)
    return RowEvent(450_000_000_000_000_000, schema, table, op, new, old, f"legacy-{schema}", 0, 0)


ORDER_EVENTS = [
    row(INSERT, "orders", order(1, **FULL)),
    row(INSERT, "orders", order(2, placed_on="9999-12-31", placed_at="1999-12-31 23:59:59",
                                dwell="-838:59:59.00")),
    row(INSERT, "orders", order(3, amount="1.00", dwell="-00:00:01.50")),
    row(UPDATE, "orders", order(3, amount="2.00", dwell="-00:00:01.50")),
    row(INSERT, "orders", order(4, amount="4.00")),
    row(DELETE, "orders", order(4, amount="4.00")),
    row(INSERT, "orders", order(5, placed_on="0000-00-00", placed_at="0000-00-00 00:00:00")),
]  # fmt: skip
PAYMENT = {
    "id": make_column(BY_NAME["c_int"], 1, key=True),
    "receipt": make_column(BY_NAME["c_blob"], RECEIPT),
    "amount": Column(mysql.TYPE_NEWDECIMAL, mysql.FLAG_BINARY, "12.50", "decimal(8,2)"),
}


def write_topic(directory: Path, topic: str, events: list[RowEvent]) -> InMemorySchemaRegistry:
    """The topic's Kafka records as TiCDC up to v6.0 wrote them, and the schemas it registered."""
    registry = InMemorySchemaRegistry()
    settings = CodecSettings(
        schema_source=registry,
        enable_tidb_extension=False,
        options=(("layout", "2022"), ("time_zone", ZONE)),
    )
    messages = make_encoder("avro", settings).encode(events)
    records = [KafkaRecord(topic, 0, i, m.key, m.value) for i, m in enumerate(messages)]
    exports.write_export(directory / "exports" / f"{topic}.parquet", records, "parquet")
    return registry


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    directory = tmp_path_factory.mktemp("avro-2022")
    orders = write_topic(directory, "legacy-shop", ORDER_EVENTS)
    exports.write_export(directory / "_schemas.jsonl", orders.schemas_records(), "jsonl")
    payments = write_topic(directory, "legacy-billing", [row(INSERT, "payments", PAYMENT)])
    payments.write_directory(directory / "schemas")
    avro = {"protocol": "avro", "partitions": 1, "enable-tidb-extension": False}
    document = {
        "lake": "lake",
        "inputs": ["exports/*"],
        "time-zone": ZONE,
        "topics": {
            "legacy-shop": avro | {
                "schemas-topic": "_schemas.jsonl",
                "column-types": {
                    "orders.amount": "decimal(12,2)",
                    "orders.placed_on": "date",
                    "orders.dwell": "time(2)",
                },
            },
            "legacy-billing": avro | {"schema-dir": "schemas", "schema": "billing"},
        },
    }  # fmt: skip
    (directory / "pipeline.yaml").write_text(yaml.safe_dump(document))
    config = load_config(directory / "pipeline.yaml")
    result = run_stages(spark, config, quality=True)
    assert not result.failed, result.to_dict()
    return LakeLayout(config.lake)


def gold(lake: LakeLayout, schema: str, table: str) -> tuple[dict[str, str], dict[int, dict]]:
    """A gold table's Delta column types, and its rows by id."""
    delta = DeltaTable(str(lake.gold(schema, table)))
    types = {field.name: field.type.type for field in delta.schema().fields}
    rows = {found["id"]: found for found in delta.to_pyarrow_table().to_pylist()}
    return types, rows


def test_gold_is_named_by_the_subject_or_the_topics_schema_never_empty(lake):
    states = {state.full_name: state for state in read_state(lake.gold_state)}
    assert set(states) == {"shop.orders", "billing.payments"}
    assert Path(states["shop.orders"].path) == lake.gold("shop", "orders")
    assert {state.mode for state in states.values()} == {"inconsistent"}  # no commit TS at all


def test_gold_columns_are_typed_from_the_avro_types_and_the_declared_ones(lake):
    types, _ = gold(lake, "shop", "orders")
    assert types == {
        "id": "long", "amount": "decimal(12,2)", "placed_on": "date", "placed_at": "timestamp",
        "paid_at": "timestamp", "dwell": "string", "qty": "long", "tiny": "integer",
        "big": "decimal(20,0)", "flags": "decimal(20,0)", "status": "string", "tags": "string",
        "doc": "string", "note": "string", "receipt": "binary", "fingerprint": "binary",
        "price": "float", "ratio": "double", "born": "long", "_commit_ts": "long",
    }  # fmt: skip
    types, _ = gold(lake, "billing", "payments")
    assert types == {"id": "integer", "receipt": "binary", "amount": "string", "_commit_ts": "long"}


def test_gold_holds_what_the_layout_keeps_by_kafka_order(lake):
    utc = dt.UTC
    _, rows = gold(lake, "shop", "orders")
    assert sorted(rows) == [1, 2, 3, 5]  # 4 was deleted by a tombstone
    assert rows[1] == {
        "id": 1, "amount": Decimal("12.50"), "placed_on": dt.date(2024, 6, 1),
        # DATETIME: the wall clock as an instant in UTC; TIMESTAMP: the instant in Shanghai's
        "placed_at": dt.datetime(2024, 6, 1, 8, tzinfo=utc),
        "paid_at": dt.datetime(2024, 6, 1, 0, 0, 0, 123000, tzinfo=utc),
        "dwell": "838:59:59.00", "qty": 2**32 - 1, "tiny": -128, "big": Decimal(2**64 - 1),
        "flags": Decimal(1023), "status": "a", "tags": "x,z", "doc": '{"k": 1}',
        "note": "héllo", "receipt": RECEIPT, "fingerprint": b"\xff\xfe", "price": 1.5,
        "ratio": 2.5, "born": 2024, "_commit_ts": None,
    }  # fmt: skip
    # 9999-12-31 overflowed Go's UnixNano, found again as a declared DATE; -838:59:59 wrapped.
    assert (rows[2]["placed_on"], rows[2]["dwell"]) == (dt.date(9999, 12, 31), "-838:59:59.00")
    assert rows[2]["placed_at"] == dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=utc)
    # The update's values; -00:00:01.50 lost its sign in the message.
    assert (rows[3]["amount"], rows[3]["dwell"]) == (Decimal("2.00"), "00:00:01.50")
    assert (rows[5]["placed_on"], rows[5]["placed_at"]) == (None, None)  # zero dates
    _, payments = gold(lake, "billing", "payments")
    assert payments[1] == {"id": 1, "receipt": RECEIPT, "amount": "12.50", "_commit_ts": None}


def test_every_record_is_decoded_and_none_quarantined(lake):
    assert DeltaTable(str(lake.quarantine)).to_pyarrow_table().num_rows == 0
    log = DeltaTable(str(lake.decode_log)).to_pyarrow_table().to_pylist()
    assert sum(entry["records"] for entry in log) == sum(entry["decoded"] for entry in log) == 8
