"""A Kafka record as it arrives in an export file: the input of every decoder."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())
    # Kafka's timestamp type: 0 CreateTime, 1 LogAppendTime; None when the export does not say
    # (or says there is none).
    timestamp_type: int | None = None
