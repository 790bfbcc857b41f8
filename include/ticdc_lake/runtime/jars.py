"""The jars Spark needs (Delta Lake, Spark's Kafka source), fetched once into the Python
environment by ``make setup``.

    python -m ticdc_lake.runtime.jars  # SPARK_ARTIFACTS into <env>/share/ticdc-lake/jars

With Maven (``mvn dependency:copy`` with strict checksums: a jar whose checksum differs from
the repository's is refused), which takes them from its local repository when it has them, so
setup runs offline afterwards; where no ``mvn`` is installed (a container image), straight
from Maven Central, each jar checked against the SHA-1 Maven Central publishes beside it.
On a cluster of your own, ``spark-submit --packages io.delta:delta-spark_4.1_2.13:4.1.0`` (and
``org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1`` to land from Kafka) does the same.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from ticdc_lake.errors import TicdcLakeError
from ticdc_lake.orchestration import DELTA_JARS, SPARK_ARTIFACTS, jar_name

MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
DOWNLOAD_SECONDS = 300


class JarsError(TicdcLakeError):
    """A jar could not be fetched, or did not match its checksum."""


class MissingJarsError(JarsError):
    """A session was asked for without the Delta jars in the environment."""


def jars_folder(python: str = sys.executable) -> Path:
    return Path(python).parent.parent / DELTA_JARS


def fetch(python: str = sys.executable) -> list[Path]:
    """Every SPARK_ARTIFACTS jar in ``python``'s environment, fetching those missing."""
    folder = jars_folder(python)
    folder.mkdir(parents=True, exist_ok=True)
    for artifact in SPARK_ARTIFACTS:
        if not (folder / jar_name(artifact)).is_file():
            if shutil.which("mvn"):
                _with_maven(artifact, folder)
            else:
                _from_maven_central(artifact, folder)
    return [folder / jar_name(artifact) for artifact in SPARK_ARTIFACTS]


def _with_maven(artifact: str, folder: Path) -> None:
    command = ["mvn", "-q", "-B", "-C", "dependency:copy", f"-Dartifact={artifact}",
               f"-DoutputDirectory={folder}"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (folder / jar_name(artifact)).is_file():
        output = (done.stdout + done.stderr)[-2000:]
        raise JarsError(f"mvn could not fetch {artifact} (exit {done.returncode}):\n{output}")


def _from_maven_central(artifact: str, folder: Path) -> None:
    group, name, version = artifact.split(":")
    url = f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{name}/{version}/{jar_name(artifact)}"
    try:
        expected = _download(url + ".sha1").decode("ascii").split()[0].lower()
        data = _download(url)
    except OSError as exc:
        raise JarsError(f"cannot download {url}: {exc}") from exc
    found = hashlib.sha1(data, usedforsecurity=False).hexdigest()
    if found != expected:
        raise JarsError(f"{url}: SHA-1 {found}, but Maven Central publishes {expected}")
    partial = folder / f"{jar_name(artifact)}.{os.getpid()}.part"
    partial.write_bytes(data)
    os.replace(partial, folder / jar_name(artifact))


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=DOWNLOAD_SECONDS) as response:
        return response.read()


def main() -> int:
    try:
        jars = fetch()
    except JarsError as exc:
        print(f"jars: {exc}", file=sys.stderr)
        return 1
    for jar in jars:
        print(f"jars: {jar} ({jar.stat().st_size >> 10} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
