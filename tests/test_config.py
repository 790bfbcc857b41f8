"""The pipeline config loader (ticdc_lake.config): what loads, what each mistake says, and the
decoder settings built from a topic's section."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
import textwrap
from pathlib import Path

import pytest
import yaml
from ticdc_lake.bronze import exports
from ticdc_lake.config import ChangefeedConfig, load_config
from ticdc_lake.errors import ConfigError
from ticdc_lake.limits import Limits
from ticdc_lake.quality.settings import CHECKS, QualitySettings, default_policies
from ticdc_lake.sample.workload.output import GenerateOptions, write_generated
from ticdc_lake.silver.claimcheck import ClaimCheckStore
from ticdc_lake.silver.codecs import codec_settings
from ticdc_lake.silver.schema_registry import (
    DirectorySchemaSource,
    InMemorySchemaRegistry,
    RegistrySchemaSource,
    SchemasTopicSource,
)

MINIMAL = {"topics": {"orders": {"protocol": "open-protocol", "partitions": 3}}}


def write_config(directory: Path, document: dict | str, name: str = "pipeline.yaml") -> Path:
    path = directory / name
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    path.write_text(text)
    return path


def with_topic(**settings) -> dict:
    return {"topics": {"orders": {"protocol": "open-protocol", "partitions": 3, **settings}}}


def settings_of(config, topic: str, shared: dict | None = None):
    """The codec settings the decoders get for a configured topic."""
    return codec_settings(config.topic(topic), config.limits, shared)


def assert_config_error(path: Path, *fragments: str) -> ConfigError:
    """load_config(path) fails with a ConfigError naming the file and every fragment."""
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path.resolve()) in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return caught.value


# --- what loads -------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["open-protocol", "avro"])
def test_the_generators_pipeline_yaml_loads(tmp_path, protocol):
    generated = write_generated(
        tmp_path, GenerateOptions(protocol=protocol, transactions=5, partitions=2)
    )
    config = load_config(generated.config_path)

    topics = generated.routing.topics
    assert sorted(config.topics) == sorted(topics)
    assert config.source == generated.config_path.resolve()
    assert config.lake == tmp_path.resolve() / "lake"
    assert config.reports == tmp_path.resolve() / "reports"
    assert config.inputs == (str(tmp_path.resolve() / "exports" / "*"),)
    assert config.time_zone == "UTC"
    for topic in topics:
        settings = config.topic(topic)
        assert (settings.protocol, settings.partitions) == (protocol, 2)
        assert settings.claim_check_roots == ()
        # The changefeed the generator wrote, not a topic's implicit one.
        assert config.changefeed_of(topic).name == f"sample-{protocol}"
    changefeed = config.changefeeds[f"sample-{protocol}"]
    assert changefeed.watermarks is (protocol != "avro")
    if protocol == "avro":
        # Both sources are written; a schema directory is preferred over the _schemas export.
        assert settings.schema_dir == tmp_path.resolve() / "schemas"
        assert settings.schemas_topic == tmp_path.resolve() / "registry" / "_schemas.jsonl"
        assert settings.schema_dir.is_dir() and settings.schemas_topic.is_file()
        assert isinstance(settings_of(config, topics[0]).schema_source, DirectorySchemaSource)
    else:
        assert settings_of(config, topics[0]).schema_source is None


def test_defaults_and_relative_paths(tmp_path):
    path = write_config(
        tmp_path,
        {
            "lake": "data/lake",
            "reports": "out/reports",
            "inputs": ["landing/*.parquet", "/abs/*.jsonl"],
            "time-zone": "Asia/Shanghai",
            "topics": {
                "orders": {"protocol": "canal-json", "partitions": 2, "time-zone": "UTC"},
                "users": {"protocol": "avro", "partitions": 1, "schema-dir": "schemas"},
            },
        },
    )
    config = load_config(path)
    base = tmp_path.resolve()
    assert config.lake == base / "data" / "lake"
    assert config.reports == base / "out" / "reports"
    # pathlib: an absolute pattern stays absolute.
    assert config.inputs == (str(base / "landing" / "*.parquet"), "/abs/*.jsonl")
    orders, users = config.topic("orders"), config.topic("users")
    assert orders.time_zone == "UTC" and users.time_zone == "Asia/Shanghai"
    assert (orders.compression, orders.enable_tidb_extension) == ("none", True)
    # Topics in no changefeed are their own; Avro carries no watermarks.
    assert config.changefeeds["orders"] == ChangefeedConfig("orders", ("orders",), True)
    assert config.changefeeds["users"] == ChangefeedConfig("users", ("users",), False)


def test_minimal_config(tmp_path):
    config = load_config(write_config(tmp_path, MINIMAL))
    assert config.reports == tmp_path.resolve() / "reports"
    assert config.inputs == (str(tmp_path.resolve() / "exports" / "*"),)
    assert config.time_zone == "UTC"
    assert config.changefeed_of("orders").topics == ("orders",)


def test_changefeed_with_cutoff(tmp_path):
    document = {
        "topics": {
            "a": {"protocol": "avro", "partitions": 1, "schema-dir": "."},
            "b": {"protocol": "avro", "partitions": 2, "schema-dir": "."},
        },
        "changefeeds": {"cf": {"topics": ["a", "b"], "watermarks": False, "cutoff-ts": 42}},
    }
    config = load_config(write_config(tmp_path, document))
    assert config.changefeeds == {"cf": ChangefeedConfig("cf", ("a", "b"), False, 42)}
    assert config.changefeed_of("b").cutoff_ts == 42


# --- every mistake names the file and the key --------------------------------------------------


@pytest.mark.parametrize(
    ("document", "fragments"),
    [
        ({**MINIMAL, "lakes": "x"}, ["unknown key(s) lakes"]),
        (with_topic(partition=3), ["topics.orders", "unknown key(s) partition"]),
        (
            with_topic(**{"schema-registry": {"url": "http://r", "token": "t"}}),
            ["topics.orders.schema-registry", "unknown key(s) token"],
        ),
        (
            {**MINIMAL, "changefeeds": {"cf": {"topics": ["orders"], "cutoff": 1}}},
            ["changefeeds.cf", "unknown key(s) cutoff"],
        ),
    ],
    ids=["top-level", "topic", "schema-registry", "changefeed"],
)
def test_unknown_keys(tmp_path, document, fragments):
    error = assert_config_error(write_config(tmp_path, document), *fragments)
    assert "expected some of" in str(error)  # and says what is allowed


@pytest.mark.parametrize("protocol", ["open_protocol", "debezium", None, 3])
def test_bad_protocol(tmp_path, protocol):
    document = {"topics": {"orders": {"partitions": 1}}}
    if protocol is not None:
        document["topics"]["orders"]["protocol"] = protocol
    found = "required" if protocol is None else "expected one of open-protocol, craft, canal-json"
    assert_config_error(write_config(tmp_path, document), f"topics.orders.protocol: {found}")


@pytest.mark.parametrize("partitions", [0, -1, "3", 1.5, True, None])
def test_bad_partitions(tmp_path, partitions):
    document = {"topics": {"orders": {"protocol": "craft"}}}
    if partitions is not None:
        document["topics"]["orders"]["partitions"] = partitions
    found = "required" if partitions is None else "expected a whole number >= 1"
    assert_config_error(write_config(tmp_path, document), f"topics.orders.partitions: {found}")


def test_bad_time_zone_at_top_level(tmp_path):
    path = write_config(tmp_path, {**MINIMAL, "time-zone": "Mars/Olympus_Mons"})
    assert_config_error(
        path, "time-zone: expected an IANA time zone name", "got 'Mars/Olympus_Mons'"
    )


def test_bad_time_zone_of_a_topic(tmp_path):
    path = write_config(tmp_path, with_topic(**{"time-zone": "CST+8"}))
    assert_config_error(path, "topics.orders.time-zone: expected an IANA", "got 'CST+8'")


def test_changefeed_naming_an_unknown_topic(tmp_path):
    document = {**MINIMAL, "changefeeds": {"cf": {"topics": ["orders", "ordres"]}}}
    assert_config_error(write_config(tmp_path, document), "changefeeds.cf", "unknown: ['ordres']")


AVRO = {"protocol": "avro", "partitions": 1, "schema-dir": "."}


@pytest.mark.parametrize(
    ("changefeeds", "fragments"),
    [
        (
            {"cf": {"topics": ["a"]}},
            ["topic b must belong to exactly one changefeed, it is in none"],
        ),
        (
            {"one": {"topics": ["a", "b"]}, "two": {"topics": ["b"]}},
            ["topic b must belong to exactly one changefeed, it is in one, two"],
        ),
        ({"cf": {"topics": ["a", "b", "a"]}}, ["changefeeds.cf", "lists a more than once"]),
        ({}, ["changefeeds: none given (leave the key out"]),
        (["a", "b"], ["changefeeds: expected a mapping"]),
        # One string is a list of one: a topic named "a,b", which is not configured.
        ({"cf": {"topics": "a,b"}}, ["changefeeds.cf", "unknown: ['a,b']"]),
    ],
    ids=["in-none", "in-two", "listed-twice", "empty", "list", "topics-text"],
)
def test_every_topic_in_exactly_one_changefeed(tmp_path, changefeeds, fragments):
    document = {"topics": {"a": AVRO, "b": AVRO}, "changefeeds": changefeeds}
    assert_config_error(write_config(tmp_path, document), *fragments)


def test_without_changefeeds_each_topic_is_its_own(tmp_path):
    topics = {
        "o": {"protocol": "open-protocol", "partitions": 1},
        "c": {"protocol": "canal-json", "partitions": 1},
        "c-plain": {"protocol": "canal-json", "partitions": 1, "enable-tidb-extension": False},
        "a": AVRO,
    }
    config = load_config(write_config(tmp_path, {"topics": topics}))
    # With watermarks where the protocol sends them.
    assert config.changefeeds == {
        "o": ChangefeedConfig("o", ("o",), True),
        "c": ChangefeedConfig("c", ("c",), True),
        "c-plain": ChangefeedConfig("c-plain", ("c-plain",), False),
        "a": ChangefeedConfig("a", ("a",), False),
    }


def test_watermarks_and_cutoff(tmp_path):
    def feed(**settings) -> dict:
        return {"topics": {"a": AVRO}, "changefeeds": {"cf": {"topics": ["a"], **settings}}}

    # Without watermarks and without a cut-off: allowed, gold is marked inconsistent.
    unmarked = load_config(write_config(tmp_path, feed(watermarks=False)))
    assert unmarked.changefeeds["cf"] == ChangefeedConfig("cf", ("a",), False, None)
    for settings in ({"cutoff-ts": 5}, {"watermarks": True, "cutoff-ts": 5}):
        assert_config_error(
            write_config(tmp_path, feed(**settings)),
            "changefeeds.cf",
            "cutoff-ts is for changefeeds without watermarks",
        )
    assert_config_error(
        write_config(tmp_path, feed(watermarks="no")),
        "changefeeds.cf.watermarks: expected true or false",
    )
    assert_config_error(
        write_config(tmp_path, feed(watermarks=False, **{"cutoff-ts": True})),
        "changefeeds.cf.cutoff-ts: expected a TSO",
    )


def test_extension_flag_must_be_a_boolean(tmp_path):
    path = write_config(tmp_path, with_topic(**{"enable-tidb-extension": "false"}))
    assert_config_error(path, "topics.orders.enable-tidb-extension: expected true or false")


def test_changefeed_without_topics(tmp_path):
    document = {**MINIMAL, "changefeeds": {"cf": {"watermarks": True}}}
    assert_config_error(write_config(tmp_path, document), "changefeeds.cf.topics: required")


@pytest.mark.parametrize(
    ("document", "fragments"),
    [
        (with_topic(compression="gzip"), ["topics.orders.compression: expected one of"]),
        (
            {**MINIMAL, "changefeeds": {"cf": {"topics": ["orders"], "cutoff-ts": -5}}},
            ["changefeeds.cf.cutoff-ts: expected a TSO"],
        ),
        (
            with_topic(**{"schema-registry": {"username": "u"}}),
            ["topics.orders.schema-registry.url: required"],
        ),
        ({**MINIMAL, "version": 2}, ["version: expected 1"]),
        ({"topics": {}}, ["no topics configured"]),
        ({"topics": ["orders"]}, ["topics: expected a mapping"]),
        (with_topic(options=["a"]), ["topics.orders.options: expected a mapping"]),
    ],
    ids=["compression", "cutoff", "registry-url", "version", "no-topics", "topics-list", "options"],
)
def test_other_mistakes(tmp_path, document, fragments):
    assert_config_error(write_config(tmp_path, document), *fragments)


def test_unreadable_files(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"cannot read pipeline config .*nope\.yaml"):
        load_config(missing)
    broken = write_config(tmp_path, "topics: [unclosed\n")
    assert_config_error(broken, "is not valid YAML")
    scalar = write_config(tmp_path, "just text\n", name="scalar.yaml")
    assert_config_error(scalar, "expected a mapping, got 'just text'")


def test_unknown_topic_and_changefeed_lookups(tmp_path):
    config = load_config(write_config(tmp_path, MINIMAL))
    with pytest.raises(ConfigError, match=r"topic 'users' is not configured; known topics: orders"):
        config.topic("users")
    with pytest.raises(ConfigError, match="topic 'users' belongs to no changefeed"):
        config.changefeed_of("users")


def test_avro_topic_without_a_schema_source(tmp_path):
    path = write_config(tmp_path, {"topics": {"users": {"protocol": "avro", "partitions": 1}}})
    assert_config_error(
        path, "topics.users", "avro topic needs a schema source", "schema-registry, schema-dir"
    )


def test_schema_registry_password_env_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("LAKE_TEST_REGISTRY_PASSWORD", raising=False)
    registry = {"url": "http://registry:8081", "username": "lake"}
    registry["password-env"] = "LAKE_TEST_REGISTRY_PASSWORD"
    path = write_config(
        tmp_path,
        {"topics": {"users": {"protocol": "avro", "partitions": 1, "schema-registry": registry}}},
    )
    config = load_config(path)
    with pytest.raises(ConfigError) as caught:
        settings_of(config, "users")
    message = str(caught.value)
    assert str(path.resolve()) in message and "topic users" in message
    assert "LAKE_TEST_REGISTRY_PASSWORD is not set (schema-registry password-env" in message


# --- codec settings (ticdc_lake.silver.codecs) ----------------------------------------------------


def test_codec_settings_of_a_json_topic(tmp_path):
    path = write_config(
        tmp_path,
        with_topic(
            protocol="canal-json",
            compression="lz4",
            **{
                "enable-tidb-extension": False,
                "claim-check-roots": ["claims", "s3://bucket/claims/", "/abs/claims"],
                "options": {"b": 2, "a": 1},
            },
        ),
    )
    settings = settings_of(load_config(path), "orders")
    assert settings.compression == "lz4"
    assert settings.enable_tidb_extension is False
    assert settings.schema_source is None
    assert settings.options == (("a", 1), ("b", 2))
    store = settings.claim_check
    assert isinstance(store, ClaimCheckStore)
    # Relative roots are resolved against the config file's directory; URIs are kept.
    assert store.roots == [str(tmp_path.resolve() / "claims"), "s3://bucket/claims", "/abs/claims"]
    assert store.is_allowed(str(tmp_path.resolve() / "claims" / "x.json"))
    assert not store.is_allowed(str(tmp_path.resolve() / "elsewhere" / "x.json"))


def test_no_claim_check_roots_means_no_store(tmp_path):
    settings = settings_of(load_config(write_config(tmp_path, MINIMAL)), "orders")
    assert settings.claim_check is None
    assert settings.schema_source is None


def test_codec_settings_schema_directory(tmp_path):
    (tmp_path / "schemas").mkdir()
    path = write_config(
        tmp_path, {"topics": {"u": {"protocol": "avro", "partitions": 1, "schema-dir": "schemas"}}}
    )
    source = settings_of(load_config(path), "u").schema_source
    assert isinstance(source, DirectorySchemaSource)
    assert source.directory == tmp_path.resolve() / "schemas"


def test_an_avro_topic_of_ticdc_up_to_v6_0_gives_its_schema_and_column_types(tmp_path):
    (tmp_path / "schemas").mkdir()
    topic = {
        "protocol": "avro",
        "partitions": 1,
        "schema-dir": "schemas",
        "schema": "shop",
        "column-types": {"orders.amount": "decimal(12,2)", "orders.placed_on": "date"},
    }
    path = write_config(tmp_path, {"topics": {"u": topic}})
    settings = settings_of(load_config(path), "u")
    assert settings.upstream_schema == "shop"
    assert settings.column_types == (
        ("orders.amount", "decimal(12,2)"),
        ("orders.placed_on", "date"),
    )


def test_schema_and_column_types_mistakes_name_their_lines(tmp_path):
    text = textwrap.dedent(
        """\
        topics:
          u:
            protocol: avro
            partitions: 1
            schema-dir: schemas
            schema: ""
            column-types:
              orders: date
              orders.amount: decimel(12,2)
              orders.name: varchar(10)
          v:
            protocol: craft
            partitions: 1
            column-types: {orders.amount: decimal}
        """
    )
    error = assert_config_error(write_config(tmp_path, text))
    lines = str(error).splitlines()
    assert len(lines) == 5, lines
    assert "line 6: topics.u.schema: expected a schema name, got ''" in lines[0]
    assert "line 8: topics.u.column-types.orders: expected <table>.<column>" in lines[1]
    assert "line 9: topics.u.column-types.orders.amount: expected a column type" in lines[2]
    assert "got 'decimel(12,2)'" in lines[2] and "got 'varchar(10)'" in lines[3]
    assert "line 14: topics.v: column-types is for avro topics" in lines[4]


def test_codec_settings_missing_schema_directory(tmp_path):
    path = write_config(
        tmp_path, {"topics": {"u": {"protocol": "avro", "partitions": 1, "schema-dir": "gone"}}}
    )
    with pytest.raises(ConfigError, match=r"schema directory .*gone does not exist"):
        settings_of(load_config(path), "u")


def test_codec_settings_schemas_topic_export(tmp_path):
    registry = InMemorySchemaRegistry()
    schema = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]}
    schema_id = registry.register("users-value", json.dumps(schema))
    exports.write_export(tmp_path / "_schemas.jsonl", registry.schemas_records(), "jsonl")
    path = write_config(
        tmp_path,
        {"topics": {"u": {"protocol": "avro", "partitions": 1, "schemas-topic": "_schemas.jsonl"}}},
    )
    source = settings_of(load_config(path), "u").schema_source
    assert isinstance(source, SchemasTopicSource)
    assert source.versions == {("users-value", 1): schema_id}


def test_codec_settings_schema_registry_with_password(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKE_TEST_REGISTRY_PASSWORD", "s3cret")
    registry = {"url": "http://registry.invalid:8081", "username": "lake"}
    registry["password-env"] = "LAKE_TEST_REGISTRY_PASSWORD"
    document = {
        "topics": {
            # The registry wins over a directory given as well.
            name: {
                "protocol": "avro",
                "partitions": 1,
                "schema-registry": registry,
                "schema-dir": ".",
            }
            for name in ("a", "b")
        }
    }
    config = load_config(write_config(tmp_path, document))
    shared = {}
    source = settings_of(config, "a", shared).schema_source
    assert isinstance(source, RegistrySchemaSource)
    assert "http://registry.invalid:8081" in source.description
    # Built without contacting the registry, once for every topic that shares it.
    assert settings_of(config, "b", shared).schema_source is source
    # The password from the environment reached the client (confluent-kafka's REST client).
    assert tuple(source.client._rest_client.auth) == ("lake", "s3cret")


def test_non_avro_topics_get_no_schema_source_even_if_configured(tmp_path):
    document = textwrap.dedent(
        """\
        topics:
          orders:
            protocol: craft
            partitions: 1
            schema-dir: missing-dir
        """
    )
    settings = settings_of(load_config(write_config(tmp_path, document)), "orders")
    assert settings.schema_source is None


# --- the schema: every wrong type names the key, what was expected and the line ---------------


def assert_schema_error(path: Path, line: int, key: str, expected: str) -> str:
    """load_config(path) fails with `<file> line <line>: <key>: expected <expected>, got ...`."""
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert f"{path.resolve()} line {line}: {key}: expected {expected}" in message, message
    return message


@pytest.mark.parametrize(
    ("text", "line", "key", "expected"),
    [
        ("lake: 123\n", 1, "lake", "a path"),
        ("inputs: [123]\n", 1, "inputs.0", "a glob pattern or a kafka: mapping"),
        ("reports: [a]\n", 1, "reports", "a path"),
        ("time-zone: 8\n", 1, "time-zone", "an IANA time zone name"),
        ("version: '1'\n", 1, "version", "1"),
        ("topics:\n  orders:\n    protocol: avro\n    partitions: 1\n    schema-dir: 5\n",
         5, "topics.orders.schema-dir", "a path"),
        ("topics:\n  orders:\n    protocol: craft\n    partitions: three\n",
         4, "topics.orders.partitions", "a whole number >= 1"),
        ("topics:\n  orders:\n    protocol: craft\n    partitions: 1\n"
         "    claim-check-roots: {a: b}\n",
         5, "topics.orders.claim-check-roots", "a storage root or a list of them"),
        ("topics:\n  orders:\n    protocol: craft\n    partitions: 1\n    options: [x]\n",
         5, "topics.orders.options", "a mapping of option names to values"),
        ("topics:\n  orders:\n    protocol: avro\n    partitions: 1\n"
         "    schema-registry:\n      url: http://r\n      username: 7\n",
         7, "topics.orders.schema-registry.username", "text"),
        ("topics:\n  orders: {protocol: craft, partitions: 1}\n"
         "changefeeds:\n  cf:\n    topics: [orders]\n    watermarks: false\n    cutoff-ts: soon\n",
         7, "changefeeds.cf.cutoff-ts", "a TSO (a whole number 0 to 9223372036854775807)"),
        ("topics:\n  orders: {protocol: craft, partitions: 1}\nlimits:\n  max-nesting-depth: 0\n",
         4, "limits.max-nesting-depth", "a whole number >= 1"),
        ("topics:\n  orders: {protocol: craft, partitions: 1}\nlimits:\n"
         "  max-message-bytes: lots\n",
         4, "limits.max-message-bytes", "a size in bytes >= 1"),
        ("topics:\n  orders: {protocol: craft, partitions: 1}\nquality: [checks]\n",
         3, "quality", "a mapping"),
    ],
    ids=["lake", "inputs", "reports", "zone", "version", "schema-dir", "partitions",
         "claim-check-roots", "options", "registry-username", "cutoff", "depth", "size",
         "quality"],
)  # fmt: skip
def test_a_wrong_type_names_key_expectation_and_line(tmp_path, text, line, key, expected):
    if not text.startswith("topics"):
        text += "topics:\n  orders: {protocol: craft, partitions: 1}\n"
    message = assert_schema_error(write_config(tmp_path, text), line, key, expected)
    assert "Traceback" not in message and "pydantic" not in message


def test_the_message_shows_the_value_found(tmp_path):
    text = "topics:\n  orders:\n    protocol: craft\n    partitions: three\n"
    message = assert_schema_error(
        write_config(tmp_path, text), 4, "topics.orders.partitions", "a whole number >= 1"
    )
    assert message.endswith("got 'three'")


def test_every_mistake_is_reported_at_once(tmp_path):
    path = write_config(
        tmp_path, "lake: 1\ntopics:\n  orders:\n    protocol: craft\n    partitions: 0\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [line.split(": expected")[0] for line in str(caught.value).splitlines()] == [
        f"{path.resolve()} line 1: lake",
        f"{path.resolve()} line 5: topics.orders.partitions",
    ]


def test_an_unknown_key_is_reported_at_its_line(tmp_path):
    text = "topics:\n  orders:\n    protocol: craft\n    partitions: 1\n    partition: 3\n"
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, text))
    assert f"{(tmp_path / 'pipeline.yaml').resolve()} line 5: topics.orders: unknown key(s) " in (
        str(caught.value)
    )


@pytest.mark.parametrize(
    ("settings", "read"),
    [
        ({"inputs": "in/*.jsonl"}, lambda c, base: c.inputs == (str(base / "in/*.jsonl"),)),
        (
            {"topics": {"orders": {"protocol": "craft", "partitions": 1,
                                   "claim-check-roots": "/data/claims"}}},
            lambda c, base: c.topic("orders").claim_check_roots == ("/data/claims",),
        ),
        (
            {"changefeeds": {"cf": {"topics": "orders"}}},
            lambda c, base: c.changefeeds["cf"].topics == ("orders",),
        ),
    ],
    ids=["inputs", "claim-check-roots", "changefeed-topics"],
)  # fmt: skip
def test_a_single_string_is_a_list_of_one(tmp_path, settings, read):
    config = load_config(write_config(tmp_path, {**MINIMAL, **settings}))
    assert read(config, tmp_path.resolve())


def test_limits_section(tmp_path):
    document = {
        **MINIMAL,
        "limits": {"max-message-bytes": "20MiB", "max-nesting-depth": 32,
                   "max-claim-check-bytes": 1_000_000},
    }  # fmt: skip
    limits = load_config(write_config(tmp_path, document)).limits
    assert limits == Limits(
        max_message_bytes=20 * 1024 * 1024, max_nesting_depth=32, max_claim_check_bytes=1_000_000
    )
    assert load_config(write_config(tmp_path, MINIMAL)).limits == Limits()
    unknown = {**MINIMAL, "limits": {"max-bytes": 5}}
    assert_config_error(write_config(tmp_path, unknown), "limits", "unknown key(s) max-bytes",
                        "max-export-line-bytes")  # fmt: skip


def test_the_quality_section_loads_as_the_checks_settings(tmp_path):
    quality = {"policies": {"decode_rate": "warn", "commit_ts_plausible": "fail"},
               "min-decode-rate": 1, "max-lag": "1.5d", "stuck-after": 90, "clock-skew": "2 m",
               "sample-rows": 0, "clock": "kafka"}  # fmt: skip
    settings = load_config(write_config(tmp_path, {**MINIMAL, "quality": quality})).quality
    assert settings == QualitySettings(
        policies=default_policies() | quality["policies"], min_decode_rate=1.0,
        max_lag_seconds=36 * 3600, stuck_after_seconds=90, clock_skew_seconds=120,
        sample_rows=0, clock="kafka",
    )  # fmt: skip
    assert load_config(write_config(tmp_path, MINIMAL)).quality == QualitySettings()
    empty = {**MINIMAL, "quality": {"policies": None}}  # `policies:` with every line commented
    assert load_config(write_config(tmp_path, empty)).quality == QualitySettings()


QUALITY_MISTAKES = """\
topics:
  orders: {protocol: craft, partitions: 1}
quality:
  policies:
    decode_rate: maybe
    nope: fail
  min-decode-rate: 1.5
  max-lag: 2 weeks
  stuck-after: -5
  clock-skew: .inf
  sample-rows: 1000
  clock: sundial
"""


def test_every_quality_mistake_is_reported_at_load_with_its_line(tmp_path):
    """Checked with the rest of the file, before any stage runs: not by the checks job after
    land has committed (`clock-skew: .inf` passed and overflowed in the silver checks)."""
    path = write_config(tmp_path, QUALITY_MISTAKES)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    duration = "a duration from 0 to 365d: seconds, or text such as 90s, 30m, 2h, 1d"
    assert [line.removeprefix(f"{path.resolve()} ") for line in str(caught.value).splitlines()] == [
        "line 5: quality.policies.decode_rate: expected one of fail, warn, quarantine, got 'maybe'",
        f"line 6: quality.policies.nope: expected a check: one of {', '.join(CHECKS)}, got 'nope'",
        "line 7: quality.min-decode-rate: expected a number from 0 to 1, got 1.5",
        f"line 8: quality.max-lag: expected {duration}, got '2 weeks'",
        f"line 9: quality.stuck-after: expected {duration}, got -5",
        f"line 10: quality.clock-skew: expected {duration}, got inf",
        "line 11: quality.sample-rows: expected a whole number from 0 to 100, got 1000",
        "line 12: quality.clock: expected wall or kafka, got 'sundial'",
    ]


@pytest.mark.parametrize(
    ("setting", "line", "expected"),
    [
        ("policies: {gold_mode: quarantine}", 4, "quality: policies.gold_mode: quarantine "
         "applies to row checks only (commit_ts_plausible, op_allowed, handle_key_present)"),
        ("checks: [{table: db.t}]", 4, "quality: unknown key(s) checks; expected some of clock, "
         "clock-skew, max-lag"),
        ("policies: [decode_rate]", 4, "quality.policies: expected a mapping"),
        ("clock-skew: .nan", 4, "quality.clock-skew: expected a duration"),
        ("max-lag: 366d", 4, "quality.max-lag: expected a duration from 0 to 365d"),
        ("min-decode-rate: .nan", 4, "quality.min-decode-rate: expected a number from 0 to 1"),
        ("sample-rows: true", 4, "quality.sample-rows: expected a whole number from 0 to 100"),
    ],
    ids=["quarantine", "unknown", "policies", "nan", "long", "rate", "rows"],
)  # fmt: skip
def test_a_quality_mistake_names_its_line(tmp_path, setting, line, expected):
    text = f"topics:\n  orders: {{protocol: craft, partitions: 1}}\nquality:\n  {setting}\n"
    path = write_config(tmp_path, text)
    assert_config_error(path, f"{path.resolve()} line {line}: {expected}")


def test_the_limits_reach_the_decoders(tmp_path):
    document = {**MINIMAL, "limits": {"max-collection-count": 7}}
    config = load_config(write_config(tmp_path, document))
    settings = settings_of(config, "orders")
    assert settings.limits == config.limits and settings.limits.max_collection_count == 7


def test_the_config_is_plain_data(tmp_path):
    """It builds no clients and holds no caches: two loads are equal, and it pickles."""
    registry = {"url": "http://registry.invalid:8081"}
    document = {"topics": {"a": {"protocol": "avro", "partitions": 1, "schema-registry": registry}}}
    path = write_config(tmp_path, document)
    config = load_config(path)
    settings_of(config, "a")
    assert pickle.loads(pickle.dumps(config)) == config == load_config(path)
    assert {f.name for f in dataclasses.fields(config)} == {
        "source", "lake", "reports", "inputs", "time_zone", "topics", "changefeeds", "limits",
        "quality", "kafka_inputs", "s3",
    }  # fmt: skip


def test_a_password_in_the_registry_url_is_warned_about_and_never_shown(tmp_path, caplog):
    registry = {"url": "http://lake:hunter2@registry.invalid:8081"}
    document = {"topics": {"a": {"protocol": "avro", "partitions": 1, "schema-registry": registry}}}
    path = write_config(tmp_path, document)
    with caplog.at_level("WARNING"):
        config = load_config(path)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"{path.resolve()} line 6: topics.a.schema-registry.url" in warning
    assert "password-env" in warning and "http://lake:***@registry.invalid:8081" in warning
    assert "hunter2" not in repr(config) and "hunter2" not in warning
    # A wrong type shows the value found, its password masked.
    document["topics"]["a"]["schema-registry"] = registry["url"]
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, document))
    assert "got 'http://lake:***@registry.invalid:8081'" in str(caught.value)


@pytest.mark.parametrize("password", ["hun@ter2", "hunter 2", "hu@n ter/2"])
def test_a_registry_url_password_holding_at_or_a_space_is_masked_in_warnings_and_errors(
    tmp_path, caplog, password
):
    """The mask ended at the password's first "@" and never began at a space: the rest of the
    password was shown in the warning and in the config error quoting the value."""
    registry = {"url": f"http://lake:{password}@registry.invalid:8081"}
    document = {"topics": {"a": {"protocol": "avro", "partitions": 1, "schema-registry": registry}}}
    with caplog.at_level("WARNING"):
        load_config(write_config(tmp_path, document))
    document["topics"]["a"]["schema-registry"] = registry["url"]
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, document))
    for said in (caplog.records[0].getMessage(), str(caught.value)):
        assert "http://lake:***@registry.invalid:8081" in said
        assert "hun" not in said and "ter" not in said


def test_the_example_config_loads():
    example = Path(__file__).resolve().parents[1] / "include" / "pipeline.example.yaml"
    config = load_config(example)
    assert config.limits.max_claim_check_bytes == 16 * 1024 * 1024
    assert config.topic("tidb2-billing-invoices").schema_registry.password_env
    assert config.topic("tidb3-legacy-orders").schema == "legacy_shop"


def test_the_generated_configs_comment_names_the_keys_as_they_are(tmp_path):
    generated = write_generated(tmp_path, GenerateOptions(protocol="craft", transactions=2))
    comment = generated.config_path.read_text().split("\nversion:")[0]
    assert "cutoff-ts" in comment and "cut-off-ts" not in comment


def test_a_kafka_input_is_read_beside_the_globs_and_never_shows_its_settings(tmp_path):
    kafka = {
        "bootstrap-servers": "b1:9092,b2:9092",
        "topics": "orders",
        "options": {"security.protocol": "SASL_SSL", "ssl.key.password": "hunter2"},
        "options-env": {"sasl.jaas.config": "KAFKA_JAAS"},
        "timeout": "45s",
    }
    config = load_config(write_config(tmp_path, {"inputs": ["in/*", {"kafka": kafka}]}
                                      | with_topic()))  # fmt: skip
    assert config.inputs == (str(tmp_path.resolve() / "in" / "*"),)
    (source,) = config.kafka_inputs
    assert (source.bootstrap_servers, source.topics, source.timeout_seconds) == (
        "b1:9092,b2:9092", ("orders",), 45.0
    )  # fmt: skip
    assert "hunter2" not in repr(config)
    with pytest.raises(ConfigError, match="KAFKA_JAAS"):
        source.settings()
    os.environ["KAFKA_JAAS"] = "secret"
    try:
        assert source.settings()["sasl.jaas.config"] == "secret"
        assert source.settings()["bootstrap.servers"] == "b1:9092,b2:9092"
    finally:
        del os.environ["KAFKA_JAAS"]


@pytest.mark.parametrize(
    ("kafka", "expected"),
    [
        ({"topics": ["orders"]}, "line 2: inputs.0.kafka.bootstrap-servers: required"),
        ({"bootstrap-servers": "b:1", "topics": ["nope"]}, "unknown: ['nope']"),
        ({"bootstrap-servers": "b:1", "topics": ["orders"], "options": {"group.id": "g"}},
         "group.id: set by land itself"),
        ({"bootstrap-servers": "b:1", "topics": ["orders"], "brokers": "x"},
         "unknown key(s) brokers"),
        ({"bootstrap-servers": "b:1", "topics": ["orders"], "timeout": "0s"},
         "timeout: expected more than 0 seconds"),
    ],
    ids=["no-servers", "unknown-topic", "own-setting", "unknown-key", "no-timeout"],
)  # fmt: skip
def test_a_kafka_input_mistake_is_named(tmp_path, kafka, expected):
    path = write_config(tmp_path, {"inputs": [{"kafka": kafka}]} | with_topic())
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert expected in str(caught.value)


def test_storage_s3_names_the_store_and_the_variables_holding_its_credentials(tmp_path):
    claims = {"protocol": "open-protocol", "partitions": 1, "claim-check-roots": "s3://b/c"}
    s3 = {
        "endpoint": "http://127.0.0.1:9000/",
        "region": "eu-west-1",
        "path-style": True,
        "access-key-id-env": "LAKE_KEY",
        "secret-access-key-env": "LAKE_SECRET",
    }
    plain = {"protocol": "craft", "partitions": 1}
    document = {"topics": {"claims": claims, "plain": plain}, "storage": {"s3": s3}}
    config = load_config(write_config(tmp_path, document))
    assert config.s3 == config.topics["claims"].s3
    assert config.s3.endpoint == "http://127.0.0.1:9000" and config.s3.path_style
    assert config.topics["plain"].s3 is None  # no claim-check roots: nothing to reach
    assert load_config(write_config(tmp_path, {"topics": {"p": plain}})).s3 is None


@pytest.mark.parametrize(
    ("s3", "expected"),
    [
        ({"endpoint": "ftp://host"}, "storage.s3.endpoint: expected an http:// or https:// URL"),
        ({"endpoint": "http://u:p@host"}, "storage.s3.endpoint: expected an http:// or https://"),
        ({"access-key-id-env": "K"}, "access-key-id-env and secret-access-key-env go together"),
        ({"secret-access-key-env": "not a name"}, "expected an environment variable's name"),
        ({"bucket": "b"}, "unknown key(s) bucket"),
    ],
)
def test_storage_s3_mistakes_are_named(tmp_path, s3, expected):
    document = {"topics": {"t": {"protocol": "craft", "partitions": 1}}, "storage": {"s3": s3}}
    with pytest.raises(ConfigError, match=re.escape(expected)) as error:
        load_config(write_config(tmp_path, document))
    assert "u:p@" not in str(error.value)


@pytest.mark.parametrize("key", ["lake", "reports"])
def test_a_lake_or_reports_uri_is_refused_not_made_a_local_folder(tmp_path, key):
    """s3://bucket/lake joined to the config's folder was once a local folder named "s3:"."""
    document = {"topics": {"t": {"protocol": "craft", "partitions": 1}}, key: "s3://bucket/x"}
    with pytest.raises(ConfigError, match=f"{key}: expected a path on a local filesystem"):
        load_config(write_config(tmp_path, document))
