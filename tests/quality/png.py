"""The pixels of a PNG file, decoded with zlib and numpy (8-bit RGB/RGBA, not interlaced: what
Chromium's screenshots are), so a test can tell a rendered page from a blank one."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {2: 3, 6: 4}  # colour type -> bytes per pixel at bit depth 8


def png_pixels(path: Path) -> np.ndarray:
    """A (height, width, channels) uint8 array of the image's pixels."""
    data = path.read_bytes()
    if not data.startswith(_SIGNATURE):
        raise ValueError(f"{path}: not a PNG file (signature {data[:8]!r})")
    pos, chunks, header = len(_SIGNATURE), [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in _CHANNELS or interlace:
        raise ValueError(f"{path}: depth {depth}, colour type {colour}, interlace {interlace}")
    channels = _CHANNELS[colour]
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), np.uint8)
    rows = raw.reshape(height, 1 + width * channels)
    image = np.zeros((height, width * channels), np.uint8)
    previous = np.zeros(width * channels, np.uint8)
    for y in range(height):
        image[y] = previous = _unfilter(rows[y, 0], rows[y, 1:], previous, channels)
    return image.reshape(height, width, channels)


def _unfilter(kind: int, line: np.ndarray, above: np.ndarray, channels: int) -> np.ndarray:
    if kind == 0:
        return line
    if kind == 2:
        return line + above  # uint8 wraps: the modulo 256 PNG wants
    if kind == 1:  # Sub: a running sum per channel
        per_channel = line.reshape(-1, channels).astype(np.int64)
        return (np.cumsum(per_channel, axis=0) % 256).astype(np.uint8).ravel()
    out = bytearray(line.tobytes())
    up = above.tobytes()
    for i in range(len(out)):
        left = out[i - channels] if i >= channels else 0
        if kind == 3:
            out[i] = (out[i] + (left + up[i]) // 2) & 0xFF
        else:  # 4: Paeth
            corner = up[i - channels] if i >= channels else 0
            guess = left + up[i] - corner
            to_left, to_up, to_corner = abs(guess - left), abs(guess - up[i]), abs(guess - corner)
            if to_left <= to_up and to_left <= to_corner:
                best = left
            elif to_up <= to_corner:
                best = up[i]
            else:
                best = corner
            out[i] = (out[i] + best) & 0xFF
    return np.frombuffer(bytes(out), np.uint8)
