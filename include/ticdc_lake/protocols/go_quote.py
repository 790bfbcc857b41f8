"""Go string quoting, as TiCDC applies it to binary CHAR/VARCHAR values (PROTOCOLS.md §2.4).

The Open Protocol writes BINARY/VARBINARY values as Go's `strconv.Quote(string(bytes))` with the
surrounding quotes cut off. `go_unquote` turns that text back into the exact bytes; `go_quote`
produces it. Python's `unicode_escape` codec is not a substitute: it decodes `\\xHH` to the code
point U+00HH (two UTF-8 bytes for HH >= 0x80) instead of the single raw byte, and it reads the
non-escaped text as Latin-1 rather than UTF-8.

The escape grammar (Go's `strconv.UnquoteChar` inside double quotes):

| text              | bytes                                                             |
|-------------------|-------------------------------------------------------------------|
| `\\a \\b \\f \\n \\r \\t \\v` | 07 08 0C 0A 0D 09 0B                                  |
| `\\\\` and `\\"`      | 5C and 22                                                        |
| `\\xHH`            | the single byte HH (exactly two hex digits)                      |
| `\\ooo`            | the single byte with that octal value (exactly three digits, <= 377) |
| `\\uHHHH`, `\\UHHHHHHHH` | the UTF-8 bytes of that code point (not a surrogate, <= U+10FFFF) |
| any other char    | its UTF-8 bytes; a bare `"` or newline is an error, as in Go      |
"""

from __future__ import annotations

import codecs
import re

from ticdc_lake.errors import DecodeError

_SIMPLE_ESCAPES = {
    "a": 0x07,
    "b": 0x08,
    "f": 0x0C,
    "n": 0x0A,
    "r": 0x0D,
    "t": 0x09,
    "v": 0x0B,
    "\\": 0x5C,
    '"': 0x22,
}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_OCTAL_DIGITS = frozenset("01234567")
_UNICODE_ESCAPE_WIDTH = {"x": 2, "u": 4, "U": 8}


# The whole grammar, for validating in C before the fast decode (possessive: no backtracking).
_VALID_QUOTED = re.compile(
    r'(?:[^\\"\n]++'
    r'|\\(?:[abfnrtv\\"]|x[0-9a-fA-F]{2}|[0-3][0-7]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}))*+'
)
_escape_decode = codecs.escape_decode


def go_unquote(text: str) -> bytes:
    """The bytes that `strconv.Quote` turned into `text` (quotes already removed).

    Raises DecodeError naming the character position of the first malformed escape.
    """
    if "\\" not in text:
        _check_plain(text, 0)
        return text.encode()
    if _VALID_QUOTED.fullmatch(text) is None:
        return _unquote_slowly(text)  # raises, naming the first bad escape
    if "\\u" in text or "\\U" in text:
        text = _UNICODE_ESCAPE.sub(_expand_unicode_escape, text)
    # What is left of the validated grammar is a subset of Python's bytes-literal escapes, which
    # codecs.escape_decode applies in C to the UTF-8 text: same bytes, several times faster.
    return _escape_decode(text.encode())[0]


# `\\` is matched too, so that an escaped backslash followed by `u` is never taken for `\u`.
_UNICODE_ESCAPE = re.compile(r"\\(?:\\|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8}))")


def _expand_unicode_escape(match: re.Match) -> str:
    """`\\uHHHH`/`\\UHHHHHHHH` → the character itself (its UTF-8 bytes survive escape_decode);
    ASCII code points become `\\xHH` so that a `\\u005c` cannot start a new escape."""
    digits = match[1] or match[2]
    if digits is None:
        return match[0]
    code = int(digits, 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise DecodeError(
            f"Go-quoted string: {match[0]} at character {match.start()} is not a valid code point"
        )
    return f"\\x{code:02x}" if code < 0x80 else chr(code)


def _unquote_slowly(text: str) -> bytes:
    """Escape by escape: handles \\u/\\U and pinpoints the first malformed escape."""
    out = bytearray()
    start = 0
    length = len(text)
    while True:
        slash = text.find("\\", start)
        if slash < 0:
            _check_plain(text[start:], start)
            out += text[start:].encode()
            return bytes(out)
        if slash > start:
            chunk = text[start:slash]
            _check_plain(chunk, start)
            out += chunk.encode()
        if slash + 1 >= length:
            raise DecodeError(f"Go-quoted string ends in a lone backslash at character {slash}")
        start = _unescape_at(text, slash, out)


def _check_plain(chunk: str, position: int) -> None:
    """Unescaped text may hold any character but the quote and newline (Go rejects both)."""
    if '"' in chunk or "\n" in chunk:
        bad = min(i for i in (chunk.find('"'), chunk.find("\n")) if i >= 0)
        raise DecodeError(
            f"Go-quoted string has an unescaped {chunk[bad]!r} at character {position + bad}"
        )


def _unescape_at(text: str, slash: int, out: bytearray) -> int:
    """Append the bytes of the escape at `text[slash]`; return where the plain text resumes."""
    kind = text[slash + 1]
    simple = _SIMPLE_ESCAPES.get(kind)
    if simple is not None:
        out.append(simple)
        return slash + 2
    width = _UNICODE_ESCAPE_WIDTH.get(kind)
    if width is not None:
        digits = text[slash + 2 : slash + 2 + width]
        if len(digits) != width or not _HEX_DIGITS.issuperset(digits):
            raise DecodeError(
                f"Go-quoted string: \\{kind} at character {slash} needs {width} hex digits, "
                f"got {digits!r}"
            )
        value = int(digits, 16)
        if kind == "x":
            out.append(value)
        elif value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
            raise DecodeError(
                f"Go-quoted string: \\{kind}{digits} at character {slash} is not a valid code point"
            )
        else:
            out += chr(value).encode()
        return slash + 2 + width
    if kind in _OCTAL_DIGITS:
        digits = text[slash + 1 : slash + 4]
        if len(digits) != 3 or not _OCTAL_DIGITS.issuperset(digits) or int(digits, 8) > 0xFF:
            raise DecodeError(
                f"Go-quoted string: octal escape at character {slash} must be three digits "
                f"up to 377, got {digits!r}"
            )
        out.append(int(digits, 8))
        return slash + 4
    raise DecodeError(f"Go-quoted string: unknown escape \\{kind} at character {slash}")


# Printable ASCII other than `"` and `\` passes through Quote unchanged.
_NOT_PLAIN_ASCII = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")
_SHORT_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


def go_quote(data: bytes) -> str:
    """`strconv.Quote(string(data))` without the surrounding quotes.

    Valid UTF-8 runes that Go considers printable pass through; invalid bytes become `\\xHH`
    one byte at a time (Go resynchronises after every bad byte, and so does Python's decoder
    with `surrogateescape`, which maps each bad byte to U+DC80+byte). Printability comes from
    Python's Unicode tables, which may be a version behind Go's for newly assigned characters.
    """
    text = data.decode("utf-8", "surrogateescape")
    if not _NOT_PLAIN_ASCII.search(text):
        return text
    return "".join([_quote_char(char) for char in text])


def _quote_char(char: str) -> str:
    code = ord(char)
    if 0x20 <= code < 0x7F:
        return _SHORT_ESCAPES.get(char, char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not valid UTF-8
        return f"\\x{code - 0xDC00:02x}"
    if code > 0x7F and char.isprintable():
        return char
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
