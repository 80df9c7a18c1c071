"""`cmake --install` (deploy/install.cmake) into a temporary prefix, from the build tree of the
daemon under test ($EINSUMMABLE_DAEMON's, default build/): the files land where the unit, the
plugin loader and systemd look; the installed unit names the installed daemon and passes
`systemd-analyze verify` as it is (its ExecStart program now exists); the installed daemon opens
the installed CUDA plugin; deploy/docker/check-runtime.sh accepts the prefix. And the Docker
build context (Dockerfile.dockerignore) configures with CMake.

Skipped when the daemon's build tree is absent or was configured before the install rules
existed (reconfigure it: cmake --build build --target einsummabled). About 3 s.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import DEPLOY, REPO_ROOT, run, tool, unit_exec_start


@pytest.fixture(scope="module")
def build_dir(daemon_binary) -> Path:
    build = daemon_binary.resolve().parent.parent
    if not (build / "CMakeCache.txt").is_file():
        pytest.skip(f"{daemon_binary} is not in a CMake build tree ({build})")
    if "einsummabled.service" not in (build / "cmake_install.cmake").read_text():
        pytest.skip(f"{build} was configured before deploy/install.cmake: reconfigure it")
    return build


@pytest.fixture(scope="module")
def prefix(build_dir, tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("prefix")
    result = run([tool("cmake"), "--install", build_dir, "--prefix", prefix], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return prefix


def has_plugin(build_dir: Path) -> bool:
    return (build_dir / "lib" / "libeinsummable_cuda.so").is_file()


def test_files_land_where_they_are_looked_for(prefix, build_dir):
    assert (prefix / "bin" / "einsummabled").stat().st_mode & 0o111
    assert (prefix / "bin" / "einsummable-health-probe").stat().st_mode & 0o111
    assert (prefix / "lib" / "systemd" / "system" / "einsummabled.service").is_file()
    sysusers = prefix / "lib" / "sysusers.d" / "einsummable.conf"
    assert sysusers.read_text() == (DEPLOY / "systemd" / "einsummable.sysusers.conf").read_text()
    env = prefix / "share" / "doc" / "einsummable" / "einsummabled.env"
    assert env.read_text() == (DEPLOY / "systemd" / "einsummabled.env").read_text()
    # runtime/backend_choice.cc opens <program's folder>/../lib/libeinsummable_cuda.so.
    assert (prefix / "lib" / "libeinsummable_cuda.so").is_file() == has_plugin(build_dir)


def test_installed_unit_names_the_installed_daemon_and_verifies(prefix):
    unit = prefix / "lib" / "systemd" / "system" / "einsummabled.service"
    source = (DEPLOY / "systemd" / "einsummabled.service").read_text()
    text = unit.read_text()
    assert unit_exec_start(text)[0] == str(prefix / "bin" / "einsummabled")
    # Only the program's path changed.
    assert text.replace(str(prefix / "bin"), "/usr/local/bin") == source
    result = run([tool("systemd-analyze"), "verify", unit])
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
        result.stdout + result.stderr
    )


def test_installed_daemon_opens_the_installed_plugin(prefix, build_dir):
    if not has_plugin(build_dir):
        pytest.skip(f"{build_dir} has no CUDA plugin (built without nvcc)")

    # The build tree's RUNPATH (the CUDA toolkit's folder) survives the install; CMake pads
    # the build tree's with empty entries.
    def runpath(library: Path) -> list[str]:
        found = re.search(r"Library r(?:un)?path: \[(.*)\]", run(["readelf", "-d", library]).stdout)
        return [entry for entry in (found.group(1) if found else "").split(":") if entry]

    built = runpath(build_dir / "lib" / "libeinsummable_cuda.so")
    assert runpath(prefix / "lib" / "libeinsummable_cuda.so") == built
    result = run(
        [
            prefix / "bin" / "einsummabled",
            "--backend=cuda",
            "--listen=127.0.0.1:0",
            "--metrics_port=0",
            "--token_file=/nonexistent/token",
        ]
    )
    assert result.returncode == 2
    assert "plugin cannot be opened" not in result.stderr, result.stderr


def test_check_runtime_accepts_the_prefix(prefix, build_dir, tmp_path):
    """The image's last build step, on this prefix: it needs the health probe (installed with the
    daemon) and the plugin."""
    if not has_plugin(build_dir):
        pytest.skip(f"{build_dir} has no CUDA plugin (built without nvcc)")
    check = DEPLOY / "docker" / "check-runtime.sh"
    result = run([check, prefix], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("check-runtime: ok")

    broken = tmp_path / "broken"
    shutil.copytree(prefix, broken, symlinks=True)
    (broken / "lib" / "libeinsummable_cuda.so").unlink()
    result = run([check, broken], timeout=180)
    assert result.returncode == 1 and "libeinsummable_cuda.so is missing" in result.stderr


def test_docker_build_context_configures(tmp_path):
    """What Dockerfile.dockerignore lets into the build context is enough for CMake to configure
    the daemon's build as the image does (tests and benchmarks off); CMake checks that every
    source file it lists exists."""
    from test_docker import dockerignore_patterns, in_context

    files = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT).stdout.split()
    patterns = dockerignore_patterns()
    context = tmp_path / "context"
    for path in files:
        source = REPO_ROOT / path
        if source.is_file() and in_context(path, patterns):
            (context / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, context / path)
    frontend = sorted(REPO_ROOT.glob(".venv/lib/python3*/site-packages/include"))
    result = run(
        [
            tool("cmake"),
            "-S",
            context,
            "-B",
            tmp_path / "build",
            "-G",
            "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}",
            "-DEINSUMMABLE_BUILD_TESTS=OFF",
            "-DEINSUMMABLE_BUILD_BENCH=OFF",
            *([f"-DEINSUMMABLE_CUDNN_FRONTEND_INCLUDE_DIR={frontend[0]}"] if frontend else []),
        ],
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    targets = run([tool("ninja"), "-C", tmp_path / "build", "-t", "targets", "all"]).stdout
    assert "bin/einsummabled:" in targets
