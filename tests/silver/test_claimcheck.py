"""Claim-check reads: a location is hostile input. Symlinks out of a root, devices, FIFOs,
oversized objects, `..`, and URL tricks are refused with a ClaimCheckError (the record goes to
quarantine), and nothing outside the configured roots is ever read."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ticdc_lake.errors import ClaimCheckError, DecodeError
from ticdc_lake.limits import Limits
from ticdc_lake.silver.claimcheck import ClaimCheckStore

SECRET = b"outside-the-root"
DOCUMENT = orjson.dumps({"key": None, "value": "aGVsbG8="})  # value b"hello"


@pytest.fixture
def tree(tmp_path):
    """root/ holds a good object and traps; outside/ holds a secret object and a directory."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (outside / "dir").mkdir(parents=True)
    (root / "good.json").write_bytes(DOCUMENT)
    (root / "sub" / "good.json").write_bytes(DOCUMENT)
    secret = orjson.dumps({"key": None, "value": "b3V0c2lkZQ=="}) + b" " + SECRET
    (outside / "secret.json").write_bytes(secret)
    (outside / "dir" / "secret.json").write_bytes(secret)
    (root / "link-out.json").symlink_to(outside / "secret.json")
    (root / "dir-out").symlink_to(outside / "dir")
    (root / "zero.json").symlink_to("/dev/zero")
    (root / "link-in.json").symlink_to(root / "sub" / "good.json")
    (root / "loop.json").symlink_to(root / "loop.json")
    os.mkfifo(root / "fifo.json")
    return root


def read_within(store: ClaimCheckStore, location: str, fifo: Path, seconds: float = 10) -> bytes:
    """store.read in a thread: a read that blocks (on `fifo`, which has no writer) fails."""
    outcome: dict = {}

    def run():
        try:
            outcome["data"] = store.read(location)
        except BaseException as exc:  # handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        with contextlib.suppress(OSError):  # unblock it: a writer that closes at once
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"reading {location!r} blocked for {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["data"]


def test_a_symlink_inside_a_root_to_a_file_outside_is_not_followed(tree):
    store = ClaimCheckStore([f"file://{tree}"])
    for name in ("link-out.json", "dir-out/secret.json"):
        with pytest.raises(ClaimCheckError, match="outside the configured storage roots") as raised:
            store.fetch(f"file://{tree}/{name}")
        assert name in str(raised.value)
        assert "symbolic link" in str(raised.value)


def test_symlinks_within_the_roots_and_a_symlinked_root_are_followed(tree, tmp_path):
    (tmp_path / "root-link").symlink_to(tree)
    for root in (tree, tmp_path / "root-link"):
        store = ClaimCheckStore([f"file://{root}"])
        assert store.fetch(f"file://{root}/link-in.json") == (None, b"hello")
        assert store.fetch(f"{root}/sub/good.json") == (None, b"hello")


def test_a_symlink_to_dev_zero_is_refused_without_reading_it(tree):
    store = ClaimCheckStore([f"file://{tree}"], max_object_bytes=1024)
    with pytest.raises(ClaimCheckError, match="outside the configured storage roots"):
        store.read(f"file://{tree}/zero.json")


def test_special_files_are_not_read(tree, tmp_path):
    store = ClaimCheckStore([f"file://{tree}", "file:///dev"], max_object_bytes=1024)
    with pytest.raises(ClaimCheckError, match="is a FIFO, not a regular file"):
        read_within(store, f"file://{tree}/fifo.json", tree / "fifo.json")
    with pytest.raises(ClaimCheckError, match="is a character device, not a regular file"):
        read_within(store, "file:///dev/zero", tree / "fifo.json")
    with pytest.raises(ClaimCheckError, match="is a directory, not a regular file"):
        store.read(f"file://{tree}/sub")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tree / "socket.json"))
        with pytest.raises(ClaimCheckError, match="is a socket, not a regular file"):
            store.read(f"file://{tree}/socket.json")
    with pytest.raises(ClaimCheckError, match="is a symbolic link, not a regular file"):
        store.read(f"file://{tree}/loop.json")  # a link to itself: it resolves to nothing else
    with pytest.raises(ClaimCheckError, match="unreadable") as raised:
        store.read(f"file://{tree}/missing.json")
    assert "missing.json" in str(raised.value)


class SwappingStore(ClaimCheckStore):
    """Swaps `victim` for `replacement` right after the first type check passes: the race
    between checking a path and opening it, made to happen every time."""

    def __init__(self, roots, victim: Path, replacement: Path):
        super().__init__(roots)
        self.swap = (victim, replacement)

    def _check_regular(self, location, mode):
        super()._check_regular(location, mode)
        if self.swap:
            victim, replacement = self.swap
            self.swap = None
            victim.rename(victim.with_name("moved-away"))
            victim.symlink_to(replacement)


def test_a_path_swapped_for_a_symlink_after_the_check_is_not_followed(tree, tmp_path):
    outside = tmp_path / "outside"
    (tree / "victim.json").write_bytes(DOCUMENT)
    store = SwappingStore([str(tree)], tree / "victim.json", outside / "secret.json")
    with pytest.raises(ClaimCheckError, match=r"unreadable: .*(symbolic links|Not a directory)"):
        store.read(f"{tree}/victim.json")
    # A directory on the way swapped for a link to a directory outside.
    (tree / "victim-dir").mkdir()
    (tree / "victim-dir" / "secret.json").write_bytes(DOCUMENT)
    store = SwappingStore([str(tree)], tree / "victim-dir", outside / "dir")
    with pytest.raises(ClaimCheckError, match=r"unreadable: .*(symbolic links|Not a directory)"):
        store.read(f"{tree}/victim-dir/secret.json")


def test_an_object_larger_than_the_limit_is_refused(tree):
    limit = len(DOCUMENT)
    store = ClaimCheckStore([f"file://{tree}"], max_object_bytes=limit)
    assert store.read(f"file://{tree}/good.json") == DOCUMENT  # exactly the limit
    (tree / "big.json").write_bytes(DOCUMENT + b" ")
    with pytest.raises(ClaimCheckError, match=r"limits\.max-claim-check-bytes") as raised:
        store.read(f"file://{tree}/big.json")
    assert "big.json" in str(raised.value) and f"{limit:,}" in str(raised.value)
    assert ClaimCheckStore([f"file://{tree}"]).max_object_bytes == Limits().max_claim_check_bytes


def test_object_store_reads_are_capped_and_kept_under_the_root():
    """Any pyarrow filesystem (here its in-memory one) gets the same checks but symlinks."""
    store = ClaimCheckStore(["mock://bucket/claims"], max_object_bytes=64)
    location = store.store(None, b"small")
    assert location.startswith("mock://bucket/claims/")
    assert store.fetch(location) == (None, b"small")
    big = store.store(None, b"x" * 100)
    with pytest.raises(ClaimCheckError, match=r"limits\.max-claim-check-bytes"):
        store.read(big)
    with pytest.raises(ClaimCheckError, match=r"missing\.json' is missing"):
        store.read("mock://bucket/claims/missing.json")
    with pytest.raises(ClaimCheckError, match="not a regular file"):
        store.read("mock://bucket/claims")
    for sneaky in (
        "mock://bucket/claims/../other/x.json",
        "mock://bucket/claims/%2e%2e/other/x.json",
        "mock://other-bucket/claims/x.json",
        f"{location}?endpoint_override=evil.example",
        f"{location}#x",
    ):
        with pytest.raises(ClaimCheckError):
            store.read(sneaky)


@pytest.mark.parametrize(
    "trick",
    [
        "{root}/../outside/secret.json",
        "file://{root}/%2e%2e/outside/secret.json",
        "file://{root}/sub/..%2f..%2foutside/secret.json",
        "file://localhost{root}/good.json",
        "file://evil{root}/good.json",
        "FILE://{root}/../outside/secret.json",
        "file://{root}/good.json\n",
        "file://{root}/go\tod.json",
        "file://{root}/good.json\x00",
        "file://{root}/good.json%00",
        "file://{root}/good.json?x=1",
        "good.json",
        "",
        "s3://{root}/good.json",
    ],
)
def test_location_tricks_are_refused(tree, trick):
    store = ClaimCheckStore([f"file://{tree}"])
    with pytest.raises(ClaimCheckError) as raised:
        store.read(trick.format(root=tree))
    assert isinstance(raised.value, DecodeError)  # the record goes to quarantine


# --- fuzzing ----------------------------------------------------------------------------------

NAMES = ["good.json", "sub", "link-out.json", "dir-out", "zero.json", "link-in.json", "loop.json"]
NAMES += ["fifo.json", "secret.json", "..", ".", "", "%2e%2e", "%2F", "outside", "dir", "root"]
PIECES = st.sampled_from(NAMES) | st.text(st.characters(codec="utf-8"), max_size=6)
PREFIXES = ["file://", "file:", "FILE://", "file://localhost", "file:///", "s3://", "/", "", "//"]
SUFFIXES = ["", "?x=1", "#f", "\n", "\x00", "%00", "/", "/.", "/..", ";"]


@st.composite
def locations(draw, root: str) -> str:
    prefix = draw(st.sampled_from(PREFIXES))
    start = draw(st.sampled_from([root, os.path.dirname(root), "/dev", "/proc/self", ""]))
    names = draw(st.lists(PIECES, max_size=5))
    return prefix + "/".join([start, *names]) + draw(st.sampled_from(SUFFIXES))


def test_fuzzed_locations_only_raise_claim_check_errors_and_never_read_outside(tmp_path):
    root = tmp_path / "fuzz" / "root"
    root.mkdir(parents=True)
    (root / "good.json").write_bytes(DOCUMENT)
    outside = tmp_path / "fuzz" / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.json").write_bytes(SECRET)
    (outside / "dir" / "secret.json").write_bytes(SECRET)
    (root / "sub").mkdir()
    (root / "sub" / "good.json").write_bytes(DOCUMENT)
    (root / "link-out.json").symlink_to(outside / "secret.json")
    (root / "dir-out").symlink_to(outside / "dir")
    (root / "zero.json").symlink_to("/dev/zero")
    (root / "link-in.json").symlink_to(root / "good.json")
    (root / "loop.json").symlink_to(root / "loop.json")
    os.mkfifo(root / "fifo.json")
    store = ClaimCheckStore([f"file://{root}"], max_object_bytes=4096)

    @settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
    @given(locations(str(root)))
    def read_one(location):
        try:
            data = read_within(store, location, root / "fifo.json", seconds=5)
        except ClaimCheckError as exc:
            assert str(exc)
            return
        assert data == DOCUMENT, f"{location!r} read something other than an object inside"

    read_one()
