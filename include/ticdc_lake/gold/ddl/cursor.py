"""The parser's cursor over a query's tokens: look at, accept or expect the next ones."""

from __future__ import annotations

from ticdc_lake.gold.ddl.actions import TableName
from ticdc_lake.gold.ddl.tokens import END, IDENT, PUNCT, WORD, Token, tokenize
from ticdc_lake.gold.exceptions import DdlParseError


class Cursor:
    """The tokens of one query and the position of the next one to read.

    The statement grammars (create, alter, drop, rename) read through it; a mismatch is a
    ``DdlParseError`` naming the position, what was expected and what was found.
    """

    def __init__(self, query: str, default_schema: str):
        self.query = query
        self.default_schema = default_schema
        self.tokens = tokenize(query)
        self.at = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.token
        if token.kind != END:
            self.at += 1
        return token

    def fail(self, expected: str) -> DdlParseError:
        return DdlParseError(self.query, self.token.position, expected, self.token.describe())

    def is_word(self, *words: str, token: Token | None = None) -> bool:
        token = token or self.token
        return token.kind == WORD and token.text.upper() in words

    def is_punct(self, char: str) -> bool:
        return self.token.kind == PUNCT and self.token.text == char

    def accept(self, *words: str) -> str | None:
        if self.is_word(*words):
            return self.advance().text.upper()
        return None

    def accept_sequence(self, *words: str) -> bool:
        """Consume the words in order if they all follow, else nothing."""
        for ahead, word in enumerate(words):
            if not self.is_word(word, token=self.peek(ahead)):
                return False
        self.at += len(words)
        return True

    def expect(self, *words: str) -> str:
        found = self.accept(*words)
        if found is None:
            raise self.fail(" or ".join(words))
        return found

    def count(self, what: str) -> int:
        """A whole number written in digits: a count of ``what``."""
        text = self.token.text
        if not (text.isascii() and text.isdigit()):
            raise self.fail(f"a number of {what}")
        self.advance()
        return int(text)

    def accept_punct(self, char: str) -> bool:
        if self.is_punct(char):
            self.advance()
            return True
        return False

    def expect_punct(self, char: str) -> None:
        if not self.accept_punct(char):
            raise self.fail(f"'{char}'")

    def at_clause_end(self) -> bool:
        return self.token.kind == END or self.is_punct(",") or self.is_punct(";")

    def expect_end(self) -> None:
        while self.accept_punct(";"):
            pass
        if self.token.kind != END:
            raise self.fail("the end of the statement")

    # --- names ---------------------------------------------------------------------------

    def identifier(self, what: str = "a name") -> str:
        token = self.token
        if token.kind in (WORD, IDENT):
            self.advance()
            return token.text
        raise self.fail(what)

    def table_name(self) -> TableName:
        first = self.identifier("a table name")
        if self.accept_punct("."):
            return TableName(first, self.identifier("a table name"))
        return TableName(self.default_schema, first)

    def name_list(self) -> tuple[str, ...]:
        names = [self.identifier()]
        while self.accept_punct(","):
            names.append(self.identifier())
        return tuple(names)

    def skip_balanced(self) -> str:
        """Skip a parenthesised group (the current token is its '('); return its inner text."""
        start = self.token.position
        self.expect_punct("(")
        depth = 1
        while depth:
            token = self.advance()
            if token.kind == END:
                raise DdlParseError(self.query, start, "a closing ')'", "the end of the query")
            if token.kind == PUNCT and token.text == "(":
                depth += 1
            elif token.kind == PUNCT and token.text == ")":
                depth -= 1
        return self.query[start + 1 : self.tokens[self.at - 1].position].strip()

    def skip_to_clause_end(self) -> None:
        """Skip tokens (and parenthesised groups) up to a ',' or ';' at this depth or the end."""
        while not self.at_clause_end() and not self.is_punct(")"):
            if self.is_punct("("):
                self.skip_balanced()
            else:
                self.advance()

    def skip_rest(self) -> None:
        while self.token.kind != END:
            self.advance()
