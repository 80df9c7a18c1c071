"""Shared pieces of the deployment tests (deploy/, docs/operations.md).

Tools: ``systemd-analyze``, ``systemd-sysusers``, ``promtool``, ``hadolint`` and
``check-jsonschema`` are installed by ``scripts/setup``; a test that needs one FAILS when it is
absent (``tool()``), since a skip would hide a machine that setup left incomplete. The daemon
(``$EINSUMMABLE_DAEMON``, default ``build/bin/einsummabled``) and the Docker daemon are
different: tests that need them skip, saying why, where they are missing; so does the health
probe, built beside the daemon.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
DEFAULT_DAEMON = REPO_ROOT / "build" / "bin" / "einsummabled"


def tool(name: str) -> str:
    """The path of a tool scripts/setup installs (Debian's packages, or .venv/bin); fails the
    test when it is missing."""
    for candidate in (VENV_BIN / name, REPO_ROOT / ".venv" / "bin" / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found (in .venv/bin or on PATH): scripts/setup installs it")
    return path


def run(args, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    """Runs a command, capturing text output."""
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 free just now (for --metrics_port, where 0 means off)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of a systemd EnvironmentFile= in the subset the example uses: KEY=VALUE
    lines, '#' comments and blank lines (systemd.exec(5) "EnvironmentFile=")."""
    variables = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        key, sep, value = stripped.partition("=")
        assert sep, f"{path}:{number}: not KEY=VALUE: {line!r}"
        assert not value.startswith(("'", '"')), f"{path}:{number}: quoting is not needed"
        variables[key.strip()] = value.strip()
    return variables


def compose_bind_mounts(service: dict) -> dict[str, str]:
    """A compose service's bind mounts (short syntax SOURCE:TARGET[:MODE] with a relative or
    absolute SOURCE, where a SOURCE ${VAR:-default} is its default), source -> target; named
    volumes are left out."""
    mounts = {}
    for volume in service.get("volumes", []):
        volume = re.sub(r"^\$\{\w+:-([^}]*)\}", r"\1", volume)
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts[source] = target
    return mounts


def unit_exec_start(unit_text: str) -> list[str]:
    """ExecStart='s command line, backslash continuations joined and split on white space (the
    unit quotes nothing)."""
    joined = unit_text.replace("\\\n", " ")
    lines = [line for line in joined.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, f"expected one ExecStart= line, found {len(lines)}"
    return lines[0][len("ExecStart=") :].split()


def tryfromenv_flags(args: list[str]) -> list[str]:
    """The flags named by every --tryfromenv=... argument, in order."""
    flags = []
    for arg in args:
        if arg.startswith("--tryfromenv="):
            flags.extend(name for name in arg[len("--tryfromenv=") :].split(",") if name)
    return flags


@pytest.fixture(scope="session")
def daemon_binary() -> Path:
    binary = Path(os.environ.get("EINSUMMABLE_DAEMON", DEFAULT_DAEMON))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.skip(
            f"einsummabled not found at {binary}: build it (cmake --build build --target "
            "einsummabled) or point EINSUMMABLE_DAEMON at it"
        )
    return binary


class DaemonProcess:
    """A running einsummabled started with exactly the given arguments and environment.

    The first stdout line is ``listening on HOST:PORT`` (docs/server.md); a thread then drains
    stdout so the daemon never blocks on a full pipe. stderr (the log) goes to a file."""

    def __init__(self, args, env, workdir: Path, timeout: float = 60):
        self.log_path = workdir / "einsummabled.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [str(a) for a in args],
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=workdir,
            )
        first_line = []
        got_line = threading.Event()

        def drain():
            for index, line in enumerate(self.process.stdout):
                if index == 0:
                    first_line.append(line.decode(errors="replace").strip())
                    got_line.set()
            got_line.set()

        threading.Thread(target=drain, daemon=True).start()
        if not got_line.wait(timeout) or not first_line:
            self.stop()
            raise RuntimeError(f"einsummabled printed no first line; its log:\n{self.log_tail()}")
        prefix = "listening on "
        if not first_line[0].startswith(prefix):
            self.stop()
            raise RuntimeError(f"first line {first_line[0]!r}; its log:\n{self.log_tail()}")
        self.address = first_line[0][len(prefix) :]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Polls predicate() until it returns something true; fails naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
