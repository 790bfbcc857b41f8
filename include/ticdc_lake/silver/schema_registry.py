"""Where Avro writer schemas come from (PROTOCOLS.md §5.1).

TiCDC's Avro messages name their writer schema by a Confluent schema id; every source here answers
`get_schema(schema_id) -> WriterSchema`, and caches the answer, so each schema is fetched and
parsed once. `subjects_of(schema_id)` gives the subjects the id is registered under, where the
source knows them: TiCDC up to v6.0 wrote no namespace, and its subjects, `<schema>_<table>-value`,
are then the only place a record's upstream schema is named.

* `RegistrySchemaSource`: a Confluent Schema Registry over REST (`GET /schemas/ids/{id}`, basic
  auth) through confluent-kafka's `SchemaRegistryClient`, passed in or built from a URL.
* `DirectorySchemaSource`: a directory of exported schemas, one file per id: `<id>.avsc` holding
  the schema JSON, or `<id>.json` holding the registry's response to `GET /schemas/ids/{id}`
  (`{"schema": "<schema JSON as a string>", ...}`; a bare schema object is accepted too) or to
  `GET /subjects/{subject}/versions/{version}`, whose `subject` it then knows.
* `SchemasTopicSource`: an export of the registry's own `_schemas` topic.
* `InMemorySchemaRegistry`: what the encoder registers into, assigning ids as a registry does for
  TiCDC's registrations; it writes itself out as a directory or as `_schemas` records.

An unknown id raises SchemaNotFoundError (a DecodeError: the record cannot be decoded). A registry
that cannot be reached, or refuses the credentials, raises SchemaRegistryUnavailableError or
ConfigError instead: those are not faults of the record, and quarantining every record of a topic
because a server is down would hide the outage.
"""

from __future__ import annotations

import base64
import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ticdc_lake.bronze.exports import ExportError, read_export
from ticdc_lake.errors import ConfigError, DecodeError, SchemaNotFoundError, TicdcLakeError
from ticdc_lake.records import KafkaRecord
from ticdc_lake.redact import redact_text, redact_url, without_userinfo

SCHEMAS_TOPIC = "_schemas"


class SchemaRegistryUnavailableError(TicdcLakeError):
    """The schema registry could not be asked (network failure, server error)."""


@dataclass(frozen=True)
class WriterSchema:
    """One registered schema: its id, its text as stored, and that text parsed as JSON.

    `definition` keeps every custom attribute (TiCDC's `connect.parameters`), which a parsed
    fastavro schema would not promise to keep; decoders build their readers from it.
    """

    schema_id: int
    text: str
    definition: Any

    @classmethod
    def parse(cls, schema_id: int, text: str, source: str) -> WriterSchema:
        try:
            definition = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"schema id {schema_id} from {source} is not JSON: {exc}") from exc
        return cls(schema_id, text, definition)


def subject_for(topic: str, part: str) -> str:
    """TopicNameStrategy as TiCDC applies it: `<topic, every "." made "_">-key` / `-value`."""
    if part not in ("key", "value"):
        raise ValueError(f"a subject is for the key or the value, not {part!r}")
    return f"{topic.replace('.', '_')}-{part}"


class SchemaSource(ABC):
    """Gives the writer schema for a schema id; each id is looked up and parsed once."""

    def __init__(self, description: str):
        self.description = description
        self._cache: dict[int, WriterSchema] = {}
        self._subjects_cache: dict[int, tuple[str, ...]] = {}

    def get_schema(self, schema_id: int) -> WriterSchema:
        schema = self._cache.get(schema_id)
        if schema is None:
            text = self._fetch(schema_id)
            if text is None:
                raise SchemaNotFoundError(f"schema id {schema_id} is not in {self.description}")
            schema = self._cache[schema_id] = WriterSchema.parse(schema_id, text, self.description)
        return schema

    def subjects_of(self, schema_id: int) -> tuple[str, ...]:
        """The subjects `schema_id` is registered under, as far as this source knows them."""
        found = self._subjects_cache.get(schema_id)
        if found is None:
            found = self._subjects_cache[schema_id] = tuple(sorted(self._fetch_subjects(schema_id)))
        return found

    @abstractmethod
    def _fetch(self, schema_id: int) -> str | None:
        """The schema text registered under `schema_id`, or None when the id is unknown."""

    def _fetch_subjects(self, schema_id: int) -> Iterable[str]:
        """The subjects of `schema_id`; none where the source does not record them."""
        return ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.description})"


class RegistrySchemaSource(SchemaSource):
    """A Confluent Schema Registry, asked through confluent-kafka's `SchemaRegistryClient`.

    Pass a client (tests may pass any object with `get_schema(schema_id)`), or build one with
    `from_url`. The client caches what it fetched; this source caches the parsed schemas.
    Its description, and every error it raises, show the URL without the password.
    """

    def __init__(self, client: Any, description: str | None = None, secrets: tuple[str, ...] = ()):
        super().__init__(redact_text(description or f"schema registry {_registry_url(client)}"))
        self.client = client
        self._secrets = secrets  # masked in any text a server or library sends back

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        conf: Mapping[str, Any] | None = None,
    ) -> RegistrySchemaSource:
        """A source for `url`, with basic auth when a username is given.

        Credentials in the URL (`https://user:password@host`) are taken out of it and sent as
        basic auth, so the client, its HTTP library and its logs only ever see the bare URL;
        giving them both in the URL and as `username`/`password` is a ConfigError.
        `conf` adds SchemaRegistryClient settings (`timeout`, `max.retries`, `ssl.ca.location`).
        """
        from confluent_kafka.schema_registry import SchemaRegistryClient

        bare, url_user, url_password = without_userinfo(url)
        shown = redact_url(url)
        if url_user is not None and username is not None:
            raise ConfigError(
                f"schema registry {shown}: credentials are both in the URL and given as "
                "username/password-env; give them once (password-env keeps the secret out of "
                "the config file)"
            )
        if url_user is not None:
            username, password = url_user, url_password
        settings: dict[str, Any] = {"url": bare, **(conf or {})}
        if username is not None:
            settings["basic.auth.user.info"] = f"{username}:{password or ''}"
        secrets = _credential_forms(username, password)
        try:
            client = SchemaRegistryClient(settings)
        except (ValueError, TypeError) as exc:
            message = redact_text(str(exc), secrets)
            raise ConfigError(f"schema registry settings for {shown}: {message}") from None
        return cls(client, f"schema registry {bare}", secrets=secrets)

    def _fetch(self, schema_id: int) -> str | None:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self.client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None
            if exc.http_status_code in (401, 403):
                raise ConfigError(
                    self._safe(
                        f"{self.description} refused the credentials "
                        f"(HTTP {exc.http_status_code}): {exc.error_message}"
                    )
                ) from None
            raise SchemaRegistryUnavailableError(
                self._safe(f"{self.description} failed to give schema id {schema_id}: {exc}")
            ) from None
        except _http_errors() as exc:
            raise SchemaRegistryUnavailableError(
                self._safe(
                    f"{self.description} could not be reached for schema id {schema_id}: {exc}"
                )
            ) from None
        schema_type = getattr(schema, "schema_type", None) or "AVRO"
        if schema_type != "AVRO":
            raise DecodeError(
                f"schema id {schema_id} in {self.description} is a {schema_type} schema, not Avro"
            )
        if getattr(schema, "references", None):
            raise DecodeError(
                f"schema id {schema_id} in {self.description} uses schema references, "
                "which TiCDC never registers"
            )
        return schema.schema_str

    def _fetch_subjects(self, schema_id: int) -> Iterable[str]:
        """`GET /schemas/ids/{id}/subjects` (soft-deleted versions too: their records remain)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        ask = getattr(self.client, "get_subjects_by_schema_id", None)
        if ask is None:  # a client without it (a test's fake) knows no subjects
            return ()
        try:
            subjects = ask(schema_id, deleted=True)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:  # an id or a registry version without the endpoint
                return ()
            raise SchemaRegistryUnavailableError(
                self._safe(
                    f"{self.description} failed to give the subjects of id {schema_id}: {exc}"
                )
            ) from None
        except _http_errors() as exc:
            raise SchemaRegistryUnavailableError(
                self._safe(f"{self.description} could not be reached for id {schema_id}: {exc}")
            ) from None
        return [subject for subject in subjects if isinstance(subject, str)]

    def _safe(self, text: str) -> str:
        """``text`` with URL userinfo, Basic/Bearer credentials and this registry's password
        masked: what a server or the HTTP library says is not ours to trust with a secret (a
        registry may echo the request's Authorization header into its error)."""
        return redact_text(text, self._secrets)


def _credential_forms(username: str | None, password: str | None) -> tuple[str, ...]:
    """The password, and the basic-auth token it travels in, for masking: a server may echo
    either without saying it is a credential."""
    if not password:
        return ()
    token = base64.b64encode(f"{username or ''}:{password}".encode()).decode()
    return (password, token)


def _http_errors() -> tuple[type[Exception], ...]:
    """Network errors of confluent-kafka's HTTP client: httpx2 where installed, else httpx."""
    errors = []
    for module in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except ImportError:
            continue
    return tuple(errors)


def _registry_url(client: Any) -> str:
    rest = getattr(client, "_rest_client", None)
    urls = getattr(rest, "base_urls", None)
    return ",".join(urls) if urls else type(client).__name__


class DirectorySchemaSource(SchemaSource):
    """A directory of exported schemas: `<id>.avsc` (schema JSON) or `<id>.json`.

    A `.json` file holds the registry's `GET /schemas/ids/{id}` response, whose `schema` member
    is the schema as a JSON string; a file holding the schema object itself is accepted too.
    Files are read when their id is first asked for, so schemas added later are found.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ConfigError(f"schema directory {self.directory} does not exist")
        super().__init__(f"schema directory {self.directory}")

    def _fetch(self, schema_id: int) -> str | None:
        avsc = self.directory / f"{schema_id}.avsc"
        if avsc.is_file():
            return avsc.read_text(encoding="utf-8")
        response = self.directory / f"{schema_id}.json"
        if response.is_file():
            return _schema_from_response(response.read_bytes(), f"{response}")
        return None

    def _fetch_subjects(self, schema_id: int) -> Iterable[str]:
        """The `subject` of a `<id>.json` holding `GET /subjects/{subject}/versions/{version}`."""
        response = self.directory / f"{schema_id}.json"
        if not response.is_file():
            return ()
        try:
            document = orjson.loads(response.read_bytes())
        except orjson.JSONDecodeError:
            return ()  # get_schema names the problem
        subject = document.get("subject") if isinstance(document, dict) else None
        return (subject,) if isinstance(subject, str) else ()


def _schema_from_response(data: bytes, where: str) -> str:
    """The schema text of a registry response `{"schema": "...", "schemaType": ...}`."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{where} is not JSON: {exc}") from exc
    if isinstance(document, dict) and isinstance(document.get("schema"), str):
        schema_type = document.get("schemaType") or "AVRO"
        if schema_type != "AVRO":
            raise DecodeError(f"{where} holds a {schema_type} schema, not Avro")
        return document["schema"]
    return data.decode("utf-8")


class SchemasTopicSource(SchemaSource):
    """An export of the registry's `_schemas` topic, read once when built.

    Records with key `{"keytype": "SCHEMA", "subject", "version", "magic"}` carry the value
    `{"subject", "version", "id", "schema", "schemaType"?, "deleted"?}`. Other key types
    (CONFIG, MODE, NOOP, DELETE_SUBJECT, ...) are skipped. A deleted subject version (a value with
    `"deleted": true`, or a null value) does not remove its id: ids are never reused, the registry
    still serves soft-deleted schemas by id, and records written before the delete still name it.
    """

    def __init__(self, records: Iterable[KafkaRecord], description: str | None = None):
        self._texts: dict[int, str] = {}
        self.versions: dict[tuple[str, int], int] = {}  # (subject, version) -> id, live ones
        self._registered: dict[int, set[str]] = {}  # id -> every subject it was registered in
        count = 0
        for record in records:
            self._add(record)
            count += 1
        super().__init__(description or f"_schemas export ({count} records)")

    @classmethod
    def from_file(cls, path: str | Path) -> SchemasTopicSource:
        """Read an export file of the topic, in any layout `exports.read_export` reads."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"_schemas export {path} does not exist")
        try:
            records = list(read_export(path))
        except ExportError as exc:
            raise ConfigError(f"_schemas export {path} cannot be read: {exc}") from exc
        return cls(records, f"_schemas export {path}")

    def _add(self, record: KafkaRecord) -> None:
        where = f"_schemas record at partition {record.partition}, offset {record.offset}"
        if record.key is None:
            return
        try:
            key = orjson.loads(record.key)
            if not isinstance(key, dict) or key.get("keytype") != "SCHEMA":
                return
            subject_version = (str(key["subject"]), int(key["version"]))
            if record.value is None:
                self.versions.pop(subject_version, None)
                return
            value = orjson.loads(record.value)
            schema_id, text = int(value["id"]), value["schema"]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where} is not a schema registration: {exc!r}") from exc
        if not isinstance(text, str):
            raise ConfigError(f"{where}: `schema` must be the schema JSON as a string")
        if (value.get("schemaType") or "AVRO") != "AVRO":
            return
        known = self._texts.setdefault(schema_id, text)
        if known != text:
            raise ConfigError(f"{where} registers id {schema_id} again with a different schema")
        self._registered.setdefault(schema_id, set()).add(subject_version[0])
        if value.get("deleted"):
            self.versions.pop(subject_version, None)
        else:
            self.versions[subject_version] = schema_id

    def _fetch(self, schema_id: int) -> str | None:
        return self._texts.get(schema_id)

    def _fetch_subjects(self, schema_id: int) -> Iterable[str]:
        return self._registered.get(schema_id, ())


class InMemorySchemaRegistry(SchemaSource):
    """A registry in memory, assigning ids the way a Confluent registry does.

    Ids count up from 1 in registration order and are global: registering a schema text that is
    already known, under any subject, gives its existing id (a new version only if the subject
    does not hold it yet). The Avro encoder registers into this as TiCDC registers into the real
    registry: the key schema first, then the value schema, for every new table schema.
    """

    def __init__(self, first_id: int = 1):
        super().__init__("in-memory schema registry")
        self._next_id = first_id
        self._ids_by_text: dict[str, int] = {}
        self._texts: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids of versions 1, 2, ...
        self._log: list[tuple[str, int, int]] = []  # (subject, version, id), registration order

    def register(self, subject: str, schema_text: str) -> int:
        """Register `schema_text` under `subject`; return its id."""
        schema_id = self._ids_by_text.get(schema_text)
        if schema_id is None:
            schema_id = self._next_id
            self._next_id += 1
            self._ids_by_text[schema_text] = schema_id
            self._texts[schema_id] = schema_text
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
            self._log.append((subject, len(versions), schema_id))
        return schema_id

    def _fetch(self, schema_id: int) -> str | None:
        return self._texts.get(schema_id)

    def subjects_of(self, schema_id: int) -> tuple[str, ...]:
        """Not cached: registering goes on while the registry is read."""
        return tuple(sorted(subject for subject, ids in self.subjects.items() if schema_id in ids))

    def write_directory(self, directory: str | Path) -> Path:
        """Write every schema as `<id>.avsc`, the layout DirectorySchemaSource reads."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for schema_id, text in self._texts.items():
            (directory / f"{schema_id}.avsc").write_text(text, encoding="utf-8")
        return directory

    def schemas_records(self, topic: str = SCHEMAS_TOPIC, partition: int = 0) -> list[KafkaRecord]:
        """The `_schemas` topic records a registry would have written for these registrations."""
        records = []
        for offset, (subject, version, schema_id) in enumerate(self._log):
            key = {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}
            value = {
                "subject": subject,
                "version": version,
                "id": schema_id,
                "schema": self._texts[schema_id],
                "deleted": False,
            }
            records.append(
                KafkaRecord(topic, partition, offset, orjson.dumps(key), orjson.dumps(value))
            )
        return records
