"""The pipeline config loader (ticdc_lake.config): what loads, what each mistake says, and the
decoder settings built from a topic's section."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from ticdc_lake import exports
from ticdc_lake.claimcheck import ClaimCheckStore
from ticdc_lake.config import ChangefeedConfig, load_config
from ticdc_lake.errors import ConfigError
from ticdc_lake.schema_registry import (
    DirectorySchemaSource,
    InMemorySchemaRegistry,
    RegistrySchemaSource,
    SchemasTopicSource,
)
from ticdc_lake.workload.output import GenerateOptions, write_generated

MINIMAL = {"topics": {"orders": {"protocol": "open-protocol", "partitions": 3}}}


def write_config(directory: Path, document: dict | str, name: str = "pipeline.yaml") -> Path:
    path = directory / name
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    path.write_text(text)
    return path


def with_topic(**settings) -> dict:
    return {"topics": {"orders": {"protocol": "open-protocol", "partitions": 3, **settings}}}


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
        assert isinstance(config.codec_settings(topics[0]).schema_source, DirectorySchemaSource)
    else:
        assert config.codec_settings(topics[0]).schema_source is None


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
    assert_config_error(
        write_config(tmp_path, document), "topics.orders", "protocol must be one of", "canal-json"
    )


@pytest.mark.parametrize("partitions", [0, -1, "3", 1.5, True, None])
def test_bad_partitions(tmp_path, partitions):
    document = {"topics": {"orders": {"protocol": "craft"}}}
    if partitions is not None:
        document["topics"]["orders"]["partitions"] = partitions
    assert_config_error(
        write_config(tmp_path, document), "topics.orders", "partitions must be a whole number"
    )


def test_bad_time_zone_at_top_level(tmp_path):
    path = write_config(tmp_path, {**MINIMAL, "time-zone": "Mars/Olympus_Mons"})
    assert_config_error(path, "time-zone 'Mars/Olympus_Mons' is not an IANA zone name")


def test_bad_time_zone_of_a_topic(tmp_path):
    path = write_config(tmp_path, with_topic(**{"time-zone": "CST+8"}))
    assert_config_error(path, "topics.orders", "time-zone 'CST+8'")


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
        ({}, ["changefeeds", "no changefeeds"]),
        (["a", "b"], ["changefeeds must be a mapping"]),
        ({"cf": {"topics": "a,b"}}, ["changefeeds.cf", "topics must be a list"]),
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
        write_config(tmp_path, feed(watermarks="no")), "changefeeds.cf", "watermarks must be true"
    )
    assert_config_error(
        write_config(tmp_path, feed(watermarks=False, **{"cutoff-ts": True})),
        "cutoff-ts must be a TSO",
    )


def test_extension_flag_must_be_a_boolean(tmp_path):
    path = write_config(tmp_path, with_topic(**{"enable-tidb-extension": "false"}))
    assert_config_error(path, "topics.orders", "enable-tidb-extension must be true or false")


def test_changefeed_without_topics(tmp_path):
    document = {**MINIMAL, "changefeeds": {"cf": {"watermarks": True}}}
    assert_config_error(write_config(tmp_path, document), "changefeeds.cf", "(none given)")


@pytest.mark.parametrize(
    ("document", "fragments"),
    [
        (with_topic(compression="gzip"), ["topics.orders", "compression must be one of"]),
        (
            {**MINIMAL, "changefeeds": {"cf": {"topics": ["orders"], "cutoff-ts": -5}}},
            ["changefeeds.cf", "cutoff-ts must be a TSO"],
        ),
        (
            with_topic(**{"schema-registry": {"username": "u"}}),
            ["topics.orders.schema-registry", "url is required"],
        ),
        ({**MINIMAL, "version": 2}, ["version must be 1"]),
        ({"topics": {}}, ["no topics configured"]),
        ({"topics": ["orders"]}, ["topics must be a mapping"]),
        (with_topic(options=["a"]), ["topics.orders.options must be a mapping"]),
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
    assert_config_error(scalar, "must be a mapping, not str")


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
        config.codec_settings("users")
    message = str(caught.value)
    assert str(path.resolve()) in message and "topic users" in message
    assert "LAKE_TEST_REGISTRY_PASSWORD (schema-registry password-env) is not set" in message


# --- codec_settings -----------------------------------------------------------------------------


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
    settings = load_config(path).codec_settings("orders")
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
    settings = load_config(write_config(tmp_path, MINIMAL)).codec_settings("orders")
    assert settings.claim_check is None
    assert settings.schema_source is None


def test_codec_settings_schema_directory(tmp_path):
    (tmp_path / "schemas").mkdir()
    path = write_config(
        tmp_path, {"topics": {"u": {"protocol": "avro", "partitions": 1, "schema-dir": "schemas"}}}
    )
    source = load_config(path).codec_settings("u").schema_source
    assert isinstance(source, DirectorySchemaSource)
    assert source.directory == tmp_path.resolve() / "schemas"


def test_codec_settings_missing_schema_directory(tmp_path):
    path = write_config(
        tmp_path, {"topics": {"u": {"protocol": "avro", "partitions": 1, "schema-dir": "gone"}}}
    )
    with pytest.raises(ConfigError, match=r"schema directory .*gone does not exist"):
        load_config(path).codec_settings("u")


def test_codec_settings_schemas_topic_export(tmp_path):
    registry = InMemorySchemaRegistry()
    schema = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]}
    schema_id = registry.register("users-value", json.dumps(schema))
    exports.write_export(tmp_path / "_schemas.jsonl", registry.schemas_records(), "jsonl")
    path = write_config(
        tmp_path,
        {"topics": {"u": {"protocol": "avro", "partitions": 1, "schemas-topic": "_schemas.jsonl"}}},
    )
    source = load_config(path).codec_settings("u").schema_source
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
    source = config.codec_settings("a").schema_source
    assert isinstance(source, RegistrySchemaSource)
    assert "http://registry.invalid:8081" in source.description
    # Built without contacting the registry, once for every topic that shares it.
    assert config.codec_settings("b").schema_source is source
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
    settings = load_config(write_config(tmp_path, document)).codec_settings("orders")
    assert settings.schema_source is None
