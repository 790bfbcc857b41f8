"""Claim-check objects (PROTOCOLS.md §1.7): large TiCDC messages parked in external storage.

A message names the object's location, so the location is hostile input. It is read only if
it lies under one of the configured storage roots (local roots and locations with their
symbolic links resolved first), only if it is a regular file (never a device, FIFO or socket),
and never beyond ``max_object_bytes``. Anything else is a ClaimCheckError naming the location
and what is wrong with it: a DecodeError, so the record goes to quarantine.
"""

from __future__ import annotations

import base64
import os
import posixpath
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import orjson
import pyarrow as pa
from pyarrow import fs as pafs

from ticdc_lake.errors import ClaimCheckError, ConfigError
from ticdc_lake.limits import Limits, setting_name
from ticdc_lake.storage import S3Settings, is_object_uri, object_path, s3_filesystem

_READ_CHUNK = 1 << 20
# Local files are opened one directory at a time, never following a link: a path that is
# swapped for a link between the check and the open fails to open instead of leading out.
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: should a FIFO get past the type check, opening it does not wait for a writer.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


@dataclass(frozen=True)
class _Location:
    """A location split into scheme ("file" for a plain path), bucket/host and an absolute,
    normalised path with percent-escapes undone: the form roots and locations are compared in."""

    scheme: str
    host: str
    path: str

    @property
    def local(self) -> bool:
        return self.scheme == "file"

    def under(self, root: _Location) -> bool:
        return (self.scheme, self.host) == (root.scheme, root.host) and _is_under(
            self.path, root.path
        )


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _parse(uri: str) -> _Location:
    """The location of a URI or plain absolute path; ValueError for what no location may be."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in uri):
        # urlsplit silently drops tabs and newlines: the object read would not be the one named.
        raise ValueError("it holds control characters")
    parts = urlsplit(uri)
    if parts.scheme:
        if parts.query or parts.fragment or uri.endswith(("?", "#")):
            # A query could configure the filesystem (pyarrow's endpoint_override=...).
            raise ValueError("it has a query or fragment")
        path = unquote(parts.path)  # what a filesystem would make of the escapes
    else:
        path = uri
    if "\x00" in path:
        raise ValueError("it holds a NUL byte")
    if not path.startswith("/"):
        raise ValueError("it is not an absolute path or URI")
    return _Location(
        parts.scheme or "file", parts.netloc, posixpath.normpath("/" + path.lstrip("/"))
    )


def _kind(mode: int) -> str | None:
    """What a file that is not a regular file is ("a FIFO"), None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _open_beneath(root: str, relative: str) -> int:
    """A file descriptor of ``root/relative``, no link followed on the way below ``root``."""
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        *directories, name = relative.split("/")
        for part in directories:
            below = os.open(part, _DIRECTORY_FLAGS, dir_fd=directory)
            os.close(directory)
            directory = below
        return os.open(name, _FILE_FLAGS, dir_fd=directory)
    finally:
        os.close(directory)


def _read_at_most(read: Callable[[int], bytes], limit: int) -> bytes:
    """Up to ``limit + 1`` bytes (one past the limit tells an object is too large), read in
    chunks: never trust a size the filesystem reports."""
    chunks, size = [], 0
    while size <= limit:
        chunk = read(min(_READ_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _filesystem_of(root: str, s3: S3Settings | None) -> tuple[pafs.FileSystem, str]:
    """An object store root's filesystem and its path there; an s3:// one reached through the
    config's storage.s3."""
    if is_object_uri(root):
        return s3_filesystem(s3), object_path(root)
    return pafs.FileSystem.from_uri(root)


class ClaimCheckStore:
    """Reads (and, for tests and the generator, writes) claim-check objects under `roots`.

    ``max_object_bytes`` (the config's ``limits.max-claim-check-bytes``) bounds an object as
    stored; a larger one is refused after reading one byte past the limit."""

    def __init__(
        self,
        roots: list[str],
        max_object_bytes: int = Limits().max_claim_check_bytes,
        s3: S3Settings | None = None,
    ):
        if not roots:
            raise ConfigError("claim-check needs at least one storage root")
        self.roots = [root.rstrip("/") for root in roots]
        self.max_object_bytes = max_object_bytes
        self.s3 = s3  # how s3:// roots are reached (storage.s3 of the config)
        try:
            self._parsed = [_parse(root) for root in self.roots]
        except ValueError as exc:
            raise ConfigError(f"claim-check roots {self.roots}: one is invalid: {exc}") from exc
        self._filesystems: dict[str, tuple[pafs.FileSystem, str]] = {}

    def is_allowed(self, location: str) -> bool:
        """Whether ``location`` names a path under a root (before any link is resolved)."""
        return self._root_of(location) is not None

    def _root_of(self, location: str) -> int | None:
        try:
            parsed = _parse(location)
        except ValueError:
            return None
        return next((i for i, root in enumerate(self._parsed) if parsed.under(root)), None)

    def read(self, location: str) -> bytes:
        """The object's bytes; ClaimCheckError if it is not an object we may read."""
        try:
            parsed = _parse(location)
        except ValueError as exc:
            raise ClaimCheckError(
                f"claim-check location {location!r} is outside the configured storage roots "
                f"{self.roots}: {exc}; it was not read"
            ) from None
        index = self._root_of(location)
        if index is None:
            raise ClaimCheckError(
                f"claim-check location {location!r} is outside the configured storage roots "
                f"{self.roots}; it was not read"
            )
        try:
            if parsed.local:
                data = self._read_local(location, parsed.path)
            else:
                data = self._read_object(location, index, parsed.path)
        except (OSError, pa.ArrowException) as exc:
            raise ClaimCheckError(f"claim-check object {location!r} is unreadable: {exc}") from exc
        if len(data) > self.max_object_bytes:
            raise ClaimCheckError(
                f"claim-check object {location!r} is larger than "
                f"limits.{setting_name('max_claim_check_bytes')} = {self.max_object_bytes:,} "
                "bytes; raise that setting in the pipeline config if such objects are expected"
            )
        return data

    def _read_local(self, location: str, path: str) -> bytes:
        real = os.path.realpath(path)
        # Roots are resolved too: a root may itself be (or lie under) a link.
        root = next(
            (
                os.path.realpath(root.path)
                for root in self._parsed
                if root.local and _is_under(real, os.path.realpath(root.path))
            ),
            None,
        )
        if root is None:
            raise ClaimCheckError(
                f"claim-check location {location!r} resolves to {real!r} (a symbolic link), "
                f"outside the configured storage roots {self.roots}; it was not read"
            )
        self._check_regular(location, os.lstat(real).st_mode)  # before opening a device
        descriptor = _open_beneath(root, os.path.relpath(real, root))
        try:
            self._check_regular(location, os.fstat(descriptor).st_mode)  # what was opened
            return _read_at_most(lambda size: os.read(descriptor, size), self.max_object_bytes)
        finally:
            os.close(descriptor)

    def _read_object(self, location: str, index: int, path: str) -> bytes:
        filesystem, object_path = self._object_path(index, path)
        info = filesystem.get_file_info(object_path)
        if info.type != pafs.FileType.File:
            kind = "missing" if info.type == pafs.FileType.NotFound else "not a regular file"
            raise ClaimCheckError(f"claim-check object {location!r} is {kind}; it was not read")
        with filesystem.open_input_stream(object_path) as stream:
            return _read_at_most(stream.read, self.max_object_bytes)

    def _object_path(self, index: int, path: str) -> tuple[pafs.FileSystem, str]:
        """The root's filesystem (made from the root's URI: configuration, not the message) and
        the object's path in it: the location's path below the root, as a plain path."""
        root = self.roots[index]
        if root not in self._filesystems:
            self._filesystems[root] = _filesystem_of(root, self.s3)
        filesystem, base = self._filesystems[root]
        below = path[len(self._parsed[index].path) :].lstrip("/")
        return filesystem, posixpath.join(base, below) if below else base

    def _check_regular(self, location: str, mode: int) -> None:
        kind = _kind(mode)
        if kind is not None:
            raise ClaimCheckError(
                f"claim-check location {location!r} is {kind}, not a regular file; it was not read"
            )

    def fetch(self, location: str) -> tuple[bytes | None, bytes]:
        """The `{key, value}` object at `location`, base64 fields decoded."""
        raw = self.read(location)
        try:
            document = orjson.loads(raw)
            key = document["key"]
            value = document["value"]
            return (
                None if key is None else base64.b64decode(key, validate=True),
                base64.b64decode(value, validate=True),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ClaimCheckError(
                f"claim-check object {location!r} is not a {{key, value}} JSON object of "
                f"base64 strings: {exc}"
            ) from exc

    def store(self, key: bytes | None, value: bytes) -> str:
        """Write an object as TiCDC does (`<uuid4>.json` under the first root); return its URI."""
        name = f"{uuid.uuid4()}.json"
        location = f"{self.roots[0]}/{name}"
        root = self._parsed[0]
        if root.local:
            filesystem, path = pafs.LocalFileSystem(), posixpath.join(root.path, name)
        else:
            filesystem, path = self._object_path(0, posixpath.join(root.path, name))
        document = {
            "key": None if key is None else base64.b64encode(key).decode("ascii"),
            "value": base64.b64encode(value).decode("ascii"),
        }
        filesystem.create_dir(posixpath.dirname(path), recursive=True)
        with filesystem.open_output_stream(path) as stream:
            stream.write(orjson.dumps(document))
        return location
