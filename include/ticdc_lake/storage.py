"""Object storage: where an ``s3://`` (or ``s3a://``) URI leads, and with which credentials.

The config's ``storage: {s3: ...}`` section gives the endpoint, region and addressing of an
S3-compatible store, and the names of the environment variables holding its credentials;
without it, or for what it leaves out, AWS's own defaults apply (``AWS_ACCESS_KEY_ID`` and the
other standard variables, credential files, instance roles). Secrets are read when a store is
opened, never kept in the config, and never shown.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from urllib.parse import urlsplit

from pyarrow import fs as pafs

from ticdc_lake.errors import ConfigError

S3_SCHEMES = ("s3", "s3a")


@dataclass(frozen=True)
class S3Settings:
    """How to reach an S3-compatible store. Credentials are environment variables' names."""

    endpoint: str | None = None  # http(s)://host:port of an S3-compatible server; None: AWS
    region: str | None = None
    path_style: bool = False  # bucket in the path (most S3-compatible servers), not the host
    access_key_id_env: str | None = None
    secret_access_key_env: str | None = None
    session_token_env: str | None = None

    def credentials(self) -> dict[str, str]:
        """pyarrow's credential arguments read from the named variables (ConfigError: one is
        unset); empty when none is named, so that AWS's default chain applies."""
        named = {
            "access_key": self.access_key_id_env,
            "secret_key": self.secret_access_key_env,
            "session_token": self.session_token_env,
        }
        named = {argument: variable for argument, variable in named.items() if variable}
        unset = sorted(variable for variable in named.values() if variable not in os.environ)
        if unset:
            raise ConfigError(
                f"storage.s3: environment variable(s) {', '.join(unset)} not set (they hold "
                "the store's credentials)"
            )
        return {argument: os.environ[variable] for argument, variable in named.items()}


def is_object_uri(location: str) -> bool:
    return urlsplit(location).scheme in S3_SCHEMES


def s3_filesystem(settings: S3Settings | None) -> pafs.S3FileSystem:
    """A filesystem on the store ``settings`` describe (AWS's defaults for None)."""
    settings = settings or S3Settings()
    options: dict = {"region": settings.region} if settings.region else {}
    if settings.endpoint:
        endpoint = urlsplit(settings.endpoint)
        options["endpoint_override"] = endpoint.netloc or endpoint.path
        options["scheme"] = endpoint.scheme or "https"
    # AWS's own endpoint addresses buckets by host already; another endpoint only if asked.
    options["force_virtual_addressing"] = bool(settings.endpoint) and not settings.path_style
    return pafs.S3FileSystem(**options, **settings.credentials())


def object_path(location: str) -> str:
    """The ``bucket/key`` path pyarrow's S3 filesystem names an ``s3://bucket/key`` by."""
    parts = urlsplit(location)
    if parts.scheme not in S3_SCHEMES or not parts.netloc:
        raise ValueError(f"{location!r} is not an s3:// URI with a bucket")
    return posixpath.join(parts.netloc, parts.path.lstrip("/")).rstrip("/")
