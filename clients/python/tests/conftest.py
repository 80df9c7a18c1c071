"""Fixtures: the package from this source tree, an in-process fake server, a real daemon.

The tests import the installed ``einsummable`` (scripts/setup installs clients/python into the
project's .venv; test_package.py checks that it is the installed one and current with proto/).

``daemon`` starts the real einsummabled once per session: the binary named by
``$EINSUMMABLE_DAEMON`` (default ``<repository>/build/bin/einsummabled``) on a free loopback
port, with 8 CPU devices, a temporary plan cache directory and no metrics endpoint (extra flags
from ``$EINSUMMABLE_DAEMON_ARGS``); tests that use it are skipped, saying why, when the binary
is absent.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CLIENT_ROOT = HERE.parent
REPO_ROOT = CLIENT_ROOT.parent.parent

# The tests' own helpers (fake_server, serving_block, ...), importable from bench/ too.
sys.path.insert(0, str(HERE))

DEFAULT_DAEMON = REPO_ROOT / "build" / "bin" / "einsummabled"
DAEMON_DEVICES = 8


def load_example(name: str):
    """Imports clients/python/examples/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(
        f"einsummable_example_{name}", CLIENT_ROOT / "examples" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    """A TCP port on 127.0.0.1 free just now, for servers that cannot pick their own (the
    daemon's ``--metrics_port``, where 0 means off; Prometheus). Another process may take it
    before the server binds it; the server then fails to start and says so."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def matmul_graph(d: int = 8, e: int = 8):
    """The tiny model several daemon tests register: y = x·w with x [tokens, d] (tokens
    symbolic) and w [d, e] (a weight)."""
    import einsummable as es

    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d", d)]), name="x")
    w = g.insertTensor(es.tensorDesc([("d", d), ("e", e)]), name="w")
    g.save(g.matmul(x, w, name="y"))
    return g


@pytest.fixture(scope="session")
def fake_server():
    from fake_server import FakeServer

    server = FakeServer(devices=DAEMON_DEVICES)
    yield server
    server.stop()


class Daemon:
    """A running einsummabled: ``address`` (host:port), ``log_tail()`` (its stderr).

    Started with ``--listen=127.0.0.1:0``: the daemon picks a free port and says which on its
    first stdout line, ``listening on 127.0.0.1:PORT`` (docs/server.md); a thread keeps
    draining stdout into the log afterwards so the daemon never blocks on a full pipe.
    """

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        extra_flags=(),
        token=None,
        root_certificates=None,
        launcher=(),
        env=None,
        last_flags=(),
    ):
        self.binary = binary
        self.workdir = workdir
        self.plan_cache_dir = workdir / "plans"
        self.plan_cache_dir.mkdir(exist_ok=True)
        self.log_path = workdir / "einsummabled.log"
        self.extra_flags = list(extra_flags)
        # Flags after $EINSUMMABLE_DAEMON_ARGS, so that they win over it (test_cluster.py's
        # ranks' own devices).
        self.last_flags = list(last_flags)
        self.token = token  # the bearer token the daemon asks for, if any
        # PEM bytes or a file trusted for the daemon's --tls_cert: start() then waits for
        # readiness over TLS
        self.root_certificates = root_certificates
        self.process = None
        self.address = None
        # A command the daemon runs under: ["mpirun", ..., "-np", "2"] for one daemon over
        # several processes (test_cluster.py).
        self.launcher = list(launcher)
        # Variables set for the daemon on top of this process's environment.
        self.env = dict(env or {})

    def start(self, timeout: float = 60.0, wait_loaded: bool = True):
        """Starts the daemon and waits until it answers and, with ``wait_loaded``, until its
        ``--model_repository`` (if any) has loaded (``Client.wait_ready``)."""
        import einsummable as es

        args = [
            *self.launcher,
            str(self.binary),
            "--listen=127.0.0.1:0",
            f"--plan_cache_dir={self.plan_cache_dir}",
            # The CPU backend unless EINSUMMABLE_DAEMON_ARGS (last, so it wins) asks for
            # another: scripts/gpu-check passes "--backend=cuda --devices=0,0,0,0,0,0,0,0".
            "--backend=cpu",
            f"--devices={DAEMON_DEVICES}",
            "--metrics_port=0",
            *self.extra_flags,
            *os.environ.get("EINSUMMABLE_DAEMON_ARGS", "").split(),
            *self.last_flags,
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env={**os.environ, **self.env} if self.env else None,
            )
        first_line = []
        got_line = threading.Event()

        def drain():
            with open(self.log_path, "ab") as log:
                for index, line in enumerate(self.process.stdout):
                    if index == 0:
                        first_line.append(line.decode(errors="replace").strip())
                        got_line.set()
                    else:
                        log.write(line)
                        log.flush()
            got_line.set()

        threading.Thread(target=drain, daemon=True).start()
        if not got_line.wait(timeout) or not first_line:
            self.stop()
            raise RuntimeError(
                f"einsummabled printed no 'listening on' line within {timeout:g} s; its log:\n"
                f"{self.log_tail()}"
            )
        prefix = "listening on "
        if not first_line[0].startswith(prefix):
            self.stop()
            raise RuntimeError(
                f"einsummabled's first line is {first_line[0]!r}, not "
                f"'{prefix}HOST:PORT'; its log:\n{self.log_tail()}"
            )
        self.address = first_line[0][len(prefix) :].strip()
        with es.Client(
            self.address, token=self.token, root_certificates=self.root_certificates
        ) as client:
            client.wait_ready(timeout=timeout, repository=wait_loaded)
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def daemon_binary() -> Path:
    binary = Path(os.environ.get("EINSUMMABLE_DAEMON", DEFAULT_DAEMON))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.skip(
            f"einsummabled not found at {binary}: build it (cmake --build build --target "
            "einsummabled) or point EINSUMMABLE_DAEMON at it"
        )
    return binary


@pytest.fixture(scope="session")
def daemon(daemon_binary):
    with tempfile.TemporaryDirectory(prefix="einsummable-test-") as workdir:
        d = Daemon(daemon_binary, Path(workdir))
        d.start()
        try:
            yield d
        finally:
            d.stop()


@pytest.fixture()
def daemon_client(daemon):
    import einsummable as es

    with es.Client(daemon.address, timeout=60) as client:
        yield client
