"""The pipeline config file (YAML): where the lake is, what arrives, and how to decode each topic.

    version: 1
    lake: lake                       # root of the Delta tables (bronze/, silver/, gold/, state/)
    reports: reports                 # data-quality reports (default <lake>/../reports)
    inputs: [exports/*]              # globs of Kafka export files (the landing area)
    time-zone: Asia/Shanghai         # the TiCDC server's zone: TIMESTAMP text is local time there
    topics:
      <topic>:
        protocol: open-protocol      # open-protocol | craft | canal-json | avro
        partitions: 3                # a partition never seen holds the watermark at 0
        compression: none            # none | snappy | lz4 (TiCDC never marks it in the message)
        enable-tidb-extension: true  # canal-json / avro: commit TS and watermarks
        time-zone: UTC               # overrides the top-level one for this topic
        schema-dir: schemas          # avro: <id>.avsc / <id>.json files
        schemas-topic: registry/_schemas.jsonl   # avro: an export of the _schemas topic
        schema-registry:             # avro: a Confluent Schema Registry
          url: https://registry:8081
          username: lake
          password-env: SCHEMA_REGISTRY_PASSWORD   # the secret stays out of the file
        claim-check-roots: [s3://bucket/claims]   # the only places claim-check objects are read
        options: {}                  # protocol options (see the README's protocol sections)
    changefeeds:
      <name>:
        topics: [<topic>, ...]       # their partitions' resolved TS combine into one watermark
        watermarks: true             # false: the protocol sends none (Avro, canal-json w/o ext.)
        cutoff-ts: 0                 # only with watermarks false: gold up to this TS; without
                                     # it gold is marked not transactionally consistent
    quality: {}                      # data-quality checks: see ticdc_lake.quality.settings

Without a ``changefeeds`` section each topic is a changefeed of its own (with watermarks unless
its protocol sends none: Avro, canal-json without the TiDB extension). With one, every topic
must belong to exactly one changefeed.

Relative paths are relative to the config file. Every mistake is a ConfigError naming the file
and the key, raised by ``load_config`` before any stage runs (only what needs the outside world
waits: a schema registry's password from the environment, the schema files themselves).
"""

from __future__ import annotations

import os
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ticdc_lake.claimcheck import ClaimCheckStore
from ticdc_lake.compression import CODECS
from ticdc_lake.errors import ConfigError
from ticdc_lake.protocols import PROTOCOLS, CodecSettings

_TOP_KEYS = {
    "version", "lake", "reports", "inputs", "time-zone", "topics", "changefeeds", "quality",
}  # fmt: skip
_TOPIC_KEYS = {
    "protocol", "partitions", "compression", "enable-tidb-extension", "time-zone", "schema-dir",
    "schemas-topic", "schema-registry", "claim-check-roots", "options",
}  # fmt: skip
_REGISTRY_KEYS = {"url", "username", "password-env"}
_CHANGEFEED_KEYS = {"topics", "watermarks", "cutoff-ts"}


@dataclass(frozen=True)
class SchemaRegistryConfig:
    url: str
    username: str | None = None
    password_env: str | None = None


@dataclass(frozen=True)
class TopicConfig:
    name: str
    protocol: str
    partitions: int
    time_zone: str
    compression: str = "none"
    enable_tidb_extension: bool = True
    schema_dir: Path | None = None
    schemas_topic: Path | None = None
    schema_registry: SchemaRegistryConfig | None = None
    claim_check_roots: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ChangefeedConfig:
    name: str
    topics: tuple[str, ...]
    watermarks: bool = True
    cutoff_ts: int | None = None


@dataclass(frozen=True)
class PipelineConfig:
    source: Path  # the config file
    lake: Path
    reports: Path
    inputs: tuple[str, ...]  # absolute glob patterns
    time_zone: str
    topics: dict[str, TopicConfig]
    changefeeds: dict[str, ChangefeedConfig]
    # The raw `quality:` section; ticdc_lake.quality.settings validates it (policies, limits).
    quality: dict = field(default_factory=dict)
    _schema_sources: dict = field(default_factory=dict, compare=False, repr=False)

    def changefeed_of(self, topic: str) -> ChangefeedConfig:
        for changefeed in self.changefeeds.values():
            if topic in changefeed.topics:
                return changefeed
        raise ConfigError(f"{self.source}: topic {topic!r} belongs to no changefeed")

    def codec_settings(self, topic: str) -> CodecSettings:
        """What the topic's decoder needs; Avro schema sources are built once and shared."""
        config = self.topic(topic)
        claim_check = (
            ClaimCheckStore(list(config.claim_check_roots)) if config.claim_check_roots else None
        )
        return CodecSettings(
            compression=config.compression,
            enable_tidb_extension=config.enable_tidb_extension,
            claim_check=claim_check,
            schema_source=self._schema_source(config) if config.protocol == "avro" else None,
            options=config.options,
        )

    def topic(self, topic: str) -> TopicConfig:
        try:
            return self.topics[topic]
        except KeyError:
            raise ConfigError(
                f"{self.source}: topic {topic!r} is not configured; known topics: "
                f"{', '.join(sorted(self.topics)) or 'none'}"
            ) from None

    def _schema_source(self, config: TopicConfig):
        key = (config.schema_dir, config.schemas_topic, config.schema_registry)
        if key not in self._schema_sources:
            self._schema_sources[key] = _build_schema_source(config, self.source)
        return self._schema_sources[key]


def _build_schema_source(config: TopicConfig, source: Path):
    from ticdc_lake import schema_registry as sr

    if config.schema_registry is not None:
        registry = config.schema_registry
        password = None
        if registry.password_env:
            password = os.environ.get(registry.password_env)
            if password is None:
                raise ConfigError(
                    f"{source}: topic {config.name}: environment variable "
                    f"{registry.password_env} (schema-registry password-env) is not set"
                )
        return sr.RegistrySchemaSource.from_url(
            registry.url, username=registry.username, password=password
        )
    if config.schema_dir is not None:
        return sr.DirectorySchemaSource(config.schema_dir)
    if config.schemas_topic is not None:
        return sr.SchemasTopicSource.from_file(config.schemas_topic)
    raise ConfigError(
        f"{source}: avro topic {config.name} needs schema-registry, schema-dir or schemas-topic"
    )


def _check_keys(where: str, mapping: Any, allowed: set[str]) -> dict:
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where} must be a mapping, not {type(mapping).__name__}")
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; expected some of "
            f"{', '.join(sorted(allowed))}"
        )
    return mapping


def _time_zone(where: str, name: Any) -> str:
    try:
        zoneinfo.ZoneInfo(str(name))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(f"{where}: time-zone {name!r} is not an IANA zone name") from exc
    return str(name)


def _topic(where: str, name: str, raw: Any, base: Path, default_zone: str) -> TopicConfig:
    raw = _check_keys(where, raw, _TOPIC_KEYS)
    protocol = raw.get("protocol")
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"{where}: protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}"
        )
    partitions = raw.get("partitions")
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise ConfigError(f"{where}: partitions must be a whole number >= 1, not {partitions!r}")
    compression = raw.get("compression", "none")
    if compression not in CODECS:
        raise ConfigError(
            f"{where}: compression must be one of {', '.join(CODECS)}, not {compression!r}"
        )
    registry = None
    if "schema-registry" in raw:
        entry = _check_keys(f"{where}.schema-registry", raw["schema-registry"], _REGISTRY_KEYS)
        if not entry.get("url"):
            raise ConfigError(f"{where}.schema-registry: url is required")
        registry = SchemaRegistryConfig(
            entry["url"], entry.get("username"), entry.get("password-env")
        )
    if protocol == "avro" and not (registry or raw.get("schema-dir") or raw.get("schemas-topic")):
        raise ConfigError(
            f"{where}: an avro topic needs a schema source: schema-registry, schema-dir or "
            "schemas-topic"
        )
    options = raw.get("options") or {}
    _check_keys(f"{where}.options", options, set(options))
    roots = raw.get("claim-check-roots") or []
    return TopicConfig(
        name=name,
        protocol=protocol,
        partitions=partitions,
        time_zone=_time_zone(where, raw.get("time-zone", default_zone)),
        compression=compression,
        enable_tidb_extension=_flag(where, raw, "enable-tidb-extension"),
        schema_dir=base / raw["schema-dir"] if raw.get("schema-dir") else None,
        schemas_topic=base / raw["schemas-topic"] if raw.get("schemas-topic") else None,
        schema_registry=registry,
        claim_check_roots=tuple(_absolute_root(root, base) for root in roots),
        options=tuple(sorted(options.items())),
    )


def _absolute_root(root: str, base: Path) -> str:
    return root if "://" in root or root.startswith("/") else str((base / root).resolve())


def _flag(where: str, raw: dict, key: str, default: bool = True) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {key} must be true or false, not {value!r}")
    return value


def _changefeed(
    where: str, name: str, raw: Any, topics: dict[str, TopicConfig]
) -> ChangefeedConfig:
    raw = _check_keys(where, raw, _CHANGEFEED_KEYS)
    members = raw.get("topics") or []
    if not isinstance(members, list):
        raise ConfigError(f"{where}: topics must be a list of topic names, not {members!r}")
    missing = [topic for topic in members if topic not in topics]
    if not members or missing:
        raise ConfigError(
            f"{where}: topics must name configured topics; unknown: {missing or '(none given)'}"
        )
    repeated = sorted({topic for topic in members if members.count(topic) > 1})
    if repeated:
        raise ConfigError(f"{where}: topics lists {', '.join(repeated)} more than once")
    watermarks = _flag(where, raw, "watermarks")
    cutoff = raw.get("cutoff-ts")
    if cutoff is not None and (
        not isinstance(cutoff, int) or isinstance(cutoff, bool) or cutoff < 0
    ):
        raise ConfigError(f"{where}: cutoff-ts must be a TSO (a whole number >= 0), not {cutoff!r}")
    if cutoff is not None and watermarks:
        raise ConfigError(
            f"{where}: cutoff-ts is for changefeeds without watermarks; with watermarks: true "
            "gold follows the watermark (set watermarks: false to use a cut-off)"
        )
    return ChangefeedConfig(name, tuple(members), watermarks, cutoff)


def _sends_watermarks(topic: TopicConfig) -> bool:
    if topic.protocol == "avro":
        return False
    return topic.protocol != "canal-json" or topic.enable_tidb_extension


def _changefeeds(source: Path, raw: Any, topics: dict[str, TopicConfig]) -> dict:
    if raw is None:  # each topic on its own
        return {
            name: ChangefeedConfig(name, (name,), _sends_watermarks(topic))
            for name, topic in topics.items()
        }
    where = f"{source}: changefeeds"
    raw = _check_keys(where, raw, set(raw) if isinstance(raw, dict) else set())
    if not raw:
        raise ConfigError(f"{where}: no changefeeds (leave the key out: each topic is its own)")
    changefeeds = {
        str(name): _changefeed(f"{where}.{name}", str(name), entry, topics)
        for name, entry in raw.items()
    }
    for topic in topics:
        owners = [name for name, feed in changefeeds.items() if topic in feed.topics]
        if len(owners) != 1:
            found = f"in {', '.join(owners)}" if owners else "in none"
            raise ConfigError(
                f"{where}: topic {topic} must belong to exactly one changefeed, it is {found}"
            )
    return changefeeds


def load_config(path: str | os.PathLike) -> PipelineConfig:
    source = Path(path).resolve()
    try:
        raw = yaml.safe_load(source.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline config {source}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"pipeline config {source} is not valid YAML: {exc}") from exc
    raw = _check_keys(str(source), raw, _TOP_KEYS)
    if raw.get("version", 1) != 1:
        raise ConfigError(f"{source}: version must be 1, not {raw.get('version')!r}")
    base = source.parent
    zone = _time_zone(str(source), raw.get("time-zone", "UTC"))
    topics = {
        str(name): _topic(f"{source}: topics.{name}", str(name), entry, base, zone)
        for name, entry in _check_keys(
            f"{source}: topics", raw.get("topics") or {}, set(raw.get("topics") or {})
        ).items()
    }
    if not topics:
        raise ConfigError(f"{source}: no topics configured")
    changefeeds = _changefeeds(source, raw.get("changefeeds"), topics)
    lake = base / raw.get("lake", "lake")
    return PipelineConfig(
        source=source,
        lake=lake,
        reports=base / raw["reports"] if raw.get("reports") else lake.parent / "reports",
        inputs=tuple(str(base / pattern) for pattern in raw.get("inputs") or ["exports/*"]),
        time_zone=zone,
        topics=topics,
        changefeeds=changefeeds,
        quality=_check_keys(
            f"{source}: quality", raw.get("quality") or {}, set(raw.get("quality") or {})
        ),
    )
