"""The protocol registry: protocol name → decoder and encoder classes, imported on demand."""

from __future__ import annotations

import importlib

from ticdc_lake.errors import ConfigError
from ticdc_lake.protocols.base import CodecSettings, Decoder, Encoder, KafkaMessage

_CODECS = {
    "open-protocol": ("ticdc_lake.protocols.open_protocol", "OpenProtocol"),
    "craft": ("ticdc_lake.protocols.craft", "Craft"),
    "canal-json": ("ticdc_lake.protocols.canal_json", "CanalJson"),
    "avro": ("ticdc_lake.protocols.avro", "Avro"),
}
PROTOCOLS = tuple(_CODECS)

__all__ = [
    "PROTOCOLS",
    "CodecSettings",
    "Decoder",
    "Encoder",
    "KafkaMessage",
    "make_decoder",
    "make_encoder",
]


def _codec_class(protocol: str, role: str):
    try:
        module_name, prefix = _CODECS[protocol]
    except KeyError:
        raise ConfigError(
            f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}"
        ) from None
    return getattr(importlib.import_module(module_name), prefix + role)


def make_decoder(protocol: str, settings: CodecSettings | None = None) -> Decoder:
    return _codec_class(protocol, "Decoder")(settings)


def make_encoder(protocol: str, settings: CodecSettings | None = None) -> Encoder:
    return _codec_class(protocol, "Encoder")(settings)
