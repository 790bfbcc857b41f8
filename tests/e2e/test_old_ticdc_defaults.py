"""An Open Protocol changefeed from TiCDC before tiflow #10804, end to end: land → decode →
watermark → compact, gold equal to what upstream holds.

Rows are written, then columns of every kind are added with defaults (ALTER TABLE ... ADD
COLUMN). Those rows have no value for the new columns in TiKV, so when one of them is updated or
deleted TiCDC fills the columns in: TiCDC before v6.5.9, v7.1.5, v7.5.2 and v8.0.0 with each
default as TiDB stores it, a JSON string whatever the type (BIT as its bytes, ENUM and SET by
name). The messages are built with the project's encoder and those old images rewritten to that
form. Nothing is quarantined, and gold holds, for every row, what TiDB reads.
"""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest
from deltalake import DeltaTable
from ticdc_lake.bronze import exports
from ticdc_lake.bronze.land import land
from ticdc_lake.gold.compact import compact
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.protocols import CodecSettings
from ticdc_lake.protocols.open_protocol import OpenProtocolEncoder, go_json, split_entries
from ticdc_lake.records import KafkaRecord
from ticdc_lake.silver import mysql
from ticdc_lake.silver.decode import decode
from ticdc_lake.silver.events import (
    DELETE,
    INSERT,
    UPDATE,
    Column,
    DdlEvent,
    ResolvedEvent,
    RowEvent,
)
from ticdc_lake.silver.watermark import watermark

from tests.gold import silver_input as si
from tests.protocols.test_open_protocol import frame

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPIC = "old-ticdc"
NULLABLE, BIN, UNS, KEY = mysql.FLAG_NULLABLE, mysql.FLAG_BINARY, mysql.FLAG_UNSIGNED, 0x0B
HERE = {"topic": TOPIC, "partition": 0, "offset": 0}  # the encoder gives the Kafka coordinates

# Each added column: its definition, type code and flags, the value TiDB holds for the rows
# written before it (as the event model carries it), and the text TiDB stores for its default,
# which is what the old TiCDC sent for those rows.
ADDED = {
    "priority": ("int NOT NULL DEFAULT 5", mysql.TYPE_LONG, BIN, 5, "5"),
    "credit": ("bigint unsigned NOT NULL DEFAULT 18446744073709551615", mysql.TYPE_LONGLONG,
               BIN | UNS, 2**64 - 1, "18446744073709551615"),
    "debt": ("smallint NOT NULL DEFAULT -7", mysql.TYPE_SHORT, BIN, -7, "-7"),
    "ratio": ("double NOT NULL DEFAULT 1.5", mysql.TYPE_DOUBLE, BIN, 1.5, "1.5"),
    "weight": ("float NOT NULL DEFAULT 0.1", mysql.TYPE_FLOAT, BIN, mysql.float32(0.1), "0.1"),
    "born": ("year NOT NULL DEFAULT 2020", mysql.TYPE_YEAR, BIN | UNS, 2020, "2020"),
    "flags": ("bit(10) NOT NULL DEFAULT b'1000000001'", mysql.TYPE_BIT, BIN | UNS, 513,
              "\x02\x01"),
    "level": ("enum('low','mid','high') NOT NULL DEFAULT 'mid'", mysql.TYPE_ENUM, 0, 2, "mid"),
    "tags": ("set('x','y','z') NOT NULL DEFAULT 'x,z'", mysql.TYPE_SET, 0, 5, "x,z"),
    "price": ("decimal(8,2) NOT NULL DEFAULT 1.50", mysql.TYPE_NEWDECIMAL, BIN, "1.50", "1.50"),
}  # fmt: skip
# What gold holds for each, typed.
GOLD_DEFAULTS = {
    "priority": 5,
    "credit": Decimal(2**64 - 1),
    "debt": -7,
    "ratio": 1.5,
    "weight": mysql.float32(0.1),
    "born": 2020,
    "flags": 513,
    "level": "mid",
    "tags": "x,z",
    "price": Decimal("1.50"),
}


def base(id_: int, note: str) -> dict[str, Column]:
    return {
        "id": Column(mysql.TYPE_LONG, BIN | KEY, id_),
        "note": Column(mysql.TYPE_VARCHAR, NULLABLE, note),
    }


def widened(row: dict[str, Column], **changed) -> dict[str, Column]:
    """The row after the ALTER TABLEs: each added column at its default unless ``changed``."""
    image = dict(row)
    for name, (_, code, flags, value, _) in ADDED.items():
        image[name] = Column(code, flags, changed.get(name, value))
    return image


def upstream() -> list:
    """The changefeed's events in commit order, as the current event model has them."""
    events = [DdlEvent(100, "s", "t", "CREATE TABLE s.t (id int PRIMARY KEY, note varchar(20))",
                       mysql.ACTION_CREATE_TABLE, **HERE)]  # fmt: skip
    events += [
        RowEvent(110, "s", "t", INSERT, base(i, f"n{i}"), None, **HERE) for i in (1, 2, 3, 4)
    ]
    for ts, (name, (definition, *_)) in enumerate(ADDED.items(), start=120):
        query = f"ALTER TABLE s.t ADD COLUMN {name} {definition}"
        events.append(DdlEvent(ts, "s", "t", query, mysql.ACTION_ADD_COLUMN, **HERE))
    events += [
        RowEvent(200, "s", "t", UPDATE, widened(base(1, "one")), widened(base(1, "n1")), **HERE),
        RowEvent(210, "s", "t", DELETE, None, widened(base(2, "n2")), **HERE),
        RowEvent(220, "s", "t", UPDATE, widened(base(3, "n3"), priority=9, level=3, tags=2,
                 flags=7, born=1999), widened(base(3, "n3")), **HERE),
        ResolvedEvent(300, **HERE),
    ]  # fmt: skip
    return events


def as_old_ticdc_sent(key: bytes, value: bytes) -> bytes:
    """The message's value with every added column of an old image (`p`, `d`) holding the text
    TiDB stores for its default, as TiCDC before #10804 filled those rows in."""
    keys, values = [], []
    for key_json, value_json in split_entries(key, value):
        document = orjson.loads(value_json) if value_json else None
        for image in ("p", "d"):
            for name, column in (document or {}).get(image, {}).items():
                if name in ADDED:
                    column["v"] = ADDED[name][4]
        keys.append(key_json)
        values.append(go_json(document) if document is not None else b"")
    return frame(keys, values)[1]


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    directory = tmp_path_factory.mktemp("old-ticdc-defaults")
    messages = OpenProtocolEncoder(CodecSettings(max_batch_size=2)).encode(upstream())
    records = [
        KafkaRecord(TOPIC, 0, offset, message.key, as_old_ticdc_sent(message.key, message.value))
        for offset, message in enumerate(messages)
    ]
    # The three old images (two updates' `p`, a delete's `d`) carry the old form.
    assert b"".join(record.value for record in records).count(b'"v":"mid"') == 3
    (directory / "exports").mkdir()
    exports.write_export(directory / "exports" / "p0.jsonl", records, "jsonl")
    streams = si.Streams(routing=None, events={(TOPIC, 0): []})
    config = si.write_config(directory, streams, "open-protocol", partitions=1)
    land(spark, config)
    decoded = decode(spark, config)
    watermark(spark, config)
    compact(spark, config)
    gold = DeltaTable(str(LakeLayout(config.lake).gold("s", "t"))).to_pyarrow_table().to_pylist()
    return decoded, sorted(gold, key=lambda row: row["id"])


def test_nothing_is_quarantined(lake):
    decoded, _ = lake
    assert (decoded.quarantined, decoded.events.get("update"), decoded.events.get("delete")) == (
        0,
        2,
        1,
    )


def test_gold_holds_what_tidb_holds(lake):
    _, gold = lake
    for row in gold:
        row.pop("_commit_ts")
    defaults = GOLD_DEFAULTS
    assert gold == [
        {"id": 1, "note": "one", **defaults},
        {"id": 3, "note": "n3", **defaults, "priority": 9, "level": "high", "tags": "y",
         "flags": 7, "born": 1999},
        # Never changed after the ALTER TABLEs: gold gives it the defaults from the DDL.
        {"id": 4, "note": "n4", **defaults},
    ]  # fmt: skip
