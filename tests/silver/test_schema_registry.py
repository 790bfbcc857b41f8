"""Avro schema sources: a real registry over local HTTP, a directory, a `_schemas` export."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import http.server
import json
import threading
import traceback
from collections import Counter
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ticdc_lake.errors import ConfigError, DecodeError, SchemaNotFoundError
from ticdc_lake.records import KafkaRecord
from ticdc_lake.silver.schema_registry import (
    DirectorySchemaSource,
    InMemorySchemaRegistry,
    RegistrySchemaSource,
    SchemaRegistryUnavailableError,
    SchemasTopicSource,
    subject_for,
)

ORDERS = json.dumps(
    {
        "type": "record",
        "name": "orders",
        "namespace": "default.shop",
        "fields": [{"name": "id", "type": "int"}],
    }
)
ITEMS = json.dumps(
    {
        "type": "record",
        "name": "items",
        "namespace": "default.shop",
        "fields": [{"name": "sku", "type": "string"}],
    }
)
PROTO = 'syntax = "proto3"; message M { int32 a = 1; }'
USER, PASSWORD = "cdc", "s3cret:with:colons"


class _Registry(http.server.BaseHTTPRequestHandler):
    """`GET /schemas/ids/{id}` of a Confluent registry, behind basic auth."""

    schemas: dict[int, dict] = {}  # noqa: RUF012 - set per server below
    subjects: dict[int, list] = {}  # noqa: RUF012
    hits: Counter

    def do_GET(self):
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            return self._reply(401, {"error_code": 40101, "message": "Unauthorized"})
        prefix = "/schemas/ids/"
        if not self.path.startswith(prefix):
            return self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
        path, _, query = self.path[len(prefix) :].partition("?")
        if path.endswith("/subjects"):  # GET /schemas/ids/{id}/subjects
            subjects = self.subjects.get(int(path.split("/")[0]))
            if subjects is None or "deleted=true" not in query:
                return self._reply(404, {"error_code": 40403, "message": "Schema not found"})
            return self._reply(200, subjects)
        schema_id = int(path)
        self.hits[schema_id] += 1
        if schema_id == 500:
            return self._reply(500, {"error_code": 50001, "message": "Error in the backend"})
        if schema_id not in self.schemas:
            return self._reply(404, {"error_code": 40403, "message": "Schema not found"})
        return self._reply(200, self.schemas[schema_id])

    def _reply(self, status: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def registry_url():
    handler = type(
        "Handler",
        (_Registry,),
        {
            "schemas": {7: {"schema": ORDERS}, 8: {"schema": PROTO, "schemaType": "PROTOBUF"}},
            "subjects": {7: ["shop_orders-value", "orders-value"]},
            "hits": Counter(),
        },
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", handler.hits
    server.shutdown()
    server.server_close()


def _rest(url: str, password: str = PASSWORD) -> RegistrySchemaSource:
    return RegistrySchemaSource.from_url(
        url, username=USER, password=password, conf={"max.retries": 0, "timeout": 5}
    )


def test_registry_serves_schemas_by_id_with_basic_auth_and_caches(registry_url):
    url, hits = registry_url
    source = _rest(url)
    schema = source.get_schema(7)
    assert schema.schema_id == 7
    assert schema.text == ORDERS
    assert schema.definition["name"] == "orders"
    assert source.get_schema(7) is schema
    assert hits[7] == 1


def test_registry_unknown_id_names_the_id_and_the_registry(registry_url):
    url, _ = registry_url
    with pytest.raises(SchemaNotFoundError, match=rf"schema id 99 is not in schema registry {url}"):
        _rest(url).get_schema(99)


def test_registry_wrong_password_is_a_config_error_not_a_record_fault(registry_url):
    url, _ = registry_url
    with pytest.raises(ConfigError, match=r"refused the credentials.*401"):
        _rest(url, password="wrong").get_schema(7)


def test_registry_server_error_is_unavailability(registry_url):
    url, _ = registry_url
    with pytest.raises(SchemaRegistryUnavailableError, match="schema id 500"):
        _rest(url).get_schema(500)


def test_registry_that_cannot_be_reached_is_unavailability():
    source = _rest("http://127.0.0.1:1")
    with pytest.raises(SchemaRegistryUnavailableError, match="could not be reached"):
        source.get_schema(1)


def test_registry_refuses_non_avro_schemas(registry_url):
    url, _ = registry_url
    with pytest.raises(DecodeError, match="PROTOBUF schema, not Avro"):
        _rest(url).get_schema(8)


def test_registry_accepts_a_client_passed_in():
    class FakeSchema:
        schema_str, schema_type, references = ITEMS, "AVRO", []

    class FakeClient:
        def get_schema(self, schema_id):
            assert schema_id == 3
            return FakeSchema()

    source = RegistrySchemaSource(FakeClient())
    assert source.get_schema(3).definition["name"] == "items"
    assert "FakeClient" in source.description


def test_registry_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="ftp://x"):
        RegistrySchemaSource.from_url("ftp://x")


def _with_credentials(url: str, password: str = PASSWORD) -> str:
    return url.replace("http://", f"http://{USER}:{quote(password, safe=':')}@")


def _everything_said(error: BaseException) -> str:
    """What a person could see of an error: its text, its traceback and chained causes."""
    return "".join(traceback.format_exception(error))


@pytest.mark.parametrize("schema_id", [7, 99, 500, "wrong-password", "unreachable"])
def test_credentials_in_the_url_are_used_and_never_shown(registry_url, schema_id, caplog):
    url, _ = registry_url
    password = "wrong-" + PASSWORD if schema_id == "wrong-password" else PASSWORD
    if schema_id == "unreachable":
        url = "http://127.0.0.1:1"
    source = RegistrySchemaSource.from_url(
        _with_credentials(url, password), conf={"max.retries": 0, "timeout": 5}
    )
    assert source.description == f"schema registry {url}"
    with caplog.at_level("DEBUG"):
        if schema_id == 7:
            assert source.get_schema(7).definition["name"] == "orders"  # basic auth was sent
            said = ""
        else:
            with pytest.raises((DecodeError, ConfigError, SchemaRegistryUnavailableError)) as e:
                source.get_schema(500 if schema_id in ("wrong-password", "unreachable") else 99)
            said = _everything_said(e.value)
    said += "".join(record.getMessage() for record in caplog.records) + repr(source)
    assert password not in said and "s3cret" not in said


def test_credentials_given_twice_are_refused_without_showing_them(registry_url):
    url, _ = registry_url
    with pytest.raises(ConfigError, match="both in the URL and given as username") as caught:
        RegistrySchemaSource.from_url(_with_credentials(url), username=USER, password=PASSWORD)
    assert "s3cret" not in _everything_said(caught.value)
    assert "cdc:***@" in str(caught.value)


class _EchoingRegistry(http.server.BaseHTTPRequestHandler):
    """A registry whose errors echo the request's Authorization header, as some proxies and
    debug builds do: /401/... refuses the credentials, anything else fails with 500."""

    def do_GET(self):
        status = 401 if self.path.startswith("/401/") else 500
        echo = f"request {self.path} with Authorization: {self.headers.get('Authorization')}"
        data = json.dumps({"error_code": status * 100, "message": echo}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def echoing_registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EchoingRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("status", [500, 401])
def test_a_registry_echoing_the_authorization_header_never_shows_the_credentials(
    echoing_registry, tmp_path, capsys, status
):
    """The echoed ``Basic <base64 of user:password>`` went to the job's output, its result file
    and the summary task's log and XCom. A job whose stage asks the registry, as decode does."""
    from ticdc_lake.app.pipeline import job_main, job_parser
    from ticdc_lake.app.run_results import summarize_run

    url = f"{echoing_registry}/401" if status == 401 else echoing_registry
    source = _rest(url)
    config = tmp_path / "pipeline.yaml"
    config.write_text("topics: {t: {protocol: craft, partitions: 1}}\n")
    args = job_parser("decode").parse_args(
        ["--config", str(config), "--result-file", str(tmp_path / "run" / "decode.json")]
    )
    code = job_main("decode", args, lambda name: None, lambda spark, cfg: source.get_schema(7))
    assert code == (2 if status == 401 else 1)
    out, err = capsys.readouterr()
    said = [out, err]
    if status == 500:  # a config error (refused credentials) stops before any result file
        summary = summarize_run(tmp_path / "run", ("decode",))
        said += [(tmp_path / "run" / "decode.json").read_text(), json.dumps(summary.to_dict())]
        said += summary.lines()
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    everything = "\n".join(said)
    assert "with Authorization: Basic ***" in everything, everything
    assert token not in everything and token[:12] not in everything and "s3cret" not in everything


def test_directory_reads_avsc_and_registry_responses(tmp_path):
    (tmp_path / "1.avsc").write_text(ORDERS)
    (tmp_path / "2.json").write_text(json.dumps({"schema": ITEMS, "id": 2}))
    (tmp_path / "3.json").write_text(ORDERS)  # a bare schema object
    (tmp_path / "4.json").write_text(json.dumps({"schema": PROTO, "schemaType": "PROTOBUF"}))
    source = DirectorySchemaSource(tmp_path)
    assert source.get_schema(1).text == ORDERS
    assert source.get_schema(2).text == ITEMS
    assert source.get_schema(3).definition["name"] == "orders"
    with pytest.raises(DecodeError, match="PROTOBUF schema, not Avro"):
        source.get_schema(4)
    with pytest.raises(
        SchemaNotFoundError, match=f"schema id 5 is not in schema directory {tmp_path}"
    ):
        source.get_schema(5)


def test_directory_finds_schemas_added_later_and_refuses_missing_directories(tmp_path):
    source = DirectorySchemaSource(tmp_path)
    with pytest.raises(SchemaNotFoundError):
        source.get_schema(1)
    (tmp_path / "1.avsc").write_text(ORDERS)
    assert source.get_schema(1).text == ORDERS
    with pytest.raises(ConfigError, match="does not exist"):
        DirectorySchemaSource(tmp_path / "missing")


def test_directory_schema_that_is_not_json_is_a_decode_error(tmp_path):
    (tmp_path / "1.avsc").write_text("{not json")
    with pytest.raises(DecodeError, match=r"schema id 1 from schema directory .* is not JSON"):
        DirectorySchemaSource(tmp_path).get_schema(1)


def test_in_memory_registry_assigns_ids_as_a_registry_does():
    registry = InMemorySchemaRegistry()
    assert registry.register(subject_for("cdc.shop.orders", "key"), ORDERS) == 1
    assert registry.register(subject_for("cdc.shop.orders", "value"), ITEMS) == 2
    # the same text again, under the same or another subject: the same id
    assert registry.register("cdc_shop_orders-value", ITEMS) == 2
    assert registry.register("other-value", ITEMS) == 2
    assert registry.subjects == {
        "cdc_shop_orders-key": [1],
        "cdc_shop_orders-value": [2],
        "other-value": [2],
    }
    # a new schema under an existing subject is its next version
    assert registry.register("cdc_shop_orders-value", ORDERS) == 1
    assert registry.subjects["cdc_shop_orders-value"] == [2, 1]
    assert registry.get_schema(2).text == ITEMS


def test_subject_names_follow_topic_name_strategy():
    assert subject_for("ticdc.test.t", "key") == "ticdc_test_t-key"
    assert subject_for("plain", "value") == "plain-value"
    with pytest.raises(ValueError, match="key or the value"):
        subject_for("t", "header")


def _registry_with_two_schemas() -> InMemorySchemaRegistry:
    registry = InMemorySchemaRegistry()
    registry.register("t-key", ORDERS)
    registry.register("t-value", ITEMS)
    return registry


def test_in_memory_registry_writes_a_directory_the_directory_source_reads(tmp_path):
    registry = _registry_with_two_schemas()
    source = DirectorySchemaSource(registry.write_directory(tmp_path / "schemas"))
    assert sorted(p.name for p in (tmp_path / "schemas").iterdir()) == ["1.avsc", "2.avsc"]
    assert [source.get_schema(i).text for i in (1, 2)] == [ORDERS, ITEMS]


def test_schemas_topic_records_round_trip():
    records = _registry_with_two_schemas().schemas_records()
    assert orjson.loads(records[0].key) == {
        "keytype": "SCHEMA",
        "subject": "t-key",
        "version": 1,
        "magic": 1,
    }
    assert orjson.loads(records[1].value) == {
        "subject": "t-value",
        "version": 1,
        "id": 2,
        "schema": ITEMS,
        "deleted": False,
    }
    source = SchemasTopicSource(records)
    assert source.get_schema(1).text == ORDERS
    assert source.versions == {("t-key", 1): 1, ("t-value", 1): 2}
    assert "2 records" in source.description


def _record(offset: int, key: dict | None, value: dict | None) -> KafkaRecord:
    return KafkaRecord(
        "_schemas",
        0,
        offset,
        None if key is None else orjson.dumps(key),
        None if value is None else orjson.dumps(value),
    )


def test_schemas_topic_skips_other_key_types_and_keeps_deleted_ids():
    key = {"keytype": "SCHEMA", "subject": "t-value", "version": 1, "magic": 1}
    records = [
        _record(0, {"keytype": "NOOP", "magic": 0}, None),
        _record(
            1, {"keytype": "CONFIG", "subject": None, "magic": 0}, {"compatibilityLevel": "NONE"}
        ),
        _record(2, key, {"subject": "t-value", "version": 1, "id": 4, "schema": ORDERS}),
        _record(
            3, key, {"subject": "t-value", "version": 1, "id": 4, "schema": ORDERS, "deleted": True}
        ),
        _record(4, key, None),  # the tombstone after a hard delete
        _record(5, None, None),
        _record(
            6,
            {**key, "version": 2},
            {
                "subject": "t-value",
                "version": 2,
                "id": 9,
                "schema": PROTO,
                "schemaType": "PROTOBUF",
            },
        ),
    ]
    source = SchemasTopicSource(records)
    assert source.versions == {}
    assert source.get_schema(4).text == ORDERS  # records written before the delete still decode
    with pytest.raises(SchemaNotFoundError, match="schema id 9 is not in _schemas export"):
        source.get_schema(9)


def test_schemas_topic_refuses_malformed_and_conflicting_registrations():
    key = {"keytype": "SCHEMA", "subject": "t-value", "version": 1, "magic": 1}
    with pytest.raises(ConfigError, match="offset 0 is not a schema registration"):
        SchemasTopicSource([_record(0, key, {"subject": "t-value", "version": 1})])
    with pytest.raises(ConfigError, match="must be the schema JSON as a string"):
        SchemasTopicSource([_record(0, key, {"id": 1, "schema": {"type": "int"}})])
    with pytest.raises(ConfigError, match="offset 1 registers id 1 again with a different schema"):
        SchemasTopicSource(
            [
                _record(0, key, {"id": 1, "schema": ORDERS}),
                _record(1, key, {"id": 1, "schema": ITEMS}),
            ]
        )


def test_schemas_topic_reads_export_files(tmp_path):
    records = _registry_with_two_schemas().schemas_records()
    b64 = tmp_path / "schemas.jsonl.gz"
    with gzip.open(b64, "wt") as out:
        for r in records:
            row = {"topic": r.topic, "partition": 0, "offset": r.offset, "timestamp": 0}
            row |= {
                "key_b64": base64.b64encode(r.key).decode(),
                "value_b64": base64.b64encode(r.value).decode(),
            }
            out.write(json.dumps(row) + "\n")
    kcat = tmp_path / "schemas.kcat.jsonl"
    kcat.write_text(
        "".join(
            json.dumps(
                {
                    "topic": r.topic,
                    "partition": 0,
                    "offset": r.offset,
                    "key": r.key.decode(),
                    "payload": r.value.decode(),
                }
            )
            + "\n"
            for r in records
        )
    )
    parquet = tmp_path / "schemas.parquet"
    pq.write_table(
        pa.table(
            {
                "key": [r.key for r in records],
                "value": [r.value for r in records],
                "topic": [r.topic for r in records],
                "partition": pa.array([0, 0], pa.int32()),
                "offset": [r.offset for r in records],
            }
        ),
        parquet,
    )
    for path in (b64, kcat, parquet):
        source = SchemasTopicSource.from_file(path)
        assert [source.get_schema(i).text for i in (1, 2)] == [ORDERS, ITEMS], path
        assert str(path) in source.description
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"key_b64": "***"}\n')
    with pytest.raises(ConfigError, match="cannot be read: unreadable export record"):
        SchemasTopicSource.from_file(broken)
    with pytest.raises(ConfigError, match="does not exist"):
        SchemasTopicSource.from_file(tmp_path / "missing.jsonl")


# --- subjects: where TiCDC up to v6.0 named a record's schema -------------------------------------


def test_registry_gives_the_subjects_of_an_id_and_none_it_does_not_know(registry_url):
    url, _ = registry_url
    source = _rest(url)
    assert source.subjects_of(7) == ("orders-value", "shop_orders-value")
    assert source.subjects_of(99) == ()
    with pytest.raises(SchemaRegistryUnavailableError, match="could not be reached"):
        _rest("http://127.0.0.1:1").subjects_of(7)


def test_a_client_without_the_subjects_call_knows_no_subjects():
    assert RegistrySchemaSource(object()).subjects_of(3) == ()


def test_directory_knows_the_subject_of_a_subject_version_response(tmp_path):
    response = {"subject": "shop_orders-value", "version": 1, "id": 4, "schema": ORDERS}
    (tmp_path / "4.json").write_text(json.dumps(response))
    (tmp_path / "5.avsc").write_text(ITEMS)
    source = DirectorySchemaSource(tmp_path)
    assert source.get_schema(4).text == ORDERS
    assert (source.subjects_of(4), source.subjects_of(5), source.subjects_of(6)) == (
        ("shop_orders-value",),
        (),
        (),
    )


def test_in_memory_and_schemas_topic_sources_know_every_subject_of_an_id():
    registry = InMemorySchemaRegistry()
    registry.register("shop_orders-value", ORDERS)
    registry.register("shop_2_orders-value", ORDERS)
    registry.register("shop_items-value", ITEMS)
    assert registry.subjects_of(1) == ("shop_2_orders-value", "shop_orders-value")
    records = registry.schemas_records()
    deleted = json.loads(records[1].value) | {"deleted": True}
    records[1] = dataclasses.replace(records[1], value=json.dumps(deleted).encode())
    source = SchemasTopicSource(records)
    # A soft-deleted version still names the subject its records were written under.
    assert source.subjects_of(1) == ("shop_2_orders-value", "shop_orders-value")
    assert source.subjects_of(2) == ("shop_items-value",)
