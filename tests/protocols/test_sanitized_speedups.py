"""The C extensions built with AddressSanitizer and UndefinedBehaviorSanitizer, and the decoder
and silver tests (their fuzzing included) run against them in a fresh interpreter: a read past a
message's end, a use after free or a signed overflow on hostile input fails here, where the
plain builds could return garbage and pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "include" / "ticdc_lake"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
# The tests run sanitized: every one under tests/protocols and in tests/silver/test_rows.py but
# the one that limits its process's address space, which ASan's shadow memory cannot fit in,
# this module (it would start itself again), and the cross-protocol comparison (the decoders'
# own tests reach the same C code; it would add minutes).
SANITIZED_TESTS = [
    "tests/protocols",
    "tests/silver/test_rows.py",
    "--ignore=tests/protocols/test_sanitized_speedups.py",
    "--ignore=tests/protocols/test_cross_protocol.py",
    "-k",
    "not bounded_process",
]
PROBE = """
#include <stdlib.h>
int past_the_end(int size) {
    char *bytes = malloc(size);
    int read = bytes[size];
    free(bytes);
    return read;
}
int plus_one(int value) { return value + 1; }
"""


def _asan_runtime() -> str | None:
    """gcc's ASan runtime, preloaded into the Python that runs sanitized code; None without gcc
    or without the runtime."""
    if shutil.which("gcc") is None:
        return None
    found = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


@pytest.fixture(scope="module")
def runtime() -> str:
    found = _asan_runtime()
    if found is None:
        pytest.skip("gcc with its AddressSanitizer runtime is not installed")
    return found


def compile_sanitized(source: Path, target: Path) -> None:
    include = sysconfig.get_paths()["include"]
    command = ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", *SANITIZE,
               f"-I{include}", str(source), "-o", str(target)]  # fmt: skip
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]


def sanitized_env(runtime: str, path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(path),
        "LD_PRELOAD": runtime,
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }


@pytest.fixture(scope="module")
def sanitized(runtime, tmp_path_factory) -> Path:
    """A copy of the package whose extensions are the sanitized builds."""
    root = tmp_path_factory.mktemp("sanitized")
    shutil.copytree(
        PACKAGE, root / "ticdc_lake", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    sources = sorted((root / "ticdc_lake").glob("**/_*_speedups.c"))  # protocols/native/, silver/
    assert len(sources) == 4, sources
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    with ThreadPoolExecutor(2) as pool:
        built = [pool.submit(compile_sanitized, s, s.with_name(s.stem + suffix)) for s in sources]
        for done in built:
            done.result()
    return root


def test_the_sanitizers_stop_a_bad_read_and_an_overflow(runtime, tmp_path):
    source = tmp_path / "probe.c"
    source.write_text(PROBE)
    compile_sanitized(source, tmp_path / "probe.so")
    for call, report in [
        ("past_the_end(16)", "heap-buffer-overflow"),
        ("plus_one(2**31 - 1)", "signed integer overflow"),
    ]:
        code = f"import ctypes; probe = ctypes.CDLL({str(tmp_path / 'probe.so')!r}); probe.{call}"
        ran = subprocess.run(
            [sys.executable, "-c", code], env=sanitized_env(runtime, tmp_path),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert ran.returncode != 0 and report in ran.stderr, (call, ran.stderr[-2000:])


@pytest.mark.slow  # builds the extensions, then reruns two folders' tests: over a minute
def test_decoder_and_silver_tests_pass_on_the_sanitized_extensions(runtime, sanitized):
    env = sanitized_env(runtime, sanitized)
    loaded = subprocess.run(
        [sys.executable, "-c", "from ticdc_lake.protocols import craft, open_protocol, canal_json; "
         "from ticdc_lake.silver import rows as silver; "
         "print([m.SPEEDUPS.__file__ for m in (craft, open_protocol, canal_json, silver)])"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.count(str(sanitized)) == 4, loaded.stdout
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SANITIZED_TESTS],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert ran.returncode == 0, (ran.stdout[-4000:], ran.stderr[-4000:])
    assert "AddressSanitizer" not in ran.stderr and "runtime error" not in ran.stderr
