"""Shared fixtures: the TiCDC test vectors and hypothesis profiles; the tiers' markers.

The tiers (docs/testing.md): a test that asks, directly or through another fixture, for the
session's ``spark`` is marked ``spark``, one that asks for a running Airflow ``airflow``, here at
collection, so no marker can be forgotten. Tests that start a JVM or Airflow of their own (a
spark-submit, `airflow dags test`) carry the marker themselves; with TICDC_LAKE_TESTS_FAST=1
(``make test-fast``) every JVM or Airflow started fails saying so, so one that does not shows.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = [
    "tests.spark_fixtures",
    "tests.airflow_harness",
    "tests.postgres_harness",
    "tests.kafka_broker",
    "tests.s3_server",
]

# A fixture a test's closure includes -> the tier's marker it is given.
TIER_FIXTURES = {
    "spark": "spark",  # tests/spark_fixtures.py: the session's SparkSession
    "local_airflow": "airflow",  # tests/airflow_harness.py: Airflow's servers
    "kafka_broker": "kafka",  # tests/kafka_broker.py: a Kafka broker (a JVM)
    "postgres": "postgres",  # tests/postgres_harness.py: a PostgreSQL server
    "s3_server": "s3",  # tests/s3_server.py: an S3 API server (moto)
}
FAST = "TICDC_LAKE_TESTS_FAST"  # tests/airflow_harness.py refuses Airflow too

REPO = Path(__file__).resolve().parent.parent
# CI clones the repo with shared/ beside it; TICDC_SHARED points elsewhere if needed.
SHARED = Path(os.environ.get("TICDC_SHARED", REPO.parent / "shared"))
VECTORS = SHARED / "ticdc" / "vectors"

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def load_vector(relative_path: str):
    """A vector file from shared/ticdc/vectors, parsed. Missing vectors fail loudly, never skip."""
    path = VECTORS / relative_path
    if not path.exists():
        raise FileNotFoundError(
            f"test vector {path} not found: shared/ must sit beside the repo, or set TICDC_SHARED"
        )
    return json.loads(path.read_text())


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    assert VECTORS.is_dir(), f"{VECTORS} missing: shared/ must sit beside the repo"
    return VECTORS


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in set(getattr(item, "fixturenames", ())) & TIER_FIXTURES.keys():
            item.add_marker(TIER_FIXTURES[fixture])


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(FAST) == "1":
        config.stash[NO_JVM_HOME] = refuse_jvms()


def pytest_unconfigure(config: pytest.Config) -> None:
    if NO_JVM_HOME in config.stash:
        shutil.rmtree(config.stash[NO_JVM_HOME], ignore_errors=True)


NO_JVM_HOME = pytest.StashKey[Path]()


def refuse_jvms() -> Path:
    """Every JVM this run starts (pyspark's and spark-submit's launcher run JAVA_HOME's java, or
    PATH's without it) is a `java` that fails saying which marker the test lacks: its home."""
    home = Path(tempfile.mkdtemp(prefix="ticdc-lake-no-jvm-"))
    java = home / "bin" / "java"
    java.parent.mkdir()
    java.write_text(
        "#!/bin/sh\n"
        f"echo '{FAST}=1: this test started a JVM; mark it spark (or ask for the spark "
        "fixture)' >&2\n"
        "exit 1\n"
    )
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    os.environ["JAVA_HOME"] = str(home)
    os.environ["PATH"] = f"{java.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return home
