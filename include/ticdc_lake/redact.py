"""Keeping credentials out of what we print, log and store.

A URL may carry ``user:password@``; wherever a URL is described (messages, errors, quarantine
rows, reprs) it goes through ``redact_text``, which masks the password and keeps the rest, so a
person can still tell which server was meant.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote, urlsplit

MASK = "***"

log = logging.getLogger(__name__)

# scheme://user:password@ — the password is whatever runs up to the '@' before the host.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*):[^/@\s]*@")


def redact_text(text: str) -> str:
    """``text`` with the password of every URL in it masked."""
    return _USERINFO.sub(rf"\g<head>:{MASK}@", text)


def redact_url(url: str) -> str:
    """``url`` (or a comma-separated list of them) with any password masked."""
    return redact_text(url)


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
