"""Go string quoting (strconv.Quote / Unquote) as the Open Protocol uses it for binary strings."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ticdc_lake.errors import DecodeError
from ticdc_lake.protocols.go_quote import go_quote, go_unquote

# (bytes, Go-quoted text without the quotes): PROTOCOLS.md §2.4 and the ticdc codec test.
PROTOCOL_EXAMPLES = [
    (bytes.fromhex("89504e470d0a1a0a"), r"\x89PNG\r\n\x1a\n"),
    (bytes.fromhex("0102030405060708090a"), r"\x01\x02\x03\x04\x05\x06\a\b\t\n"),
    (b"", ""),
    (b"plain ascii", "plain ascii"),
    (b'quote " back \\ slash', r"quote \" back \\ slash"),
    ("中文 ✓ 🎉".encode(), "中文 ✓ 🎉"),  # printable runes pass through as UTF-8
    (b"\x0b\x0c\x7f\x00", r"\v\f\x7f\x00"),
    (b"\xff\xfe", r"\xff\xfe"),  # invalid UTF-8: one \x per byte
    (b"\xe4\xb8", r"\xe4\xb8"),  # a truncated 3-byte sequence
    (b"\xed\xa0\x80", r"\xed\xa0\x80"),  # an encoded surrogate is invalid UTF-8 for Go too
    ("\u00a0\u200b".encode(), r"\u00a0\u200b"),  # valid but not printable: \u
    ("\U000e0001".encode(), r"\U000e0001"),  # ... beyond the BMP: \U
    ("\u0085".encode(), r"\u0085"),  # a C1 control is a valid rune, so \u, not \x
]


@pytest.mark.parametrize(("raw", "quoted"), PROTOCOL_EXAMPLES)
def test_quote_matches_go(raw, quoted):
    assert go_quote(raw) == quoted


@pytest.mark.parametrize(("raw", "quoted"), PROTOCOL_EXAMPLES)
def test_unquote_inverts_go(raw, quoted):
    assert go_unquote(quoted) == raw


def test_unicode_escape_codec_is_not_a_go_unquoter():
    # Why the module exists: Python turns \x89 into U+0089 (two bytes in UTF-8), not byte 0x89.
    text = r"\x89PNG"
    assert codecs.decode(text, "unicode_escape").encode() != go_unquote(text)
    assert go_unquote(text) == b"\x89PNG"


@pytest.mark.parametrize(
    ("quoted", "raw"),
    [
        (r"\101\377", b"A\xff"),  # octal escapes, exactly three digits
        (r"\u00e9\U0001F389", "é🎉".encode()),
        (r"\xAB", b"\xab"),  # upper-case hex digits
        (r"\\u0041", b"\\u0041"),  # an escaped backslash, then plain text
        (r"\u005cx41", b"\\x41"),  # \u005c is a backslash byte, not the start of an escape
        (r"\u0041\"", b'A"'),
        ("tab\there", b"tab\there"),  # raw control characters other than newline are allowed
    ],
)
def test_unquote_accepts_every_go_escape(quoted, raw):
    assert go_unquote(quoted) == raw


@pytest.mark.parametrize(
    ("quoted", "reason"),
    [
        ("abc\\", "lone backslash"),
        (r"\q", r"unknown escape \\q"),
        (r"ok\xZZ", r"\\x at character 2 needs 2 hex digits"),
        (r"\x4", "needs 2 hex digits"),
        (r"\u12", "needs 4 hex digits"),
        (r"\ud800", "not a valid code point"),
        (r"\U00110000", "not a valid code point"),
        (r"\400", "octal escape"),
        (r"\12", "octal escape"),
        ('a"b', "unescaped '\"' at character 1"),
        ("a\nb", "unescaped '\\\\n'"),
        (r"\'", r"unknown escape \\'"),
    ],
)
def test_unquote_rejects_what_go_rejects(quoted, reason):
    with pytest.raises(DecodeError, match=reason):
        go_unquote(quoted)


@given(st.binary(max_size=200))
def test_any_bytes_round_trip(raw):
    assert go_unquote(go_quote(raw)) == raw


@given(st.text(max_size=100).map(lambda text: text.encode("utf-8", "surrogatepass")))
def test_text_round_trips_and_quotes_to_printable(raw):
    quoted = go_quote(raw)
    assert go_unquote(quoted) == raw
    assert quoted.isprintable()
    assert '"' not in quoted.replace('\\"', "")
