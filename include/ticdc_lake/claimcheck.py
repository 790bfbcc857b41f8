"""Claim-check objects (PROTOCOLS.md §1.7): large TiCDC messages parked in external storage.

A message names the object's location; we read it only if it lies under one of the configured
storage roots, so a crafted message cannot make the pipeline read arbitrary files or buckets.
"""

from __future__ import annotations

import base64
import posixpath
import uuid
from urllib.parse import urlsplit

import orjson
from pyarrow import fs as pafs

from ticdc_lake.errors import ClaimCheckError, ConfigError


def _normalise(uri: str) -> tuple[str, str, str]:
    """(scheme, bucket/host, normalised absolute path) of a URI or plain local path."""
    parts = urlsplit(uri)
    scheme = parts.scheme or "file"
    path = parts.path if parts.scheme else uri
    if scheme == "file" and not path.startswith("/"):
        raise ConfigError(f"claim-check root {uri!r} must be an absolute path or URI")
    return scheme, parts.netloc, posixpath.normpath("/" + path.lstrip("/"))


class ClaimCheckStore:
    """Reads (and, for tests and the generator, writes) claim-check objects under `roots`."""

    def __init__(self, roots: list[str]):
        if not roots:
            raise ConfigError("claim-check needs at least one storage root")
        self.roots = [root.rstrip("/") for root in roots]
        self._normalised = [_normalise(root) for root in self.roots]

    def is_allowed(self, location: str) -> bool:
        scheme, host, path = _normalise(location) if "\x00" not in location else ("", "", "")
        for root_scheme, root_host, root_path in self._normalised:
            if (scheme, host) == (root_scheme, root_host) and (
                path == root_path or path.startswith(root_path.rstrip("/") + "/")
            ):
                return True
        return False

    def read(self, location: str) -> bytes:
        try:
            allowed = self.is_allowed(location)
        except ConfigError:
            allowed = False
        if not allowed:
            raise ClaimCheckError(
                f"claim-check location {location!r} is outside the configured storage roots "
                f"{self.roots}; it was not read"
            )
        scheme, host, path = _normalise(location)
        filesystem, fs_path = pafs.FileSystem.from_uri(
            f"{scheme}://{host}{path}" if scheme != "file" else path
        )
        try:
            with filesystem.open_input_stream(fs_path) as stream:
                return stream.read()
        except (OSError, FileNotFoundError) as exc:
            raise ClaimCheckError(f"claim-check object {location!r} is unreadable: {exc}") from exc

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
        location = f"{self.roots[0]}/{uuid.uuid4()}.json"
        scheme, host, path = _normalise(location)
        filesystem, fs_path = pafs.FileSystem.from_uri(
            f"{scheme}://{host}{path}" if scheme != "file" else path
        )
        document = {
            "key": None if key is None else base64.b64encode(key).decode("ascii"),
            "value": base64.b64encode(value).decode("ascii"),
        }
        filesystem.create_dir(posixpath.dirname(fs_path), recursive=True)
        with filesystem.open_output_stream(fs_path) as stream:
            stream.write(orjson.dumps(document))
        return location
