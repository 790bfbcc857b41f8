"""The project's exceptions: one per concern, each carrying what a person needs to act."""

from __future__ import annotations

import struct

# What malformed input makes parsers raise. Each is turned into a DecodeError naming the record,
# so a caller only ever has to handle the project's own error; the original stays chained.
MALFORMED_INPUT_ERRORS = (
    ValueError,  # includes orjson.JSONDecodeError, UnicodeDecodeError, binascii.Error
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    OverflowError,
    EOFError,
    struct.error,
    RecursionError,
)


def location_text(**places: object) -> str:
    """Where an error happened, for its message: "name value" for each place known (not None),
    in the order given, comma-separated ("file f.json, topic t, offset 7")."""
    return ", ".join(f"{name} {value}" for name, value in places.items() if value is not None)


class TicdcLakeError(Exception):
    """Base of every error this project raises on purpose."""


class StageFailed(TicdcLakeError):
    """A stage did its work and found failures that must fail its job: ``result`` is what it
    did, ``failures`` what failed (name -> why)."""

    def __init__(self, result: object, failures: dict[str, str]):
        self.result = result
        self.failures = dict(failures)
        super().__init__("; ".join(f"{what}: {why}" for what, why in sorted(failures.items())))


class ConfigError(TicdcLakeError):
    """A pipeline or decoder setting is missing or invalid."""


class DecodeError(TicdcLakeError):
    """A Kafka record could not be decoded.

    Carries the record's coordinates (topic, partition, offset), the protocol, the reason and,
    where known, the byte position inside the key or value where decoding stopped.
    """

    def __init__(
        self,
        reason: str,
        *,
        protocol: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        byte_offset: int | None = None,
        source_file: str | None = None,
    ):
        self.reason = reason
        self.protocol = protocol
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.byte_offset = byte_offset
        self.source_file = source_file
        super().__init__(reason)

    def located(self, **coordinates) -> DecodeError:
        """Fill in coordinates the raiser did not know (never overwrite the ones it gave)."""
        for name, value in coordinates.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        return self

    def __str__(self) -> str:
        where = location_text(
            file=self.source_file,
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
            byte=self.byte_offset,
        )
        prefix = f"{self.protocol}: " if self.protocol else ""
        location = f" ({where})" if where else ""
        return f"{prefix}{self.reason}{location}"


class ClaimCheckError(DecodeError):
    """A claim-check location is outside the configured roots, or its object is unreadable."""


class SchemaNotFoundError(DecodeError):
    """An Avro schema id is not known to the configured schema source."""
