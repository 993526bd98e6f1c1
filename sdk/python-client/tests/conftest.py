"""A real coordinator (SQLite in a temp dir) and a real agent (two simulated
GPUs, the real cohort-rank) for the client's tests, from the workspace's
debug build (``COHORT_BIN_DIR`` to use another)."""

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[3]
BINS = Path(os.environ.get("COHORT_BIN_DIR", ROOT / "target" / "debug"))

SMALL_JOB = """
[model]
d_in = 32
d_sae = 128

[optim]
learning_rate = 0.003
batch_size = 32
steps = {steps}
seed = 0

[checkpoint]
every_steps = {every}

[data.synthetic]
num_samples = 4096
num_features = 64

[runtime]
device = "cpu"
log_every_steps = {log_every}
"""


def job(steps: int = 60) -> str:
    """The TOML of a small SAE training of ``steps`` steps."""
    return SMALL_JOB.format(steps=steps, every=max(steps // 3, 1), log_every=max(steps // 12, 1))


def _binary(name: str) -> str:
    path = BINS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build with `cargo build --workspace --bins` first")
    return str(path)


@dataclass
class Cohort:
    url: str
    root: Path
    procs: List[subprocess.Popen] = field(default_factory=list)
    ca: Optional[bytes] = None
    tokens: dict = field(default_factory=dict)
    port: int = 0
    name: str = "coordinator"
    coordinator_args: List[str] = field(default_factory=list)
    starts: int = 1

    def restart_coordinator(self) -> None:
        """Kills the coordinator (SIGKILL) and starts it again on its port
        and data: what a client sees as a dropped connection."""
        self.procs[0].kill()
        self.procs[0].wait()
        sock = _bound(self.port)
        self.starts += 1
        self.procs[0] = _start(self.root, f"{self.name}-{self.starts}",
                               [*self.coordinator_args, "--listen-fd", str(sock.fileno())],
                               pass_fds=(sock.fileno(),))
        sock.close()

    def logs(self) -> str:
        out = []
        for log in sorted(self.root.glob("*.log")):
            out.append(f"--- {log.name}\n" + log.read_text(errors="replace")[-4000:])
        return "\n".join(out)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _start(root: Path, name: str, args: List[str], pass_fds=()) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    env["NO_COLOR"] = "1"
    log = open(root / f"{name}.log", "wb")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                            pass_fds=pass_fds, stdin=subprocess.DEVNULL)


def _make_pki(root: Path):
    """A CA and a server certificate for 127.0.0.1 (openssl)."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=root)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=cohort test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    (root / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
    return root / "server.pem", root / "server.key", (root / "ca.pem").read_bytes()


def _bound(port: int = 0) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    os.set_inheritable(sock.fileno(), True)
    return sock


def start_cohort(root: Path, *, tls: bool = False, agent: bool = True,
                 extra: List[str] = (), name: str = "coordinator") -> Cohort:
    """A coordinator serving a socket bound here (no port race), and an agent."""
    sock = _bound()
    port = sock.getsockname()[1]
    data = root / f"{name}-data"
    data.mkdir()
    coordinator = [_binary("cohort-coordinator"), "--listen", f"127.0.0.1:{port}",
                   "--data-dir", str(data), *extra]
    cohort = Cohort(url=f"{'https' if tls else 'http'}://127.0.0.1:{port}", root=root,
                    port=port, name=name)
    if tls:
        cert, key, cohort.ca = _make_pki(root)
        coordinator += ["--auth", "token", "--tls-cert", str(cert), "--tls-key", str(key)]
        for team, token, role in [("ops", "root", "cluster-admin"), ("vision", "dev", "editor")]:
            made = subprocess.run(
                [_binary("cohort-coordinator"), "token", "create", "--data-dir", str(data),
                 "--team", team, "--name", token, "--role", role],
                check=True, capture_output=True, text=True)
            cohort.tokens[team] = made.stdout.strip().splitlines()[-1].strip()
    cohort.coordinator_args = coordinator
    cohort.procs.append(_start(root, name, [*coordinator, "--listen-fd", str(sock.fileno())],
                               pass_fds=(sock.fileno(),)))
    sock.close()
    if agent:
        work = root / "agent"
        work.mkdir()
        agent_args = [_binary("cohort-agent"), "--coordinator", cohort.url, "--name", "py-agent",
                      "--simulate-gpus", "2", "--address", "127.0.0.1", "--work-dir", str(work),
                      "--rank-binary", _binary("cohort-rank"), "--interval", "500ms",
                      "--stop-grace", "3s"]
        cohort.procs.append(_start(root, "agent", agent_args))
    return cohort


def wait_for_gpus(client, count: int = 2, timeout: float = 60.0) -> None:
    """Until the agent's GPUs are registered."""
    deadline = time.monotonic() + timeout
    while True:
        gpus = client.gpus()
        if len(gpus) >= count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(gpus)} GPUs after {timeout} s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory, request):
    running = start_cohort(tmp_path_factory.mktemp("cohort"))
    yield running
    running.stop()
    if request.session.testsfailed:
        print(running.logs())


@pytest.fixture(scope="module")
def secured(tmp_path_factory, request):
    # TLS and token auth; no agent (its trainings stay QUEUED).
    running = start_cohort(tmp_path_factory.mktemp("secured"), tls=True, agent=False)
    yield running
    running.stop()
    if request.session.testsfailed:
        print(running.logs())


PG_BASE = os.environ.get("COHORT_TEST_PG", "postgres://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_schema():
    """A fresh schema on the real PostgreSQL server (dropped after): the URL."""
    schema = f"pyclient_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
    subprocess.run(["psql", PG_BASE, "-qc", f"CREATE SCHEMA {schema}"], check=True)
    yield f"{PG_BASE}?options=-csearch_path%3D{schema}"
    subprocess.run(["psql", PG_BASE, "-qc", f"DROP SCHEMA {schema} CASCADE"], check=True)


def wait_leading(url: str, timeout: float = 60.0) -> None:
    """Until the coordinator at ``url`` takes changes itself: a cancel of
    no training is TRAINING_NOT_FOUND there (a standby says NOT_LEADER)."""
    from cohort_client import Client, CohortError
    deadline = time.monotonic() + timeout
    with Client(url, connect_timeout=2.0, timeout=2.0) as client:
        while True:
            try:
                client.cancel("trn-none")
            except CohortError as error:
                if error.reason == "TRAINING_NOT_FOUND":
                    return
                last = error
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} not leading after {timeout} s: {last}")
            time.sleep(0.2)
