"""The DDL tokenizer: words, quoted identifiers, strings, numbers and punctuation."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ticdc_lake.gold.exceptions import DdlParseError

WORD, IDENT, STRING, NUMBER, PUNCT, END = "word", "ident", "string", "number", "punct", "end"


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str  # words as written; identifiers and strings unquoted
    position: int

    def describe(self) -> str:
        if self.kind == END:
            return "the end of the query"
        if self.kind == STRING:
            return f"string {self.text!r}"
        return f"{self.text!r}"


_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[A-Za-z0-9_$\u0080-\uffff]+")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_EXECUTABLE_COMMENT = re.compile(r"/\*(?:!\d*|T!(?:\[[^\]]*\])?)")
_STRING_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


def tokenize(query: str) -> list[Token]:
    """Tokens of ``query``. Executable comments (``/*!40101 ...*/``, ``/*T![x] ...*/``) are read
    as SQL, as MySQL and TiDB do; other comments are skipped."""
    tokens: list[Token] = []
    i, n = 0, len(query)
    open_executable = 0  # executable comments whose "*/" is still to come
    while i < n:
        char = query[i]
        if char.isspace():
            i = _SPACE.match(query, i).end()
        elif query.startswith("*/", i) and open_executable:
            open_executable -= 1
            i += 2
        elif query.startswith("/*", i):
            executable = _EXECUTABLE_COMMENT.match(query, i)
            if executable:
                open_executable += 1
                i = executable.end()
            else:
                end = query.find("*/", i + 2)
                if end < 0:
                    raise DdlParseError(query, i, "the end of a comment '*/'", "the end")
                i = end + 2
        elif char == "#" or (query.startswith("--", i) and (i + 2 == n or query[i + 2].isspace())):
            end = query.find("\n", i)
            i = n if end < 0 else end + 1
        elif char in "`":
            i = _quoted(query, i, "`", tokens, IDENT)
        elif char in "'\"":
            i = _quoted(query, i, char, tokens, STRING)
        elif char.isdigit() or (char == "." and i + 1 < n and query[i + 1].isdigit()):
            match = _NUMBER.match(query, i)
            word = _WORD.match(query, i)
            if word and word.end() > match.end():  # an identifier starting with digits: 1abc
                tokens.append(Token(WORD, word.group(), i))
                i = word.end()
            else:
                tokens.append(Token(NUMBER, match.group(), i))
                i = match.end()
        elif _WORD.match(query, i):
            match = _WORD.match(query, i)
            tokens.append(Token(WORD, match.group(), i))
            i = match.end()
        else:
            tokens.append(Token(PUNCT, char, i))
            i += 1
    tokens.append(Token(END, "", n))
    return tokens


def _quoted(query: str, start: int, quote: str, tokens: list[Token], kind: str) -> int:
    """Read a quoted identifier or string from ``start``; return the position after it."""
    chars, i, n = [], start + 1, len(query)
    while i < n:
        char = query[i]
        if char == quote:
            if query.startswith(quote * 2, i):  # a doubled quote stands for itself
                chars.append(quote)
                i += 2
                continue
            tokens.append(Token(kind, "".join(chars), start))
            return i + 1
        if char == "\\" and kind == STRING and i + 1 < n:
            chars.append(_STRING_ESCAPES.get(query[i + 1], query[i + 1]))
            i += 2
            continue
        chars.append(char)
        i += 1
    raise DdlParseError(query, start, f"a closing {quote}", "the end of the query")
