"""The pipeline config file (YAML): where the lake is, what arrives, and how to decode each topic.

    version: 1
    lake: lake                       # root of the Delta tables (bronze/, silver/, gold/, state/)
    reports: reports                 # data-quality reports (default <lake>/../reports)
    inputs: [exports/*]              # globs of Kafka export files (the landing area), and
      - kafka:                       # Kafka topics read straight into bronze
          bootstrap-servers: broker1:9092,broker2:9092
          topics: [orders]           # configured topics (below)
          options: {security.protocol: SASL_SSL, sasl.mechanism: SCRAM-SHA-512}
          options-env: {sasl.jaas.config: KAFKA_JAAS_CONFIG}   # secret settings' variables
          timeout: 30s               # for the broker's metadata and offsets
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
        schema: shop                 # avro up to TiCDC v6.0: its records name no schema
        column-types:                # avro up to v6.0: column types its Avro types cannot tell
          orders.amount: decimal(12,2)
          orders.placed_on: date
        claim-check-roots: [s3://bucket/claims]   # the only places claim-check objects are read
        options: {}                  # protocol options (see docs/protocols.md, per protocol)
    changefeeds:
      <name>:
        topics: [<topic>, ...]       # their partitions' resolved TS combine into one watermark
        watermarks: true             # false: the protocol sends none (Avro, canal-json w/o ext.)
        cutoff-ts: 0                 # only with watermarks false: gold up to this TS; without
                                     # it gold is marked not transactionally consistent
    limits:                          # bounds on hostile input (ticdc_lake.limits.Limits)
      max-message-bytes: 10MiB       # sizes: bytes, or text such as 10MiB, 64 MB
    quality:                         # the data-quality checks (ticdc_lake.quality.settings)
      policies: {decode_rate: fail}  # check -> fail | warn | quarantine (row checks only)
      min-decode-rate: 0.99          # 0 to 1
      max-lag: 2h                    # durations: seconds, or 90s, 30m, 2h, 1d; at most 365d
      stuck-after: 30m
      clock-skew: 5m
      sample-rows: 5                 # 0 to 100
      clock: wall                    # wall | kafka

Without a ``changefeeds`` section each topic is a changefeed of its own (with watermarks unless
its protocol sends none: Avro, canal-json without the TiDB extension). With one, every topic
must belong to exactly one changefeed. A single string stands for a list of one wherever a list
is expected (``inputs``, ``claim-check-roots``, a changefeed's ``topics``).

The file is checked against a schema (pydantic models of its sections) by ``load_config``,
before any stage runs; every mistake is reported at once, each as a ConfigError line naming the
file, the line, the key, what was expected and what was found:

    pipeline.yaml line 7: topics.orders.partitions: expected a whole number >= 1, got 'three'

Only what needs the outside world waits until the decoders are built (ticdc_lake.silver.codecs): a
schema registry's password from the environment, the schema files themselves. The result is
plain frozen data (PipelineConfig); relative paths are made relative to the config file.
"""

from __future__ import annotations

import dataclasses
import os
import re
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    WrapValidator,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ticdc_lake.compression import CODECS
from ticdc_lake.errors import ConfigError
from ticdc_lake.limits import Limits, setting_name
from ticdc_lake.orchestration import TSO_MAX
from ticdc_lake.protocols import PROTOCOLS
from ticdc_lake.quality.settings import CHECKS, POLICIES, QUARANTINE, QualitySettings
from ticdc_lake.redact import redact_text, redact_url, warn_if_url_has_password
from ticdc_lake.storage import S3Settings, is_object_uri


@dataclass(frozen=True)
class SchemaRegistryConfig:
    url: str
    username: str | None = None
    password_env: str | None = None

    def __repr__(self) -> str:  # a password in the URL never reaches a log or a message
        return (
            f"SchemaRegistryConfig(url={redact_url(self.url)!r}, username={self.username!r}, "
            f"password_env={self.password_env!r})"
        )


@dataclass(frozen=True)
class KafkaSourceConfig:
    """A Kafka cluster land reads topics from (``bronze/kafka_source.py``). ``options`` are
    Kafka consumer settings (Java client names); ``options_env`` names the environment
    variables holding the secret ones, read when land runs."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    options: tuple[tuple[str, str], ...] = ()
    options_env: tuple[tuple[str, str], ...] = ()
    timeout_seconds: float = 30.0

    def settings(self) -> dict[str, str]:
        """The consumer settings, secrets read from the environment (ConfigError: unset)."""
        unset = [variable for _, variable in self.options_env if variable not in os.environ]
        if unset:
            raise ConfigError(
                f"kafka input {self.bootstrap_servers}: environment variable(s) "
                f"{', '.join(unset)} (options-env) not set"
            )
        secrets = {name: os.environ[variable] for name, variable in self.options_env}
        return {"bootstrap.servers": self.bootstrap_servers, **dict(self.options), **secrets}

    def __repr__(self) -> str:  # option values may be secrets: their names only
        return (
            f"KafkaSourceConfig(bootstrap_servers={redact_text(self.bootstrap_servers)!r}, "
            f"topics={self.topics!r}, options={[n for n, _ in self.options]!r}, "
            f"options_env={self.options_env!r}, timeout_seconds={self.timeout_seconds!r})"
        )


@dataclass(frozen=True)
class TopicConfig:
    name: str
    protocol: str
    partitions: int = 1
    time_zone: str = "UTC"
    compression: str = "none"
    enable_tidb_extension: bool = True
    schema_dir: Path | None = None
    schemas_topic: Path | None = None
    schema_registry: SchemaRegistryConfig | None = None
    claim_check_roots: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    source: Path | None = None  # the config file it came from (None: the command line)
    schema: str | None = None  # avro up to TiCDC v6.0: the upstream schema of its records
    column_types: tuple[tuple[str, str], ...] = ()  # avro up to v6.0: "table.column" → type
    s3: S3Settings | None = None  # the pipeline's storage.s3: how s3:// claim-check roots are read

    @property
    def where(self) -> str:
        """The topic, for messages: "<config file>: topic <name>"."""
        return f"{self.source}: topic {self.name}" if self.source else f"topic {self.name}"


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
    limits: Limits = field(default_factory=Limits)
    quality: QualitySettings = field(default_factory=QualitySettings)
    kafka_inputs: tuple[KafkaSourceConfig, ...] = ()  # inputs read from Kafka itself
    s3: S3Settings | None = None  # storage.s3: the S3-compatible store s3:// URIs are on

    def changefeed_of(self, topic: str) -> ChangefeedConfig:
        for changefeed in self.changefeeds.values():
            if topic in changefeed.topics:
                return changefeed
        raise ConfigError(f"{self.source}: topic {topic!r} belongs to no changefeed")

    def topic(self, topic: str) -> TopicConfig:
        try:
            return self.topics[topic]
        except KeyError:
            raise ConfigError(
                f"{self.source}: topic {topic!r} is not configured; known topics: "
                f"{', '.join(sorted(self.topics)) or 'none'}"
            ) from None


def load_config(path: str | os.PathLike) -> PipelineConfig:
    """The config in ``path``, checked; a ConfigError listing every mistake otherwise."""
    source = Path(path).resolve()
    try:
        text = source.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline config {source}: {exc}") from exc
    try:
        document, lines = _parse_yaml(text)
    except yaml.YAMLError as exc:  # its text quotes the file: mask any URL password in it
        message = redact_text(f"pipeline config {source} is not valid YAML: {exc}")
        raise ConfigError(message) from None
    try:
        checked = _PipelineFile.model_validate({} if document is None else document)
    except ValidationError as exc:
        raise ConfigError(
            "\n".join(_describe(error, source, lines) for error in exc.errors())
        ) from None
    for name, topic in checked.topics.items():
        if topic.schema_registry is not None:
            key = ("topics", name, "schema-registry", "url")
            where = f"{source} line {_line_of(key, lines)}: {_dotted(key)}"
            warn_if_url_has_password(topic.schema_registry.url, where)
    return _pipeline_config(checked, source)


# --- reading YAML with the line of every key -------------------------------------------------


def _parse_yaml(text: str) -> tuple[Any, dict[tuple[str, ...], int]]:
    """The document, and the 1-based line of every key and list item by its path (keys and
    indexes as text). A node reached twice (a YAML alias) is recorded at its first path."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        document = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    lines: dict[tuple[str, ...], int] = {}
    seen: set[int] = set()

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*path, str(key.value))
                lines.setdefault(child, key.start_mark.line + 1)
                walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                lines.setdefault((*path, str(index)), item.start_mark.line + 1)
                walk(item, (*path, str(index)))

    if node is not None:
        lines[()] = node.start_mark.line + 1
        walk(node, ())
    return document, lines


def _line_of(loc: tuple, lines: dict[tuple[str, ...], int]) -> int:
    path = tuple(str(part) for part in loc)
    while path not in lines and path:
        path = path[:-1]
    return lines.get(path, 1)


def _dotted(loc: tuple) -> str:
    return ".".join(str(part) for part in loc if part != "[key]")


# --- the schema --------------------------------------------------------------------------------


def _expect(description: str) -> WrapValidator:
    """Report any failure of the wrapped type as "expected <description>"."""

    def check(value: Any, handler):
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError(
                "expected", "expected {expected}", {"expected": description}
            ) from None

    return WrapValidator(check)


def _problem(message: str, at: tuple[str, ...] = ()) -> PydanticCustomError:
    """A mistake a section's validator finds; ``at`` is the key (below the section) whose line
    the report gives."""
    return PydanticCustomError("problem", "{message}", {"message": message, "at": at})


def _listed(value: Any) -> Any:
    """A single string where a list is expected is a list of one (what a user means)."""
    return [value] if isinstance(value, str) else value


def _known_zone(name: str) -> str:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"{name!r} is not an IANA zone name") from exc
    return name


def _list_of(description: str) -> Any:
    item = Annotated[str, Field(min_length=1)]
    return Annotated[list[item], BeforeValidator(_listed), _expect(description)]


_Text = Annotated[str, _expect("text")]


_LOCAL = "a path on a local filesystem (s3:// is for inputs and claim-check-roots so far)"


def _local(path: str) -> str:
    if "://" in path:
        raise PydanticCustomError("expected", "expected {expected}", {"expected": _LOCAL})
    return path


# The lake, reports and schema files stay local for now: a URI there would silently be a folder.
_LocalPath = Annotated[str, Field(min_length=1), _expect("a path"), AfterValidator(_local)]
_Globs = _list_of("a glob pattern or a list of them")
_Roots = _list_of("a storage root or a list of them")
_TopicNames = _list_of("a topic name or a list of them")
_TimeZone = Annotated[
    str, AfterValidator(_known_zone), _expect("an IANA time zone name such as UTC, Asia/Shanghai")
]
_Flag = Annotated[bool, _expect("true or false")]
_EnvName = Annotated[
    str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"), _expect("an environment variable's name")
]
_Count = Annotated[int, Field(ge=1), _expect("a whole number >= 1")]
_Size = Annotated[ByteSize, Field(ge=1), _expect("a size in bytes >= 1 (a number, or e.g. 10MiB)")]
_Tso = Annotated[int, Field(ge=0, le=TSO_MAX), _expect(f"a TSO (a whole number 0 to {TSO_MAX})")]
_Protocol = Annotated[Literal[PROTOCOLS], _expect(f"one of {', '.join(PROTOCOLS)}")]
_Compression = Annotated[Literal[CODECS], _expect(f"one of {', '.join(CODECS)}")]
_Options = Annotated[dict[str, Any], _expect("a mapping of option names to values")]


def _declarable(text: str) -> str:
    """A column type column-types may give (see protocols.avro, where they are read)."""
    from ticdc_lake.protocols.avro import DECLARABLE_TYPES
    from ticdc_lake.silver import mysql

    parsed = mysql.parsed_column_type_or_none(text)
    if parsed is None or parsed.base not in DECLARABLE_TYPES:
        raise ValueError(f"{text!r} is not one of {', '.join(sorted(DECLARABLE_TYPES))}")
    return text


_ColumnName = Annotated[
    str,
    Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$"),
    _expect("<table>.<column>, Avro names as the writer schema spells them"),
]
_ColumnTypeText = Annotated[
    str,
    AfterValidator(_declarable),
    _expect(
        "a column type the Avro type cannot tell: decimal(M,D), json, date, datetime(fsp), "
        "timestamp(fsp), time(fsp), an integer type, year, bigint unsigned or bit(M)"
    ),
]


# `quality:`: durations as text or seconds, bounded so that no check's arithmetic overflows
# (`clock-skew: .inf` did, in the silver checks) and no typo means "never".
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_SECONDS = 365 * 86400


def _seconds(value: Any) -> Any:
    """``2h``, ``30m``, ``45s``, ``1.5d`` as seconds; anything else as given (checked next)."""
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", value)
        if match:
            return float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    return value


_Duration = Annotated[
    float,
    Field(ge=0, le=MAX_DURATION_SECONDS, allow_inf_nan=False),
    BeforeValidator(_seconds),
    _expect("a duration from 0 to 365d: seconds, or text such as 90s, 30m, 2h, 1d"),
]
_Rate = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False), _expect("a number from 0 to 1")]
_SampleRows = Annotated[int, Field(ge=0, le=100), _expect("a whole number from 0 to 100")]
_CheckName = Annotated[Literal[tuple(CHECKS)], _expect(f"a check: one of {', '.join(CHECKS)}")]
_Policy = Annotated[Literal[POLICIES], _expect(f"one of {', '.join(POLICIES)}")]
_Clock = Annotated[Literal["wall", "kafka"], _expect("wall or kafka")]


class _Section(BaseModel):
    """A mapping of the file: kebab-case keys, exact types (YAML gives them), no unknown keys."""

    model_config = ConfigDict(
        alias_generator=setting_name, extra="forbid", strict=True, frozen=True
    )

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        """Unknown keys in one message that lists the allowed ones (a misspelling is seen)."""
        if isinstance(data, dict):
            allowed = sorted(info.alias or name for name, info in cls.model_fields.items())
            unknown = sorted(str(key) for key in data if key not in allowed)
            if unknown:
                raise _problem(
                    f"unknown key(s) {', '.join(unknown)}; expected some of {', '.join(allowed)}",
                    at=(unknown[0],),
                )
        return data


class _RegistryFile(_Section):
    url: Annotated[str, Field(min_length=1), _expect("the registry's URL")]
    username: _Text | None = None
    password_env: Annotated[str, _expect("the name of an environment variable")] | None = None


# Settings land sets itself, or that Spark's Kafka source refuses.
_KAFKA_OWN_SETTINGS = (
    "bootstrap.servers", "group.id", "auto.offset.reset", "enable.auto.commit",
    "key.deserializer", "value.deserializer", "interceptor.classes",
)  # fmt: skip


class _KafkaFile(_Section):
    bootstrap_servers: Annotated[str, Field(min_length=1), _expect("host:port[,host:port...]")]
    topics: _TopicNames
    options: dict[str, _Text] = {}
    options_env: dict[str, Annotated[str, _expect("the name of an environment variable")]] = {}
    timeout: _Duration = 30.0

    @model_validator(mode="after")
    def _not_ours(self) -> _KafkaFile:
        for section in ("options", "options_env"):
            taken = [name for name in getattr(self, section) if name in _KAFKA_OWN_SETTINGS]
            if taken:
                raise _problem(
                    f"{', '.join(taken)}: set by land itself (bootstrap-servers for the "
                    "servers); leave out of the options",
                    at=(setting_name(section),),
                )
        if self.timeout <= 0:
            raise _problem("timeout: expected more than 0 seconds", at=("timeout",))
        return self


class _KafkaInputFile(_Section):
    kafka: _KafkaFile


# Union tags: pydantic puts them in an error's location, where the file has no such key.
_PATTERN_TAG, _KAFKA_TAG = "<pattern>", "<kafka>"


def _input_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return _PATTERN_TAG
    return _KAFKA_TAG if isinstance(value, dict) else None


# An input is a glob pattern, or a mapping naming a Kafka source: told apart by their type, so a
# mistake inside the mapping is reported as such.
_Inputs = Annotated[
    list[
        Annotated[
            Annotated[str, Field(min_length=1), Tag(_PATTERN_TAG)]
            | Annotated[_KafkaInputFile, Tag(_KAFKA_TAG)],
            Discriminator(_input_kind),
        ]
    ],
    BeforeValidator(_listed),
]


class _TopicFile(_Section):
    protocol: _Protocol
    partitions: _Count
    compression: _Compression = "none"
    enable_tidb_extension: _Flag = True
    time_zone: _TimeZone | None = None
    schema_dir: _LocalPath | None = None
    schemas_topic: _LocalPath | None = None
    schema_registry: _RegistryFile | None = None
    claim_check_roots: _Roots = []
    options: _Options = {}
    # `schema` itself would shadow pydantic's BaseModel.schema
    upstream_schema: Annotated[str, Field(min_length=1), _expect("a schema name")] | None = Field(
        default=None, alias="schema"
    )
    column_types: dict[_ColumnName, _ColumnTypeText] = {}

    @model_validator(mode="after")
    def _avro_settings(self) -> _TopicFile:
        if self.protocol == "avro" and not (
            self.schema_registry or self.schema_dir or self.schemas_topic
        ):
            raise _problem(
                "an avro topic needs a schema source: schema-registry, schema-dir or schemas-topic"
            )
        for key, given in (("schema", self.upstream_schema), ("column-types", self.column_types)):
            if given and self.protocol != "avro":
                raise _problem(
                    f"{key} is for avro topics (TiCDC up to v6.0, whose records say less)",
                    at=(key,),
                )
        return self


class _S3File(_Section):
    endpoint: (
        Annotated[
            str,
            Field(pattern=r"^https?://[^/?#@\s]+/?$"),
            _expect("an http:// or https:// URL of a host and port, no path or credentials"),
        ]
        | None
    ) = None
    region: _Text | None = None
    path_style: _Flag = False
    access_key_id_env: _EnvName | None = None
    secret_access_key_env: _EnvName | None = None
    session_token_env: _EnvName | None = None

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> _S3File:
        if (self.access_key_id_env is None) != (self.secret_access_key_env is None):
            raise _problem(
                "access-key-id-env and secret-access-key-env go together (neither: AWS's "
                "default credentials)"
            )
        return self


class _StorageFile(_Section):
    s3: _S3File | None = None


class _ChangefeedFile(_Section):
    topics: _TopicNames
    watermarks: _Flag = True
    cutoff_ts: _Tso | None = None

    @model_validator(mode="after")
    def _cutoff_only_without_watermarks(self) -> _ChangefeedFile:
        repeated = sorted({topic for topic in self.topics if self.topics.count(topic) > 1})
        if repeated:
            raise _problem(f"topics lists {', '.join(repeated)} more than once", at=("topics",))
        if self.cutoff_ts is not None and self.watermarks:
            raise _problem(
                "cutoff-ts is for changefeeds without watermarks; with watermarks: true gold "
                "follows the watermark (set watermarks: false to use a cut-off)",
                at=("cutoff-ts",),
            )
        return self


# One setting per Limits field, with its default: the dataclass stays the one list of limits.
_LimitsFile = create_model(
    "_LimitsFile",
    __base__=_Section,
    **{
        limit.name: (_Size if limit.name.endswith("_bytes") else _Count, limit.default)
        for limit in dataclasses.fields(Limits)
    },
)


class _QualityFile(_Section):
    policies: dict[_CheckName, _Policy] | None = None  # None (`policies:` empty): defaults
    min_decode_rate: _Rate = QualitySettings.min_decode_rate
    max_lag: _Duration = QualitySettings.max_lag_seconds
    stuck_after: _Duration = QualitySettings.stuck_after_seconds
    clock_skew: _Duration = QualitySettings.clock_skew_seconds
    sample_rows: _SampleRows = QualitySettings.sample_rows
    clock: _Clock = QualitySettings.clock

    @model_validator(mode="after")
    def _quarantine_only_row_checks(self) -> _QualityFile:
        for name, policy in (self.policies or {}).items():
            if policy == QUARANTINE and not CHECKS[name].rows:
                rows = ", ".join(check for check, spec in CHECKS.items() if spec.rows)
                raise _problem(
                    f"policies.{name}: quarantine applies to row checks only ({rows}); use "
                    "fail or warn",
                    at=("policies", name),
                )
        return self

    def settings(self) -> QualitySettings:
        defaults = QualitySettings()
        return QualitySettings(
            policies=defaults.policies | (self.policies or {}),
            min_decode_rate=self.min_decode_rate,
            max_lag_seconds=self.max_lag,
            stuck_after_seconds=self.stuck_after,
            clock_skew_seconds=self.clock_skew,
            sample_rows=self.sample_rows,
            clock=self.clock,
        )


class _PipelineFile(_Section):
    version: Annotated[Literal[1], _expect("1 (the only version so far)")] = 1
    lake: _LocalPath = "lake"
    reports: _LocalPath | None = None
    inputs: _Inputs = ["exports/*"]
    time_zone: _TimeZone = "UTC"
    topics: dict[str, _TopicFile] = {}
    changefeeds: dict[str, _ChangefeedFile] | None = None
    limits: _LimitsFile = _LimitsFile()
    quality: _QualityFile = _QualityFile()
    storage: _StorageFile = _StorageFile()

    @model_validator(mode="after")
    def _kafka_topics_configured(self) -> _PipelineFile:
        kafka = [entry.kafka for entry in self.inputs if not isinstance(entry, str)]
        unknown = [t for source in kafka for t in source.topics if t not in self.topics]
        if unknown and self.topics:  # no topics at all: said once, below
            raise _problem(
                f"inputs: kafka topics must be configured topics; unknown: {unknown}",
                at=("inputs",),
            )
        return self

    @model_validator(mode="after")
    def _every_topic_in_one_changefeed(self) -> _PipelineFile:
        if not self.topics:
            raise _problem("no topics configured", at=("topics",))
        if self.changefeeds is None:
            return self
        if not self.changefeeds:
            raise _problem(
                "changefeeds: none given (leave the key out: each topic is a changefeed of its "
                "own)",
                at=("changefeeds",),
            )
        for name, feed in self.changefeeds.items():
            unknown = [topic for topic in feed.topics if topic not in self.topics]
            if unknown:
                raise _problem(
                    f"changefeeds.{name}: topics must name configured topics; unknown: {unknown}",
                    at=("changefeeds", name, "topics"),
                )
        for topic in self.topics:
            owners = [name for name, feed in self.changefeeds.items() if topic in feed.topics]
            if len(owners) != 1:
                found = f"in {', '.join(owners)}" if owners else "in none"
                raise _problem(
                    f"changefeeds: topic {topic} must belong to exactly one changefeed, it is "
                    f"{found}",
                    at=("changefeeds",),
                )
        return self


# What pydantic's own error types mean, said the way the rest of the messages say it.
_PYDANTIC_WORDS = {
    "missing": "required",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "string_type": "expected text",
    "extra_forbidden": "unknown key",
    "list_type": "expected a list",
    "union_tag_not_found": "expected a glob pattern or a kafka: mapping",
}


def _describe(error: dict[str, Any], source: Path, lines: dict[tuple[str, ...], int]) -> str:
    """One schema error as "<file> line <n>: <key>: <what>" (the key left out at the top)."""
    loc = tuple(part for part in error["loc"] if part not in (_PATTERN_TAG, _KAFKA_TAG))
    kind = error["type"]
    context = error.get("ctx") or {}
    if kind == "problem":
        line, what = _line_of(loc + tuple(context["at"]), lines), context["message"]
    else:
        line = _line_of(loc, lines)
        what = _PYDANTIC_WORDS.get(kind, error["msg"])
        if kind != "missing":
            what += f", got {_shown(error['input'])}"
    key = _dotted(loc)
    return redact_text(f"{source} line {line}: {key + ': ' if key else ''}{what}")


def _shown(value: Any, limit: int = 80) -> str:
    text = redact_text(repr(value))  # before it is cut: a cut URL may lose the "@" that shows
    return text if len(text) <= limit else text[: limit - 3] + "..."  # where its password ends


# --- the config the stages use -----------------------------------------------------------------


def _pipeline_config(checked: _PipelineFile, source: Path) -> PipelineConfig:
    base = source.parent
    s3 = _s3_settings(checked.storage.s3)
    topics = {
        name: _topic_config(name, topic, base, checked.time_zone, source, s3)
        for name, topic in checked.topics.items()
    }
    if checked.changefeeds is None:  # each topic on its own
        changefeeds = {
            name: ChangefeedConfig(name, (name,), _sends_watermarks(topic))
            for name, topic in topics.items()
        }
    else:
        changefeeds = {
            name: ChangefeedConfig(name, tuple(feed.topics), feed.watermarks, feed.cutoff_ts)
            for name, feed in checked.changefeeds.items()
        }
    lake = base / checked.lake
    return PipelineConfig(
        source=source,
        lake=lake,
        reports=base / checked.reports if checked.reports else lake.parent / "reports",
        inputs=tuple(
            entry if is_object_uri(entry) else str(base / entry)
            for entry in checked.inputs
            if isinstance(entry, str)
        ),
        time_zone=checked.time_zone,
        topics=topics,
        changefeeds=changefeeds,
        limits=Limits(**{name: int(value) for name, value in checked.limits}),
        quality=checked.quality.settings(),
        kafka_inputs=tuple(
            KafkaSourceConfig(
                bootstrap_servers=entry.kafka.bootstrap_servers,
                topics=tuple(entry.kafka.topics),
                options=tuple(entry.kafka.options.items()),
                options_env=tuple(entry.kafka.options_env.items()),
                timeout_seconds=entry.kafka.timeout,
            )
            for entry in checked.inputs
            if not isinstance(entry, str)
        ),
        s3=s3,
    )


def _s3_settings(s3: _S3File | None) -> S3Settings | None:
    if s3 is None:
        return None
    return S3Settings(
        endpoint=s3.endpoint.rstrip("/") if s3.endpoint else None,
        region=s3.region,
        path_style=s3.path_style,
        access_key_id_env=s3.access_key_id_env,
        secret_access_key_env=s3.secret_access_key_env,
        session_token_env=s3.session_token_env,
    )


def _topic_config(
    name: str,
    topic: _TopicFile,
    base: Path,
    default_zone: str,
    source: Path,
    s3: S3Settings | None = None,
) -> TopicConfig:
    registry = topic.schema_registry
    return TopicConfig(
        name=name,
        protocol=topic.protocol,
        partitions=topic.partitions,
        time_zone=topic.time_zone or default_zone,
        compression=topic.compression,
        enable_tidb_extension=topic.enable_tidb_extension,
        schema_dir=base / topic.schema_dir if topic.schema_dir else None,
        schemas_topic=base / topic.schemas_topic if topic.schemas_topic else None,
        schema_registry=(
            SchemaRegistryConfig(registry.url, registry.username, registry.password_env)
            if registry
            else None
        ),
        claim_check_roots=tuple(absolute_root(root, base) for root in topic.claim_check_roots),
        options=tuple(sorted(topic.options.items())),
        source=source,
        schema=topic.upstream_schema,
        column_types=tuple(sorted(topic.column_types.items())),
        s3=s3 if topic.claim_check_roots else None,
    )


def absolute_root(root: str, base: Path) -> str:
    """A claim-check root as the store wants it: a URI as given, a path made absolute."""
    return root if "://" in root or root.startswith("/") else str((base / root).resolve())


def _sends_watermarks(topic: TopicConfig) -> bool:
    if topic.protocol == "avro":
        return False
    return topic.protocol != "canal-json" or topic.enable_tidb_extension
