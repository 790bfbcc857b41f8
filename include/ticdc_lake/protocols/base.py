"""What every protocol module provides: a Decoder and an Encoder over the one event model."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ticdc_lake.compression import check_codec
from ticdc_lake.errors import MALFORMED_INPUT_ERRORS, DecodeError
from ticdc_lake.lake.names import qualified_name
from ticdc_lake.limits import Limits, check_limit
from ticdc_lake.records import KafkaRecord
from ticdc_lake.silver.claimcheck import ClaimCheckStore
from ticdc_lake.silver.events import Event, RowEvent
from ticdc_lake.silver.values import check_events, events_problem

if TYPE_CHECKING:
    from ticdc_lake.silver.rows import ChangeRows


@dataclass(frozen=True)
class CodecSettings:
    """Per-topic settings a codec needs (the pipeline config's topic section)."""

    compression: str = "none"  # none | snappy | lz4 (§1.6)
    enable_tidb_extension: bool = True  # Canal-JSON `_tidb`, Avro `_tidb_*` fields
    claim_check: ClaimCheckStore | None = None  # where claim-check objects may be read from
    schema_source: Any = None  # Avro: a SchemaSource (registry, directory or _schemas export)
    # Avro, TiCDC up to v6.0, whose records name no schema: the topic's `schema:`, and its
    # `column-types:` ("<table>.<column>" → the column's type, where the Avro type says less).
    upstream_schema: str | None = None
    column_types: tuple[tuple[str, str], ...] = ()
    max_batch_size: int = 16  # encoders: row events per batched message (Open Protocol, Craft)
    options: tuple[tuple[str, Any], ...] = ()  # protocol-specific knobs, documented per protocol
    limits: Limits = field(default_factory=Limits)  # bounds on what a message may make us read

    def __post_init__(self):
        check_codec(self.compression)

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    """One encoded Kafka message (key may be None, value None for tombstones)."""

    key: bytes | None
    value: bytes | None


class Decoder(ABC):
    """Decodes one Kafka record into events; raises only DecodeError."""

    protocol: ClassVar[str]

    def __init__(self, settings: CodecSettings | None = None):
        self.settings = settings or CodecSettings()

    def decode(self, record: KafkaRecord) -> list[Event]:
        """The record's events; every row value checked against its column's type."""
        try:
            check_record_size(record, self.settings.limits)
            events = self._fast_events(record)
            # A fast value that does not fit its type is left to the reference, which names it.
            if events is not None and (
                self._values_surely_fit(events) or events_problem(events) is None
            ):
                return check_image_widths(events, self.settings.limits)
            events = self._decode(record)
            if not self._values_surely_fit(events):
                check_events(events)
            return check_image_widths(events, self.settings.limits)
        except DecodeError as exc:
            exc.located(
                protocol=self.protocol,
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
            )
            raise
        except MALFORMED_INPUT_ERRORS as exc:
            raise DecodeError(
                f"malformed {self.protocol} message: {type(exc).__name__}: {exc}",
                protocol=self.protocol,
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
            ) from exc

    def decode_into(self, record: KafkaRecord, changes: ChangeRows, bronze_batch: int) -> bool:
        """Write the record's row events straight into ``changes`` as silver rows, when compiled
        code takes every one of them as ``decode`` would decode it: True. False (the default)
        writes nothing and leaves the record to ``decode``, which decides, and names any
        problem."""
        return self.decode_parts_into(
            record.topic, record.partition, record.offset, record.key, record.value, changes,
            bronze_batch,
        )  # fmt: skip

    def decode_parts_into(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        changes: ChangeRows,
        bronze_batch: int,
    ) -> bool:
        """``decode_into`` of a record given by its parts: the decode stage's path, which
        builds a KafkaRecord only for the records this declines (2.3 us each)."""
        return False

    def _fast_events(self, record: KafkaRecord) -> list[Event] | None:
        """`_decode_fast`'s events, or None for `_decode` to decide. An exception there can
        only come from a Python function the compiled code calls back, on input the reference
        decoder refuses too, with no side effects: the reference then names the problem."""
        try:
            return self._decode_fast(record)
        except Exception:
            return None

    def _decode_fast(self, record: KafkaRecord) -> list[Event] | None:
        """The record's events from compiled speedups (their values are checked by `decode`);
        None leaves the record to `_decode`, the reference, which decides and names any
        problem."""
        return None

    @abstractmethod
    def _decode(self, record: KafkaRecord) -> list[Event]:
        """Decode; may raise DecodeError (coordinates are filled in by `decode`)."""

    def tables_named(self, record: KafkaRecord) -> frozenset[tuple[str, str]] | None:
        """The (schema, table) pairs a record that does not decode names, read as far as it
        allows: what gold lacks when it is quarantined. Empty: it holds no change (a
        watermark); None: it cannot be told (the default)."""
        if not fits_record_size(record, self.settings.limits):
            return None
        try:
            return self._tables_named(record)
        except (DecodeError, *MALFORMED_INPUT_ERRORS):
            return None

    def _tables_named(self, record: KafkaRecord) -> frozenset[tuple[str, str]] | None:
        return None

    def _values_surely_fit(self, events: list[Event]) -> bool:
        """True when a compiled check has found every row value within its type (a decoder
        with compiled speedups answers through their `events_fit`); False: values.py decides."""
        speedups = getattr(self, "speedups", None)
        return speedups is not None and speedups.events_fit(events)


def check_image_widths(events: list[Event], limits: Limits) -> list[Event]:
    """``events``, after checking that no row image has more columns than
    ``limits.max_table_columns`` (LimitExceededError naming the table otherwise)."""
    limit = limits.max_table_columns
    for event in events:
        if type(event) is RowEvent:
            for image in (event.columns, event.old_columns):
                if image is not None and len(image) > limit:
                    name = qualified_name(event.schema, event.table)
                    what = f"a row image of {name}: its column count"
                    check_limit(what, limits, "max_table_columns", len(image))
    return events


def fits_record_size(record: KafkaRecord, limits: Limits) -> bool:
    """Whether the record's key and value are each within ``limits.max_message_bytes``."""
    return fits_message_size(record.key, record.value, limits)


def fits_message_size(key: bytes | None, value: bytes | None, limits: Limits) -> bool:
    """``fits_record_size`` of a record's key and value (an absent one fits)."""
    limit = limits.max_message_bytes
    return (key is None or len(key) <= limit) and (value is None or len(value) <= limit)


def check_record_size(record: KafkaRecord, limits: Limits) -> None:
    """A key or value larger than ``limits.max_message_bytes`` is refused before it is parsed:
    TiCDC sends no message above its max-message-bytes, and parsing one costs many times its
    size in memory."""
    if fits_record_size(record, limits):
        return
    for part, raw in (("key", record.key), ("value", record.value)):
        if raw is not None:
            check_limit(f"Kafka record {part}", limits, "max_message_bytes", len(raw))


class Encoder(ABC):
    """Encodes the events of one Kafka partition, in order, into messages as TiCDC does.

    Encoders batch consecutive row events where the protocol batches (Open Protocol, Craft);
    DDL and resolved events always get a message of their own.
    """

    protocol: ClassVar[str]

    def __init__(self, settings: CodecSettings | None = None):
        self.settings = settings or CodecSettings()

    @abstractmethod
    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        """Messages for `events`; events a protocol cannot carry are left out (documented)."""
