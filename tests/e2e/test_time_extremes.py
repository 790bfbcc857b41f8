"""MySQL's TIME extremes end to end in every protocol (issue 53): -838:59:59, 838:59:59, a
negative TIME under an hour, fractions and hours past 24, exported as TiCDC sends them, landed,
decoded and compacted into gold.

Open Protocol, Craft, Canal-JSON and Avro send TIME as text and gold holds it as sent. Avro from
TiCDC up to v6.0 (the 2022 layout) sends time-millis, through its encoder's signed-hours and
32-bit faults: gold holds what that loses (a negative TIME under an hour loses its sign, digits
past the millisecond are gone) and nothing more, the extremes included.
"""

from __future__ import annotations

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
from ticdc_lake.silver.events import Column, DdlEvent, ResolvedEvent, RowEvent
from ticdc_lake.silver.schema_registry import InMemorySchemaRegistry

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TIME_6 = "time(6)"
UPSTREAM = {
    1: "-838:59:59.000000",
    2: "838:59:59.000000",
    3: "-00:00:01.500000",
    4: "100:00:00.250000",
    5: "23:59:59.999999",
    6: "-01:30:00.000001",
    7: "00:00:00.000000",
    8: None,
}
# As TiCDC up to v6.0 wrote them and gold reads them back, declared time(6) in column-types.
AS_2022 = UPSTREAM | {
    3: "00:00:01.500000",  # Sscanf read -00 as 0: the sign is not in the message
    5: "23:59:59.999000",  # whole milliseconds, toward zero
    6: "-01:30:00.001000",  # -1 h + 30 min 0.000001 s, cut toward zero: 1 ms further out
}
# protocol case -> (protocol, codec options, TiDB extension, what gold holds)
CASES = {
    "open_protocol": ("open-protocol", (), True, UPSTREAM),
    "craft": ("craft", (), True, UPSTREAM),
    "canal_json": ("canal-json", (), True, UPSTREAM),
    "avro": ("avro", (("enable_watermark", True),), True, UPSTREAM),
    "avro_2022": ("avro", (("layout", "2022"),), False, AS_2022),
}
COMMIT_TS = 450_000_000_000_000_000


def events(schema: str) -> list:
    """A table of TIME(6) values, created, filled and resolved in one transaction."""
    where = {"topic": f"times-{schema}", "partition": 0, "offset": 0}
    create = (
        f"CREATE TABLE `{schema}`.`durations` (`id` bigint(20) NOT NULL PRIMARY KEY, "
        f"`t` {TIME_6} NULL)"
    )
    rows = [
        RowEvent(
            COMMIT_TS + 1, schema, "durations", "insert",
            {
                "id": make_column(BY_NAME["c_bigint"], key, key=True),
                "t": Column(mysql.TYPE_DURATION, mysql.FLAG_BINARY | mysql.FLAG_NULLABLE, time,
                            TIME_6),
            },
            None, **where,
        )
        for key, time in UPSTREAM.items()
    ]  # fmt: skip
    return [
        DdlEvent(COMMIT_TS, schema, "durations", create, mysql.ACTION_CREATE_TABLE, **where),
        *rows,
        ResolvedEvent(COMMIT_TS + 2, **where),
    ]


def write_topic(directory: Path, schema: str) -> dict:
    """The topic's export file (and schemas), and its section of the pipeline config."""
    protocol, options, extension, _ = CASES[schema]
    registry = InMemorySchemaRegistry() if protocol == "avro" else None
    settings = CodecSettings(
        schema_source=registry, enable_tidb_extension=extension, options=options
    )
    messages = make_encoder(protocol, settings).encode(events(schema))
    topic = f"times-{schema}"
    records = [KafkaRecord(topic, 0, i, m.key, m.value) for i, m in enumerate(messages)]
    exports.write_export(directory / "exports" / f"{topic}.jsonl", records, "jsonl")
    section = {"protocol": protocol, "partitions": 1, "enable-tidb-extension": extension}
    if registry is not None:
        export = directory / "registry" / f"{schema}.jsonl"
        exports.write_export(export, registry.schemas_records(), "jsonl")
        section["schemas-topic"] = str(export)
    if schema == "avro_2022":  # the schema comes from the subject, <schema>_<table>-value
        section["column-types"] = {"durations.t": TIME_6}
    return section


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    directory = tmp_path_factory.mktemp("times")
    topics = {f"times-{schema}": write_topic(directory, schema) for schema in CASES}
    document = {"lake": "lake", "inputs": ["exports/*"], "topics": topics}
    (directory / "pipeline.yaml").write_text(yaml.safe_dump(document))
    config = load_config(directory / "pipeline.yaml")
    result = run_stages(spark, config)
    assert not result.failed, result.to_dict()
    return LakeLayout(config.lake)


@pytest.mark.parametrize("schema", CASES)
def test_gold_holds_every_time_as_its_protocol_carries_it(lake, schema):
    *_, expected = CASES[schema]
    table = DeltaTable(str(lake.gold(schema, "durations")))
    types = {field.name: field.type.type for field in table.schema().fields}
    assert types["t"] == "string"  # Delta has no interval type
    rows = table.to_pyarrow_table(columns=["id", "t"]).to_pylist()
    assert {row["id"]: row["t"] for row in rows} == expected


def test_no_time_went_to_quarantine(lake):
    assert DeltaTable(str(lake.quarantine)).to_pyarrow_table().num_rows == 0
    assert {state.full_name for state in read_state(lake.gold_state)} == {
        f"{schema}.durations" for schema in CASES
    }
