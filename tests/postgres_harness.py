"""A PostgreSQL server for tests (via ``pytest_plugins``): a temporary cluster made with the
installed server's own ``initdb`` and ``postgres`` (Debian's ``postgresql`` package:
/usr/lib/postgresql/<version>/bin), the metadata database docker-compose.yml gives Airflow.

    def test_something(postgres):              # one server for the whole session
        url = postgres.database("airflow_x")   # a new database and its own user, password made
        ...     # url: postgresql+psycopg2://airflow_x:PASSWORD@127.0.0.1:PORT/airflow_x

The server listens on 127.0.0.1 at a free port (its Unix socket in its own data folder, nowhere
else), with fsync off: a crash loses the cluster, which is thrown away anyway. Every login needs
its password (scram-sha-256, the superuser's too: nothing is trusted). Postgres refuses to run as
root: under root the cluster belongs to the ``postgres`` system user (``nobody`` without one) and
its programs run as that user. At the session's end the server is stopped, pass or fail: a fast
shutdown (SIGINT, what ``pg_ctl stop -m fast`` sends), then SIGKILL to whatever of its session is
left; then its folder is removed.

The tests are skipped, saying why, only where no server is installed (``make test`` installs
Debian's ``postgresql`` where it can: as root with apt-get).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ticdc_lake.airflow.airflow_local import session_processes, signal_session

from tests.airflow_harness import free_port

SUPERUSER = "postgres"
READY_WITHIN = 60.0  # seconds
STOP_WITHIN = 30.0  # seconds between the fast shutdown and SIGKILL
SERVER_PROGRAMS = ("initdb", "postgres")
# Off for speed: nothing here must survive a crash.
SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",  # several Airflows, each process with a pool of its own
}
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def server_bin() -> Path | None:
    """The folder of an installed server's ``initdb`` and ``postgres``: on PATH, or Debian's
    newest /usr/lib/postgresql/<version>/bin; None when there is none."""
    found = shutil.which("initdb")
    if found and (Path(found).parent / "postgres").is_file():
        return Path(found).parent
    versions = sorted(
        (
            path.parent
            for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")
            if (path.parent / "postgres").is_file()
        ),
        key=lambda folder: [int(part) for part in re.findall(r"\d+", folder.parent.name)],
    )
    return versions[-1] if versions else None


def server_user() -> pwd.struct_passwd | None:
    """Whom the server runs as: None for ourselves, a system user when we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and neither a postgres nor a nobody user to run Postgres")


@dataclass
class PostgresServer:
    """A running temporary cluster; ``database()`` makes a database with a user of its own."""

    bin_dir: Path
    folder: Path  # holds data/ (the cluster, its socket) and server.log
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(18), repr=False)
    user: pwd.struct_passwd | None = field(default_factory=server_user)
    process: subprocess.Popen | None = None

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def _as_owner(self) -> dict:
        """subprocess arguments that run a program as the cluster's owner."""
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def start(self) -> None:
        self.folder.chmod(0o700)
        if self.user is not None:
            os.chown(self.folder, self.user.pw_uid, self.user.pw_gid)
        pwfile = self.folder / "superuser.pw"
        pwfile.write_text(self.password + "\n")
        if self.user is not None:
            os.chown(pwfile, self.user.pw_uid, self.user.pw_gid)
        pwfile.chmod(0o600)
        try:
            done = subprocess.run(
                [str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
                 "--auth=scram-sha-256", f"--pwfile={pwfile}", "--encoding=UTF8",
                 "--locale=C", "--no-sync"],
                capture_output=True, text=True, timeout=300, **self._as_owner(),
            )  # fmt: skip
        finally:
            pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        settings = {
            **SETTINGS,
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self.data),
        }
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.data)]
                + [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # stopped with every backend it forks
                **self._as_owner(),
            )
        self._wait_ready()

    def connect(self, database: str = "postgres", user: str = SUPERUSER, password: str = ""):
        import psycopg2  # requirements.txt; not imported by test runs that need no server

        return psycopg2.connect(
            host=self.host,
            port=self.port,
            dbname=database,
            user=user,
            password=password or self.password,
            connect_timeout=5,
        )

    def _wait_ready(self) -> None:
        import psycopg2

        deadline = time.monotonic() + READY_WITHIN
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"postgres exited with status {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                self.connect().close()
                return
            except psycopg2.OperationalError as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"postgres not ready within {READY_WITHIN:.0f} s: {error}\n"
                        f"{self.log_tail()}"
                    ) from error
            time.sleep(0.2)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.is_file() else ""

    def database(self, name: str, password: str | None = None) -> str:
        """A new database ``name`` owned by a new user ``name`` with ``password`` (made when not
        given): its SQLAlchemy URL, the password percent-encoded in it."""
        from urllib.parse import quote

        if not _NAME.fullmatch(name):
            raise ValueError(f"not a plain lowercase SQL name: {name!r}")
        password = password or secrets.token_urlsafe(18)
        connection = self.connect()
        connection.autocommit = True  # CREATE DATABASE cannot run in a transaction
        try:
            with connection.cursor() as cursor:
                # psycopg2 quotes the password into the statement itself (no server-side
                # parameters here): any character is safe.
                cursor.execute(f"CREATE ROLE {name} LOGIN PASSWORD %s", (password,))
                cursor.execute(f"CREATE DATABASE {name} OWNER {name}")
        finally:
            connection.close()
        return (
            f"postgresql+psycopg2://{name}:{quote(password, safe='')}@{self.host}:{self.port}/"
            f"{name}"
        )

    def stop(self) -> None:
        """A fast shutdown (pg_ctl stop -m fast); SIGKILL for whatever is left after
        STOP_WITHIN."""
        if self.process is None:
            return
        sid = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(sid, signal.SIGINT)
        deadline = time.monotonic() + STOP_WITHIN
        while session_processes(sid) and time.monotonic() < deadline:
            self.process.poll()  # reap the postmaster
            time.sleep(0.1)
        signal_session(sid, signal.SIGKILL)
        self.process.wait()
        self.process = None


@contextlib.contextmanager
def start_postgres() -> Iterator[PostgresServer]:
    """A temporary cluster until the block ends; then stopped and its folder removed."""
    bin_dir = server_bin()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL's server (initdb, postgres) is not installed: `make test` installs "
            "Debian's postgresql as root with apt-get; elsewhere install it yourself"
        )
    # Not under pytest's tmp_path: that is root's alone (0700), where a postgres user cannot go.
    server = PostgresServer(bin_dir=bin_dir, folder=Path(tempfile.mkdtemp(prefix="ticdc-lake-pg-")))
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(server.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with start_postgres() as server:
        yield server
