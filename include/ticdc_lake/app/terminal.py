"""What the CLI prints, made safe to show: the one place every command's output passes.

    with printing():          # sys.stdout and sys.stderr through ``printable`` for the block
        ...
    printable(text) -> str    # control characters escaped, credentials masked

Names and messages come from data (table and column names, topic names, error texts quoting
records), and a terminal obeys what they hold: an ESC sequence clears the screen or moves the
cursor, a carriage return or backspace overwrites what was printed, a bidi override shows text
reversed. So every control character is shown as an escape instead, the way Python writes it:
C0 controls but newline and tab (``\\x1b``, ``\\r``), DEL (``\\x7f``), C1 controls (``\\x9b``), and
the invisible characters that reorder or separate lines (``\\u202e``, ``\\u2028``). Newline and tab
stay: they are the output's own layout (a name holding one starts a new line or column, but moves
nothing back and clears nothing). Other characters, accented letters, CJK, emoji, print as they
are. Every line is also passed through ``redact_text``: no credential reaches the terminal.

Bytes written to ``sys.stdout.buffer`` (``decode``'s JSON lines, already UTF-8 with C0 escaped
by JSON) get the same characters escaped in JSON's form (``\\u009b``), which decodes back to the
same text; they are data, printed as the events hold them, so they are not redacted.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from ticdc_lake.redact import redact_text

# Characters a terminal acts on or that reorder, hide or break lines of what it shows: C0 but
# newline and tab, DEL, C1; the Arabic letter mark, LRM/RLM, the bidi embeddings and overrides
# and their isolates; the Unicode line and paragraph separators.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)
_UNSAFE_ASCII = re.compile(b"[\x00-\x08\x0b-\x1f\x7f]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str) -> str:
    """``text`` as the CLI shows it: control characters escaped, credentials masked."""
    return _UNSAFE.sub(_escaped, redact_text(text))


def printable_json_bytes(data: bytes) -> bytes:
    """UTF-8 JSON with the characters ``printable`` escapes written as JSON escapes: the same
    JSON value (they can only occur inside its strings, where C0 is escaped already)."""
    if data.isascii() and not _UNSAFE_ASCII.search(data):  # not decoded to be looked at
        return data
    text = data.decode("utf-8", "surrogateescape")
    if not _UNSAFE.search(text):
        return data
    return _UNSAFE.sub(_json_escaped, text).encode("utf-8", "surrogateescape")


class _PrintableBytes:
    """``sys.stdout.buffer`` inside ``printing``: bytes through ``printable_json_bytes``."""

    def __init__(self, raw):
        self._raw = raw

    def write(self, data) -> int:
        self._raw.write(printable_json_bytes(bytes(data)))
        return len(data)

    def __getattr__(self, name: str):
        return getattr(self._raw, name)


class _PrintableText:
    """A text stream writing ``printable`` of what it is given to ``stream``, a line at a time,
    so a credential or an escape sequence split across writes is still seen whole (a partial
    line goes out when flushed). Not an io.IOBase: dropping it must not close ``stream``."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self._pending = ""
        self._lock = threading.Lock()  # compaction's threads may print

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            lines, newline, rest = self._pending.rpartition("\n")
            if newline:
                self._pending = rest
                self._stream.write(printable(lines + newline))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, ""
            if pending:
                self._stream.write(printable(pending))
        self._stream.flush()

    def close(self) -> None:  # `decode | head`: the CLI closes stderr on a broken pipe
        with contextlib.suppress(OSError, ValueError):
            self.flush()
        self._stream.close()

    @property
    def buffer(self) -> _PrintableBytes:
        return _PrintableBytes(self._stream.buffer)

    def __getattr__(self, name: str):  # encoding, isatty, fileno, closed...
        return getattr(self._stream, name)


@contextlib.contextmanager
def printing() -> Iterator[None]:
    """sys.stdout and sys.stderr through ``printable`` for the block, flushed at its end."""
    streams = sys.stdout, sys.stderr
    wrapped = _PrintableText(sys.stdout), _PrintableText(sys.stderr)
    sys.stdout, sys.stderr = wrapped
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams
        for stream in wrapped:
            with contextlib.suppress(OSError, ValueError):  # a closed pipe (`... | head`)
                stream.flush()
