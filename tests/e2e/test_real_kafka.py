"""End to end through a real Kafka broker and the real kcat: the path a user takes.

Per protocol (Open Protocol's batched key/value pairs, Craft, Canal-JSON with the TiDB extension
so watermarks are sent, Avro with a schema registry and watermarks), the generator's records are
produced with librdkafka (confluent-kafka) to the session's broker (tests/kafka_broker.py), each
to the partition the generator chose, in order, over 3 partitions, with headers (one of them
binary); topics are created with CreateTime (the producer's timestamps: the generator's) or
LogAppendTime (the broker's). Debian's ``kcat -C -J -e`` exports them: first by ``-o`` ranges
per partition, a head file (``-o beginning -c K``) and a tail file (``-o K-3``) overlapping it,
which are landed and carried through decode, watermark and compact; then whole topics, landed
again. Gold must equal the generator's tables at the last watermark, and bronze must hold each
(topic, partition, offset) once, with the generator's bytes and kcat's timestamps, timestamp
types and headers.
"""

from __future__ import annotations

import http.server
import json
import math
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
import yaml
from confluent_kafka import Producer
from deltalake import DeltaTable
from ticdc_lake.bronze import exports
from ticdc_lake.bronze.land import land
from ticdc_lake.config import PipelineConfig, load_config
from ticdc_lake.lake.layout import LakeLayout
from ticdc_lake.records import KafkaRecord
from ticdc_lake.sample.workload.output import GeneratedOutput, GenerateOptions, write_generated

from tests.e2e import lakes

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 3
TRANSACTIONS = 30
OVERLAP = 3  # records per partition both range files hold
CREATE, APPEND = "CreateTime", "LogAppendTime"


@dataclass(frozen=True)
class Case:
    name: str
    protocol: str
    seed: int
    timestamp_types: tuple[str, ...]  # per topic, in turn

    def options(self) -> GenerateOptions:
        return GenerateOptions(
            protocol=self.protocol,
            partitions=PARTITIONS,
            seed=self.seed,
            transactions=TRANSACTIONS,
            layout="jsonl",
            idle_partitions=1,
            tidb_extension=True,
            avro_watermarks=self.protocol == "avro",
        )


CASES = (
    Case("open-protocol", "open-protocol", 41, (CREATE,)),
    Case("craft", "craft", 42, (APPEND,)),
    Case("canal-json", "canal-json", 43, (CREATE,)),
    Case("avro", "avro", 44, (APPEND, CREATE)),  # a topic per table: both kinds
)


@dataclass
class Landed:
    land: object
    decode: object
    watermark: object
    compact: object


@dataclass
class KafkaLake:
    case: Case
    output: GeneratedOutput
    config: PipelineConfig
    timestamp_types: dict[str, str]  # topic -> its message.timestamp.type
    head: Path  # kcat -o beginning -c K, per partition
    tail: Path  # kcat -o K-OVERLAP, per partition
    full: list[Path]  # kcat of whole topics
    ranges: Landed
    again: object  # land's result for the whole topics

    @property
    def layout(self) -> LakeLayout:
        return LakeLayout(self.config.lake)

    @property
    def produced(self) -> dict[tuple[str, int, int], KafkaRecord]:
        return {
            (r.topic, r.partition, r.offset): r
            for stream in self.output.encoded.values()
            for r in stream.records
        }


def headers_of(record: KafkaRecord) -> list[tuple[str, bytes | None]]:
    """What the test sends with each record: text, binary (not UTF-8), empty and null values."""
    offset = str(record.offset).encode()
    return [
        ("ticdc-lake-test", b"real-kafka"),
        ("binary", b"\xff\x00\x80" + offset),
        ("empty", b""),
        ("null", None),
    ]


def produce(bootstrap: str, output: GeneratedOutput) -> None:
    """Each generator record to its partition, in order (idempotence keeps the order and the
    offsets: they must come out equal to the generator's), with its timestamp as CreateTime."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    failures = []

    def delivered(error, message):
        if error is not None:
            failures.append(error)

    for (topic, partition), stream in sorted(output.encoded.items()):
        for record in stream.records:
            producer.produce(
                topic,
                value=record.value,
                key=record.key,
                partition=partition,
                timestamp=record.timestamp_ms,
                headers=headers_of(record),
                on_delivery=delivered,
            )
            producer.poll(0)
    assert producer.flush(60) == 0 and not failures, failures


def kcat_export(kcat: str, bootstrap: str, topic: str, path: Path, *options: str) -> int:
    """Append what ``kcat -C -J -e`` prints for ``topic`` with ``options`` to ``path``; the
    number of records it printed."""
    command = [kcat, "-C", "-J", "-e", "-b", bootstrap, "-t", topic, *options]
    done = subprocess.run(command, capture_output=True, timeout=120)
    assert done.returncode == 0, (command, done.stderr.decode(errors="replace"))
    with path.open("ab") as sink:
        sink.write(done.stdout)
    return len(done.stdout.splitlines())


class _Registry(http.server.BaseHTTPRequestHandler):
    """A Confluent Schema Registry's ``GET /schemas/ids/{id}`` and ``.../subjects``, answered
    from the generator's registrations (its schema directory and ``_schemas`` export)."""

    schemas: dict[int, str]
    subjects: dict[int, list[str]]

    def do_GET(self):
        path = self.path.partition("?")[0].removeprefix("/schemas/ids/")
        schema_id, _, rest = path.partition("/")
        if not schema_id.isdigit() or int(schema_id) not in self.schemas:
            return self._reply(404, {"error_code": 40403, "message": "Schema not found"})
        if rest == "subjects":
            return self._reply(200, self.subjects.get(int(schema_id), []))
        return self._reply(200, {"schema": self.schemas[int(schema_id)]})

    def _reply(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def schema_registry(tmp_path_factory) -> Iterator:
    """Start a registry for a generated output's schemas: ``serve(output)`` gives its URL."""
    servers = []

    def serve(output: GeneratedOutput) -> str:
        subjects: dict[int, list[str]] = {}
        for record in exports.read_export(output.out_dir / "registry" / "_schemas.jsonl"):
            value = orjson.loads(record.value)
            subjects.setdefault(value["id"], []).append(value["subject"])
        schemas = {int(p.stem): p.read_text() for p in output.schema_dir.glob("*.avsc")}
        handler = type("Registry", (_Registry,), {"schemas": schemas, "subjects": subjects})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def write_config(output: GeneratedOutput, registry_url: str | None) -> PipelineConfig:
    document = yaml.safe_load(output.config_path.read_text())
    document |= {"lake": "lake", "inputs": ["landing/*"]}
    if registry_url:  # Avro: schemas from the registry, not the generator's files
        for topic in document["topics"].values():
            topic.pop("schema-dir", None)
            topic.pop("schemas-topic", None)
            topic["schema-registry"] = {"url": registry_url}
    output.config_path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_config(output.config_path)


def build(spark, directory: Path, case: Case, broker, kcat: str, registry) -> KafkaLake:
    output = write_generated(directory, case.options())
    url = registry(output) if case.protocol == "avro" else None
    config = write_config(output, url)
    topics = output.routing.topics
    kinds = {t: case.timestamp_types[i % len(case.timestamp_types)] for i, t in enumerate(topics)}
    for topic in topics:
        broker.create_topic(topic, PARTITIONS, {"message.timestamp.type": kinds[topic]})
    produce(broker.bootstrap, output)

    landing = directory / "landing"
    landing.mkdir()
    head, tail = landing / "head.kcat.jsonl", landing / "tail.kcat.jsonl"
    for (topic, partition), stream in sorted(output.encoded.items()):
        count = len(stream.records)
        if not count:
            continue
        first = math.ceil(count * 0.6)
        start = max(0, first - OVERLAP)
        where = ("-p", str(partition))
        printed = kcat_export(
            kcat, broker.bootstrap, topic, head, *where, "-o", "beginning", "-c", str(first)
        )
        printed += kcat_export(kcat, broker.bootstrap, topic, tail, *where, "-o", str(start))
        assert printed == first + count - start, (topic, partition)
    ranges = Landed(*lakes.run_stages(spark, config, compacting=True))

    full = []
    for topic in topics:
        full.append(landing / f"full-{topic}.kcat.jsonl")
        printed = kcat_export(kcat, broker.bootstrap, topic, full[-1])
        assert printed == sum(len(s.records) for (t, _), s in output.encoded.items() if t == topic)
    again = land(spark, config)
    return KafkaLake(case, output, config, kinds, head, tail, full, ranges, again)


@pytest.fixture(scope="module", params=CASES, ids=lambda case: case.name)
def lake(request, spark, tmp_path_factory, kafka_broker, kcat, schema_registry) -> KafkaLake:
    case = request.param
    directory = tmp_path_factory.mktemp(f"kafka-{case.name}")
    return build(spark, directory, case, kafka_broker, kcat, schema_registry)


def kcat_lines(paths: list[Path]) -> list[dict]:
    """kcat's lines as JSON (its raw non-UTF-8 bytes carried as surrogate escapes)."""
    return [
        json.loads(line.decode("utf-8", "surrogateescape"))
        for path in paths
        for line in path.read_bytes().splitlines()
    ]


def test_kcat_exports_read_back_as_the_records_produced(lake):
    """kcat's own output, read by the export reader: the generator's bytes exactly, in binary
    protocols too (kcat writes bytes that are not UTF-8 raw, not escaped)."""
    produced = lake.produced
    read = [record for _, record in exports.read_exports(lake.full)]
    assert sorted((r.topic, r.partition, r.offset) for r in read) == sorted(produced)
    for record in read:
        sent = produced[(record.topic, record.partition, record.offset)]
        assert (record.key, record.value) == (sent.key, sent.value), record
        assert list(record.headers) == headers_of(sent)
    raw = b"".join(path.read_bytes() for path in lake.full)
    not_text = 0
    for line in raw.splitlines():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            not_text += 1
    # Every record carries a binary header; the binary protocols' values are binary too.
    assert not_text == len(produced)
    if lake.case.protocol in ("open-protocol", "craft", "avro"):
        binary = [r for r in produced.values() if r.value and not _is_utf8(r.value)]
        assert binary, "the protocol's values should not all be text"


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_land_adds_each_offset_once_from_overlapping_ranges_and_whole_topics(lake):
    total = len(lake.produced)
    head, tail = (len(kcat_lines([path])) for path in (lake.head, lake.tail))
    overlap = head + tail - total
    assert 0 < overlap <= OVERLAP * len(lake.output.encoded)
    first = lake.ranges.land
    assert (first.records_read, first.records_added) == (head + tail, total)
    assert (first.duplicates, first.conflicts, first.errors, first.offset_gaps) == (
        overlap,
        0,
        0,
        0,
    )
    again = lake.again
    assert (again.records_read, again.records_added, again.duplicates) == (total, 0, total)
    assert (again.conflicts, again.errors, again.offset_gaps) == (0, 0, 0)


def test_bronze_holds_each_offset_once_with_kcats_timestamps_and_headers(lake):
    rows = DeltaTable(str(lake.layout.bronze)).to_pyarrow_table().to_pylist()
    produced = lake.produced
    coordinates = [(r["topic"], r["partition"], r["offset"]) for r in rows]
    assert sorted(coordinates) == sorted(produced)
    exported = {(m["topic"], m["partition"], m["offset"]): m for m in kcat_lines(lake.full)}
    kinds = {
        CREATE: ("create", exports.CREATE_TIME),
        APPEND: ("logappend", exports.LOG_APPEND_TIME),
    }
    for row in rows:
        key = (row["topic"], row["partition"], row["offset"])
        sent, printed = produced[key], exported[key]
        assert (row["key"], row["value"]) == (sent.key, sent.value), key
        assert [(h["key"], h["value"]) for h in row["headers"]] == headers_of(sent), key
        tstype, type_id = kinds[lake.timestamp_types[row["topic"]]]
        assert (printed["tstype"], row["timestamp_type"]) == (tstype, type_id), key
        millis = (row["timestamp"] - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
        assert millis == printed["ts"], key
        if tstype == "create":
            assert printed["ts"] == sent.timestamp_ms, key
        else:  # the broker's clock, not the generator's (which is in 2024)
            assert printed["ts"] > sent.timestamp_ms, key


def test_decode_quarantines_nothing(lake):
    log = lakes.table_rows(lake.layout.decode_log)
    assert sum(row["records"] for row in log) == len(lake.produced)
    assert sum(row["quarantined"] for row in log) == 0
    assert not lakes.table_rows(lake.layout.quarantine)


def test_gold_equals_the_generators_tables(lake):
    workload = lake.output.workload
    (feed,) = lake.ranges.watermark.changefeeds
    assert feed.watermark == workload.resolved_ts[-1]
    lakes.assert_gold_is_expected(lake.layout, workload, feed.watermark)
