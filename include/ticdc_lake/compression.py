"""TiCDC's `large-message-handle-compression` (PROTOCOLS.md §1.6).

The message never says whether it is compressed, so the codec comes from configuration.
snappy is the block format (not framed); lz4 is the frame format.
"""

from __future__ import annotations

import cramjam

from ticdc_lake.errors import ConfigError, DecodeError

CODECS = ("none", "snappy", "lz4")
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"


def check_codec(codec: str) -> str:
    if codec not in CODECS:
        raise ConfigError(f"value compression must be one of {', '.join(CODECS)}, not {codec!r}")
    return codec


def compress(codec: str, data: bytes) -> bytes:
    if codec == "none":
        return data
    if codec == "snappy":
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(data))
    raise ConfigError(f"value compression must be one of {', '.join(CODECS)}, not {codec!r}")


def decompress(codec: str, data: bytes) -> bytes:
    """Undo `codec`; a payload that is not in that format raises DecodeError saying so."""
    if codec == "none":
        return data
    try:
        if codec == "snappy":
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == "lz4":
            return bytes(cramjam.lz4.decompress(data))
    except cramjam.DecompressionError as exc:
        hint = ""
        if codec == "snappy" and data[:4] == _LZ4_FRAME_MAGIC:
            hint = " (it starts with the LZ4 frame magic: is the topic configured for lz4?)"
        elif data[:1] in (b"{", b"["):
            hint = " (it looks like plain JSON: is the topic configured for compression none?)"
        raise DecodeError(f"payload is not valid {codec}-compressed data{hint}: {exc}") from exc
    raise ConfigError(f"value compression must be one of {', '.join(CODECS)}, not {codec!r}")
