"""Shared fixtures: the TiCDC test vectors and hypothesis profiles."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = [
    "tests.spark_fixtures",
    "tests.airflow_harness",
    "tests.postgres_harness",
    "tests.kafka_broker",
]

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
