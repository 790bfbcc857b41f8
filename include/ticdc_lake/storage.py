"""Object storage: where an ``s3://`` (or ``s3a://``) URI leads, and with which credentials.

The config's ``storage: {s3: ...}`` section gives the endpoint, region and addressing of an
S3-compatible store, and the names of the environment variables holding its credentials;
without it, or for what it leaves out, AWS's own defaults apply (``AWS_ACCESS_KEY_ID`` and the
other standard variables, credential files, instance roles). Secrets are read from the
environment when a store is opened, or once on the driver for a Spark job (``resolved``); the
config holds only the variables' names, and no secret is shown or written.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pyarrow import fs as pafs

from ticdc_lake.errors import ConfigError, TicdcLakeError

S3_SCHEMES = ("s3", "s3a")


class StorageError(TicdcLakeError):
    """An object store could not be reached, or refused: the stage stops, nothing written."""


@dataclass(frozen=True)
class S3Settings:
    """How to reach an S3-compatible store. Credentials are environment variables' names."""

    endpoint: str | None = None  # http(s)://host:port of an S3-compatible server; None: AWS
    region: str | None = None
    path_style: bool = False  # bucket in the path (most S3-compatible servers), not the host
    access_key_id_env: str | None = None
    secret_access_key_env: str | None = None
    session_token_env: str | None = None
    # The variables' values read on the driver (``resolved``), for tasks whose processes do
    # not have them: never shown, never compared, never written (a land plan drops them).
    read: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    def resolved(self) -> S3Settings:
        """These settings with the credentials read now, to travel with a Spark job."""
        return dataclasses.replace(self, read=tuple(self.credentials().items()))

    def credentials(self) -> dict[str, str]:
        """pyarrow's credential arguments read from the named variables (ConfigError: one is
        unset); empty when none is named, so that AWS's default chain applies."""
        if self.read:
            return dict(self.read)
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


def s3_client(settings: S3Settings | None):
    """A boto3 S3 client on the store ``settings`` describe: for what pyarrow's filesystem
    does not give (ETags when listing, conditional writes)."""
    import boto3  # with botocore, only where an s3:// location is configured
    from botocore.config import Config

    settings = settings or S3Settings()
    credentials = settings.credentials()
    return boto3.client(
        "s3",
        endpoint_url=settings.endpoint,
        region_name=settings.region,
        aws_access_key_id=credentials.get("access_key"),
        aws_secret_access_key=credentials.get("secret_key"),
        aws_session_token=credentials.get("session_token"),
        config=Config(s3={"addressing_style": "path" if settings.path_style else "auto"}),
    )


@dataclass(frozen=True)
class ObjectInfo:
    uri: str  # s3://bucket/key
    size: int
    etag: str  # the store's tag of the object's content: a new one on every upload
    mtime_ns: int


def list_objects(uri: str, settings: S3Settings | None) -> Iterator[ObjectInfo]:
    """Every object whose key starts with ``uri``'s key (``s3://bucket/prefix``), by key."""
    from botocore.exceptions import BotoCoreError, ClientError

    scheme, _, rest = uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    paginator = s3_client(settings).get_paginator("list_objects_v2")
    try:
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for entry in page.get("Contents", ()):
                yield ObjectInfo(
                    f"{scheme}://{bucket}/{entry['Key']}",
                    entry["Size"],
                    entry["ETag"].strip('"'),
                    int(entry["LastModified"].timestamp() * 1e9),
                )
    except ClientError as exc:  # the store answered: no such bucket, access denied, ...
        error = exc.response.get("Error", {})
        raise StorageError(
            f"cannot list {uri}: the store at {_where(settings)} answered "
            f"{error.get('Code', '?')}: {error.get('Message', '')}"
        ) from None
    except BotoCoreError as exc:  # no answer: endpoint unreachable, no credentials
        raise StorageError(f"cannot list {uri} on the store at {_where(settings)}: {exc}") from None


def _where(settings: S3Settings | None) -> str:
    return (settings and settings.endpoint) or "AWS"


def open_object(uri: str, settings: S3Settings | None):
    """The object at ``uri`` opened for random access (pyarrow's RandomAccessFile)."""
    return s3_filesystem(settings).open_input_file(object_path(uri))
