"""TiCDC's `large-message-handle-compression` (PROTOCOLS.md §1.6).

The message never says whether it is compressed, so the codec comes from configuration.
snappy is the block format (not framed); lz4 is the frame format.

A few megabytes of either can expand to gigabytes, so the output is capped at
`limits.max_message_bytes` before it is made: snappy's block starts with its uncompressed
length, which is checked first; an lz4 frame need not say its size, so it is decompressed into
a buffer one byte larger than the limit, and decompression stops when that buffer is full.
"""

from __future__ import annotations

import cramjam
import pyarrow as pa

from ticdc_lake.errors import ConfigError, DecodeError
from ticdc_lake.limits import LimitExceededError, Limits, check_limit

CODECS = ("none", "snappy", "lz4")
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
# What cramjam's lz4 says when the output buffer is full and there is more to write (the text
# of Rust's io::ErrorKind::WriteZero).
_BUFFER_FULL = "failed to write whole buffer"


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


def decompress(codec: str, data: bytes, limits: Limits) -> bytes:
    """Undo `codec`; a payload that is not in that format raises DecodeError saying so, one
    that would expand past `limits.max_message_bytes` LimitExceededError (before it does)."""
    if codec == "none":
        return data
    try:
        if codec == "snappy":
            return _snappy(data, limits)
        if codec == "lz4":
            return _lz4(data, limits)
    except cramjam.DecompressionError as exc:
        hint = ""
        if codec == "snappy" and data[:4] == _LZ4_FRAME_MAGIC:
            hint = " (it starts with the LZ4 frame magic: is the topic configured for lz4?)"
        elif data[:1] in (b"{", b"["):
            hint = " (it looks like plain JSON: is the topic configured for compression none?)"
        raise DecodeError(f"payload is not valid {codec}-compressed data{hint}: {exc}") from exc
    raise ConfigError(f"value compression must be one of {', '.join(CODECS)}, not {codec!r}")


def _snappy(data: bytes, limits: Limits) -> bytes:
    # The block's leading varint is its uncompressed length; the decompressor makes exactly
    # that many bytes or fails, so checking it bounds the output.
    size = cramjam.snappy.decompress_raw_len(data)
    check_limit("snappy-decompressed value", limits, "max_message_bytes", size)
    return bytes(cramjam.snappy.decompress_raw(data))


def _lz4(data: bytes, limits: Limits) -> bytes:
    # Uninitialised memory: only the pages the output is written to are ever touched.
    out = pa.allocate_buffer(limits.max_message_bytes + 1)
    try:
        size = cramjam.lz4.decompress_into(data, out)
    except cramjam.DecompressionError as exc:
        if _BUFFER_FULL not in str(exc):
            raise
        size = len(out)
    if size > limits.max_message_bytes:
        raise LimitExceededError(
            "lz4-decompressed value",
            "max_message_bytes",
            limits.max_message_bytes,
        )
    return out[:size].to_pybytes()
