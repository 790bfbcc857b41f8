"""Keeping credentials out of what we print, log and store.

``redact_text`` is the one function every output path runs text through (messages, errors,
quarantine rows, reprs, a job's result file, the run summary's log and XCom, and through
terminal.printing everything the CLI and the spark-submit jobs print);
``redact_value`` runs it over every string of a JSON-like value. It masks:

* the userinfo of every URL: ``scheme://user:password@host`` shows as ``scheme://user:***@host``
  whatever the password holds (``@``, ``:``, spaces, ``/``, quotes), and userinfo without a
  password (often a token: ``https://TOKEN@host``) as ``***@host``. The host is what follows the
  userinfo's last ``@``, as ``urllib.parse`` reads a URL, so a person can still tell which server
  was meant. In running text a URL has no end marker: where the password may run on past a
  space, a later word holding ``@`` on the same line is masked with it (too much, never too
  little);
* the credentials of an HTTP ``Basic`` or ``Bearer`` authorization, wherever they appear (a
  server echoing the request's ``Authorization`` header into its error);
* any secret the caller knows (a password from the environment), as given or percent-encoded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

MASK = "***"

log = logging.getLogger(__name__)

# Where a URL starts: its scheme and "//".
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# Where a URL's authority may end: "/", "?", "#", or a space in running text.
_SEPARATORS = re.compile(r"[/?#\s]")
# What a URL in text may be quoted with.
_QUOTES = ("'", '"', "`")
# An HTTP authorization's credentials (RFC 7235 token68, with JSON's escaped "/" allowed), after
# its scheme. An all-lowercase word is prose ("basic auth"), not base64 or a token.
_TOKEN68 = r"[A-Za-z0-9\-._~+/\\]"
_AUTHORIZATION = re.compile(
    rf"\b(?P<scheme>(?i:basic|bearer))(?P<space>\s+)"
    rf"(?![a-z]+(?!{_TOKEN68}))(?P<credentials>{_TOKEN68}+=*)"
)


def redact_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every URL's userinfo, every Basic/Bearer credential and each of
    ``secrets`` (as given or percent-encoded) masked."""
    text = _mask_userinfo(text)
    text = _AUTHORIZATION.sub(rf"\g<scheme>\g<space>{MASK}", text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in dict.fromkeys((secret, quote(secret, safe=""), quote_plus(secret))):
            text = text.replace(form, MASK)
    return text


def redact_url(url: str) -> str:
    """``url`` (or a comma-separated list of them) with any userinfo masked."""
    return redact_text(url)


def redact_value(value: Any, secrets: Iterable[str | None] = ()) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with ``redact_text`` applied to every
    string in it, keys included: for what is written as JSON, where masking the JSON text could
    run across its quotes."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {redact_value(k, secrets): redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(item, secrets) for item in value]
    return value


def _mask_userinfo(text: str) -> str:
    out, done = [], 0
    for match in _SCHEME.finditer(text):
        if match.end() <= done:  # inside the userinfo masked before
            continue
        at = _userinfo_end(text, match)
        if at is None:
            continue
        out += [text[done : match.end()], _masked(text[match.end() : at])]
        done = at
    return "".join([*out, text[done:]])


def _userinfo_end(text: str, scheme: re.Match[str]) -> int | None:
    """Where the userinfo of the URL starting with ``scheme`` ends (its last "@"), or None when
    it has none.

    A URL in text has no end marker, and a password written into it unencoded may hold what
    would end it ("@", a space, "/", "?", "#", a quote). So the authority is tried up to each of
    those in turn and read as urllib.parse reads it (the host after the last "@", the port a
    number). The first that is a host without userinfo ends the search: a URL without
    credentials. A userinfo and host followed by "/", "?", "#" or the region's end is the one;
    one followed by a space is kept while the search goes on, as the password may go on past
    the space: a later word holding "@" then counts as part of it (masking too much, never too
    little). The region is the rest of the line, up to the next URL or, for a URL in quotes, the
    closing quote; when nothing in the quotes reads as an authority (a quote inside the
    password), the rest of the line is tried."""
    start = scheme.end()
    line_end = len(text)
    for stop in ("\n", "\r"):
        found = text.find(stop, start)
        if found != -1:
            line_end = min(line_end, found)
    following = _SCHEME.search(text, start, line_end)
    end = following.start() if following else line_end
    opening = text[scheme.start() - 1 : scheme.start()]
    closing = text.find(opening, start, end) if opening in _QUOTES else -1
    if closing != -1:
        found = _authority_end(text, start, closing)
        if found is not _UNREAD:
            return found
    found = _authority_end(text, start, end)
    return None if found is _UNREAD else found


# _authority_end's answer when nothing in its region reads as an authority.
_UNREAD = -1


def _authority_end(text: str, start: int, end: int) -> int | None:
    """_userinfo_end within ``text[start:end]``: the userinfo's end, None for a URL without
    userinfo, _UNREAD when no authority could be read there."""
    kept = _UNREAD
    for separator in [*_SEPARATORS.finditer(text, start, end), None]:
        stop = separator.start() if separator else end
        if stop == start:  # "file:///path": no authority at all
            return None
        userinfo, at, host = text[start:stop].rpartition("@")
        if not _is_host(host):
            continue
        if not at:
            return None
        kept = start + len(userinfo)
        if separator is None or not separator.group().isspace():
            return kept
    return kept


def _is_host(host: str) -> bool:
    """Whether ``host`` is a URL's host and optional port, as urllib.parse reads them."""
    if not host or any(c.isspace() or c in "/?#@" for c in host):
        return False
    try:
        return urlsplit(f"//{host}").port is not None or not host.endswith(":")
    except ValueError:  # a port that is no number, a broken IPv6 literal
        return False


def _masked(userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{MASK}" if colon else MASK


def url_password(url: str) -> str | None:
    """The password a URL (or the first of a comma-separated list) carries, if any."""
    password = urlsplit(url.split(",")[0].strip()).password
    return unquote(password) if password else None


def without_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """(the URLs with ``user:password@`` removed, username, password) of a URL or a
    comma-separated list of them; the credentials are those of the first URL."""
    first = urlsplit(url.split(",")[0].strip())
    username = unquote(first.username) if first.username is not None else None
    password = unquote(first.password) if first.password is not None else None
    stripped = ",".join(
        parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        for parts in (urlsplit(part.strip()) for part in url.split(","))
    )
    return stripped, username, password


def warn_if_url_has_password(url: str, where: str) -> None:
    """Log a warning when ``url`` carries a password: it belongs in the environment."""
    if url_password(url):
        log.warning(
            "%s: the schema registry URL %s carries a password; give it with password-env "
            "(--schema-registry-password-env) instead, which keeps it out of files and "
            "command lines",
            where,
            redact_url(url),
        )
