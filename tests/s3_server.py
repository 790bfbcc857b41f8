"""A real S3 API for tests (via ``pytest_plugins``): moto's standalone server (PyPI's
``moto[s3]`` with Flask) in a process of its own on a free 127.0.0.1 port, started once per
test session and stopped at its end whatever happened.

    def test_something(s3_server):
        bucket = s3_server.bucket()                   # a new empty bucket
        s3_server.client().put_object(Bucket=bucket, Key="k", Body=b"...")
        config_text = s3_server.storage_yaml()        # the pipeline config's storage: section

Credentials are fixed test values in two environment variables the session sets
(``S3_TEST_KEY``/``S3_TEST_SECRET``), named by the config as a user's would be (the server
itself checks no signature).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from ticdc_lake.storage import S3Settings

from tests.kafka_broker import free_port

ACCESS_KEY, SECRET_KEY = "AKIATESTLAKEKEY0001", "test-lake-secret-5e3c0f4a9d1b"
KEY_ENV, SECRET_ENV = "S3_TEST_KEY", "S3_TEST_SECRET"
REGION = "us-east-1"
START_SECONDS = 30


@dataclass
class S3Server:
    endpoint: str  # http://127.0.0.1:<port>

    def client(self, secret: str = SECRET_KEY):
        import boto3  # moto's dependency: only the S3 tests load it

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=secret,
            region_name=REGION,
        )

    def bucket(self) -> str:
        """A new empty bucket's name."""
        name = f"lake-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def settings(self) -> S3Settings:
        """What the config's ``storage_yaml()`` section gives."""
        return S3Settings(self.endpoint, REGION, True, KEY_ENV, SECRET_ENV)

    def storage_yaml(self) -> str:
        """The config's ``storage:`` section for this server."""
        return (
            "storage:\n"
            "  s3:\n"
            f"    endpoint: {self.endpoint}\n"
            f"    region: {REGION}\n"
            "    path-style: true\n"
            f"    access-key-id-env: {KEY_ENV}\n"
            f"    secret-access-key-env: {SECRET_ENV}\n"
        )


def _started(endpoint: str, process: subprocess.Popen) -> bool:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                return True
        except OSError:
            time.sleep(0.2)
    return False


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    pytest.importorskip("moto.server", reason="moto[s3] is not installed (requirements.txt)")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    previous = {name: os.environ.get(name) for name in (KEY_ENV, SECRET_ENV)}
    try:
        if not _started(endpoint, process):
            process.kill()
            pytest.fail(f"moto's S3 server did not start: {process.stderr.read().decode()[-2000:]}")
        os.environ[KEY_ENV], os.environ[SECRET_ENV] = ACCESS_KEY, SECRET_KEY
        yield S3Server(endpoint)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
