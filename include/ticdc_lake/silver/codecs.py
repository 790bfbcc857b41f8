"""From a topic's settings to what its decoder receives: the one place that builds codec settings,
claim-check stores and Avro schema sources.

    codec_settings(topic, limits, schema_sources=None) -> CodecSettings
    topic_decoder(topic, limits, schema_sources=None) -> Decoder

The CLI's ``decode`` (a TopicConfig made from its flags), the decode stage on the driver and its
Spark workers all come here, so a setting means the same everywhere. Topics naming the same
schema source share one when the caller passes the same ``schema_sources`` dict (a registry
client and its cache, a parsed ``_schemas`` export); the config itself holds no clients.
"""

from __future__ import annotations

import os
from typing import Any

from ticdc_lake.config import TopicConfig
from ticdc_lake.errors import ConfigError
from ticdc_lake.limits import Limits
from ticdc_lake.protocols import CodecSettings, Decoder, make_decoder
from ticdc_lake.silver.claimcheck import ClaimCheckStore


def codec_settings(
    topic: TopicConfig, limits: Limits | None = None, schema_sources: dict | None = None
) -> CodecSettings:
    """What ``topic``'s decoder needs; ``schema_sources`` shares schema sources among calls."""
    limits = limits or Limits()
    return CodecSettings(
        compression=topic.compression,
        enable_tidb_extension=topic.enable_tidb_extension,
        claim_check=claim_check_store(topic, limits),
        schema_source=_shared_schema_source(topic, schema_sources),
        upstream_schema=topic.schema,
        column_types=topic.column_types,
        options=topic.options,
        limits=limits,
    )


def topic_decoder(
    topic: TopicConfig, limits: Limits | None = None, schema_sources: dict | None = None
) -> Decoder:
    return make_decoder(topic.protocol, codec_settings(topic, limits, schema_sources))


def claim_check_store(topic: TopicConfig, limits: Limits) -> ClaimCheckStore | None:
    """The store claim-check objects are read through; None when the topic names no roots.

    The one place a store is built from settings: its bound on an object's size
    (``limits.max_claim_check_bytes``) is given here."""
    if not topic.claim_check_roots:
        return None
    return ClaimCheckStore(
        list(topic.claim_check_roots), max_object_bytes=limits.max_claim_check_bytes, s3=topic.s3
    )


def _shared_schema_source(topic: TopicConfig, schema_sources: dict | None) -> Any:
    if topic.protocol != "avro":
        return None
    if schema_sources is None:
        return schema_source(topic)
    key = (topic.schema_dir, topic.schemas_topic, topic.schema_registry)
    if key not in schema_sources:
        schema_sources[key] = schema_source(topic)
    return schema_sources[key]


def schema_source(topic: TopicConfig):
    """The Avro schema source a topic names: its registry, else its directory, else its
    ``_schemas`` export (nothing is fetched yet)."""
    from ticdc_lake.silver import schema_registry

    if topic.schema_registry is not None:
        registry = topic.schema_registry
        return schema_registry.RegistrySchemaSource.from_url(
            registry.url,
            username=registry.username,
            password=_password(topic, registry.password_env),
        )
    if topic.schema_dir is not None:
        return schema_registry.DirectorySchemaSource(topic.schema_dir)
    if topic.schemas_topic is not None:
        return schema_registry.SchemasTopicSource.from_file(topic.schemas_topic)
    raise ConfigError(
        f"{topic.where}: an avro topic needs a schema source: schema-registry, schema-dir or "
        "schemas-topic"
    )


def _password(topic: TopicConfig, variable: str | None) -> str | None:
    if not variable:
        return None
    password = os.environ.get(variable)
    if password is None:
        raise ConfigError(
            f"{topic.where}: environment variable {variable} is not set (schema-registry "
            "password-env names it: it holds the registry's password)"
        )
    return password
