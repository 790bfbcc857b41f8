"""A real Apache Kafka broker for tests (via ``pytest_plugins``): one KRaft node (broker and
controller in one JVM) on free 127.0.0.1 ports, its storage formatted in a temporary folder per
test session, stopped at the end of the session whatever happened.

    def test_something(kafka_broker, kcat):
        kafka_broker.create_topic("t", partitions=3, config={"message.timestamp.type": ...})
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka_broker.bootstrap})
        subprocess.run([kcat, "-C", "-J", "-e", "-b", kafka_broker.bootstrap, "-t", "t"], ...)

Kafka comes from Maven Central, not from a container image or a tarball: ``python -m
tests.kafka_broker`` (``make kafka``, which ``make test`` runs) resolves
``org.apache.kafka:kafka_2.13:KAFKA_VERSION`` and its runtime dependencies with ``mvn`` (strict
checksums) into ``<env>/share/ticdc-lake/kafka/<version>`` once; Maven's local repository serves
it offline afterwards. ``$TICDC_KAFKA_JARS`` names another folder. The fixture fetches the jars
itself when they are missing, and skips (saying why) only when there is no ``java``, or no
``mvn`` and no jars, or Maven cannot get them. ``kcat`` (Debian's, which ``make kafka``
installs when root) is a fixture of its own, skipping when it is not installed.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

KAFKA_VERSION = "4.1.1"
# Kafka logs through SLF4J; its runtime dependencies bring log4j-core but no binding, without
# which the broker says nothing at all (the distribution ships this binding).
LOG4J_VERSION = "2.24.3"
ARTIFACTS = (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
)
_COMPLETE = ".complete"  # written once every jar is in the folder
START_SECONDS = 60
STOP_SECONDS = 30
HEAP = "-Xmx256m"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ticdc-lake.tests</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = (
    "    <dependency><groupId>{}</groupId><artifactId>{}</artifactId>"
    "<version>{}</version></dependency>"
)
_LOG4J2 = """status = warn
appender.console.type = Console
appender.console.name = stdout
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = stdout
logger.kafka.name = org.apache.kafka
logger.kafka.level = INFO
"""


class KafkaUnavailableError(Exception):
    """Kafka's jars or java cannot be had on this machine (the fixture skips, saying this)."""


def jars_folder(python: str = sys.executable) -> Path:
    configured = os.environ.get("TICDC_KAFKA_JARS")
    if configured:
        return Path(configured)
    return Path(python).parent.parent / "share" / "ticdc-lake" / "kafka" / KAFKA_VERSION


def fetch_jars(folder: Path | None = None) -> list[Path]:
    """Kafka's jars in ``folder`` (jars_folder()), resolved with Maven when not there yet."""
    folder = folder or jars_folder()
    if not (folder / _COMPLETE).is_file():
        if not shutil.which("mvn"):
            raise KafkaUnavailableError(
                f"Kafka's jars are not in {folder} and there is no mvn to fetch them "
                "(apt-get install maven, then make kafka)"
            )
        _with_maven(folder)
    return sorted(folder.glob("*.jar"))


def _with_maven(folder: Path) -> None:
    dependencies = "\n".join(_DEPENDENCY.format(*a.split(":")) for a in ARTIFACTS)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kafka-pom-") as work:
        (Path(work) / "pom.xml").write_text(_POM.format(dependencies=dependencies))
        command = ["mvn", "-q", "-B", "-C", "-f", str(Path(work) / "pom.xml"),
                   "dependency:copy-dependencies", "-DincludeScope=runtime",
                   f"-DoutputDirectory={folder}"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-2000:]
        raise KafkaUnavailableError(
            f"mvn could not fetch {', '.join(ARTIFACTS)} (exit {done.returncode}):\n{output}"
        )
    (folder / _COMPLETE).write_text("\n".join(ARTIFACTS) + "\n")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cluster_id() -> str:
    """A random KRaft cluster id, as ``kafka-storage random-uuid`` prints (base64url, 22 chars).
    Like Kafka's own, never one starting with ``-``: ``format -t -abc...`` reads it as an option
    (one session in 64 failed so)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class KafkaBroker:
    """One KRaft node (``process.roles=broker,controller``) with its data in ``home``."""

    home: Path
    jars: list[Path]
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    start_seconds: float = 0.0  # format + start until it answered metadata requests

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.home / "broker.log"

    def _java(self, main: str, *arguments: str) -> list[str]:
        classpath = os.pathsep.join(str(jar) for jar in self.jars)
        return ["java", HEAP, "-Xms64m", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
                "-cp", classpath, main, *arguments]  # fmt: skip

    def write_config(self) -> Path:
        (self.home / "log4j2.properties").write_text(_LOG4J2)
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            "auto.create.topics.enable": "false",  # a topic a test did not create is a mistake
            "num.partitions": "1",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Test data is stamped with its commit times, past or future: accept any CreateTime,
            # and keep it: with the default retention (7 days, by the records' timestamps) the
            # retention check, every 5 minutes, deleted a topic of 2024's records mid-session.
            "log.message.timestamp.before.max.ms": str(2**63 - 1),
            "log.message.timestamp.after.max.ms": str(2**63 - 1),
            "log.retention.ms": "-1",
        }
        path = self.home / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        return path

    def start(self) -> None:
        began = time.monotonic()
        config = self.write_config()
        formatted = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(config)),
            capture_output=True,
            text=True,
            check=False,
        )
        if formatted.returncode != 0:
            raise RuntimeError(
                f"kafka-storage format failed (exit {formatted.returncode}):\n"
                f"{(formatted.stdout + formatted.stderr)[-3000:]}"
            )
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self._java("kafka.Kafka", str(config)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_until_ready(began + START_SECONDS)
        self.start_seconds = time.monotonic() - began

    def _wait_until_ready(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the Kafka broker exited with {self.process.returncode} before it was "
                    f"ready; the end of its log ({self.log}):\n{self.log_tail()}"
                )
            with contextlib.suppress(Exception):
                if 1 in admin.list_topics(timeout=1).brokers:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the Kafka broker did not answer on {self.bootstrap} within "
                    f"{START_SECONDS} s; the end of its log ({self.log}):\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> int | None:
        """SIGTERM (a controlled shutdown), then SIGKILL after STOP_SECONDS; the exit code."""
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def create_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topic = NewTopic(name, partitions, 1, config=dict(config or {}))
        for future in admin.create_topics([topic], operation_timeout=30).values():
            future.result(timeout=60)
        # Wait until every partition has a leader: producing earlier fails.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = admin.list_topics(name, timeout=5).topics.get(name)
            leaders = [p.leader for p in found.partitions.values()] if found else []
            if found and not found.error and leaders == [1] * partitions:
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} has no leader for every partition after 30 s")


def available_jars() -> list[Path]:
    """Kafka's jars, fetched if needed; KafkaUnavailableError without java or the jars."""
    if not shutil.which("java"):
        raise KafkaUnavailableError("no java on PATH (apt-get install default-jre-headless)")
    return fetch_jars()


@contextlib.contextmanager
def running_broker(home: Path, jars: list[Path]) -> Iterator[KafkaBroker]:
    """A broker in ``home`` until the block ends, pass or fail."""
    broker = KafkaBroker(home, jars)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> Iterator[KafkaBroker]:
    """One Kafka broker for the whole test session (see the module's docstring)."""
    try:
        jars = available_jars()
    except KafkaUnavailableError as exc:
        pytest.skip(f"no Kafka broker: {exc}")
    with running_broker(tmp_path_factory.mktemp("kafka"), jars) as broker:
        yield broker


@pytest.fixture(scope="session")
def kcat() -> str:
    """The path of kcat (Debian's ``kcat`` package; ``make kafka`` installs it when root)."""
    found = shutil.which("kcat")
    if not found:
        pytest.skip("kcat is not installed (apt-get install kcat, or make kafka as root)")
    return found


def main() -> int:
    try:
        jars = fetch_jars()
    except KafkaUnavailableError as exc:
        print(f"kafka: {exc}", file=sys.stderr)
        return 1
    size = sum(jar.stat().st_size for jar in jars)
    print(f"kafka: {len(jars)} jars of Kafka {KAFKA_VERSION} in {jars_folder()} ({size >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
