"""deploy/systemd: the unit passes `systemd-analyze verify` and its offline security review, keeps
the GPU reachable, names every daemon flag in its configuration list, and runs the real daemon
with the example environment file as systemd would.

systemd-analyze verify checks that ExecStart's program exists and is executable. The unit names
/usr/local/bin/einsummabled (where `cmake --install` puts it, deploy/install.cmake), which a
development machine does not have, so this test verifies a copy whose ExecStart program is a
stand-in executable in a temporary directory, the rest of the unit unchanged; test_install.py
verifies the unit as `cmake --install` writes it, with the real installed daemon. systemd is
installed but not running here: verify and `security --offline=true` need no manager.

systemd-analyze and systemd-sysusers come from Debian's systemd package (scripts/setup);
missing, the tests fail. The daemon test skips without the daemon. About 4 s.
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

import numpy as np

from conftest import (
    DEPLOY,
    REPO_ROOT,
    DaemonProcess,
    free_port,
    read_env_file,
    run,
    tool,
    tryfromenv_flags,
    unit_exec_start,
    wait_for,
)

SYSTEMD = DEPLOY / "systemd"
UNIT = SYSTEMD / "einsummabled.service"
ENV_EXAMPLE = SYSTEMD / "einsummabled.env"
SYSUSERS = SYSTEMD / "einsummable.sysusers.conf"
INSTALLED_DAEMON = "/usr/local/bin/einsummabled"

# Flags the configuration does not take from the environment: the plan cache directory is the
# unit's state directory, and the testing flags are for tests only.
NOT_CONFIGURABLE = {
    "plan_cache_dir",
    "execute_delay_ms_for_testing",
    "fail_backend_after_runs_for_testing",
    "repository_load_gate_for_testing",
}


def daemon_flags() -> set[str]:
    """Every flag einsummabled defines (server/einsummabled_main.cc)."""
    source = (REPO_ROOT / "server" / "einsummabled_main.cc").read_text()
    flags = set(re.findall(r"ABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)\s*,", source))
    assert len(flags) > 20, flags
    return flags


def unit_settings(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value assigned, in order (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def service() -> dict[str, list[str]]:
    return unit_settings(UNIT.read_text())["Service"]


def verify(unit_text: str, tmp_path: Path) -> tuple[int, str]:
    """systemd-analyze verify on a copy of the unit whose ExecStart program is a stand-in."""
    stand_in = tmp_path / "bin" / "einsummabled"
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)
    copy = tmp_path / "einsummabled.service"
    copy.write_text(unit_text.replace(f"ExecStart={INSTALLED_DAEMON} ", f"ExecStart={stand_in} "))
    result = run([tool("systemd-analyze"), "verify", copy])
    return result.returncode, (result.stdout + result.stderr).strip()


def test_exec_start_is_the_installed_daemon():
    args = unit_exec_start(UNIT.read_text())
    assert args[0] == INSTALLED_DAEMON
    assert "--plan_cache_dir=${STATE_DIRECTORY}/plans" in args


def test_systemd_analyze_verify(tmp_path):
    """verify passes with nothing printed: an unknown key or a bad value is only a warning on
    stderr (exit status 0), so any output fails the test."""
    status, output = verify(UNIT.read_text(), tmp_path)
    assert status == 0 and output == "", output


def test_verify_catches_a_bad_setting(tmp_path):
    """Not vacuous: a misspelt key makes verify print a warning, which the test above rejects."""
    _, output = verify(UNIT.read_text().replace("ProtectHome=yes", "ProtectHomes=yes"), tmp_path)
    assert "Unknown key 'ProtectHomes'" in output, output


def test_offline_security_review(tmp_path):
    """systemd's own exposure score of the hardening, 0 (best) to 10: at most 2.0 ("OK")
    although the NVIDIA devices stay reachable."""
    copy = tmp_path / "einsummabled.service"
    copy.write_text(UNIT.read_text())
    result = run([tool("systemd-analyze"), "security", "--offline=true", "--threshold=20", copy])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    score = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", output).group(1))
    assert score <= 2.0, output


def test_hardening_keeps_gpu_access():
    settings = service()

    def value(key, default=None):
        return settings.get(key, [default])[-1]

    assert value("PrivateDevices", "no") == "no"
    assert value("DevicePolicy") == "closed"
    assert "char-nvidia* rw" in settings["DeviceAllow"]
    assert "video" in value("SupplementaryGroups").split()
    assert value("PrivateUsers", "no") == "no"  # groups such as video would be unmapped
    assert value("ProcSubset", "all") != "pid"  # NVML reads /proc/driver/nvidia
    assert value("MemoryDenyWriteExecute", "no") == "no"
    families = value("RestrictAddressFamilies").split()
    assert {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"} <= set(families)
    assert value("NoNewPrivileges") == "yes"
    assert value("ProtectSystem") == "strict"
    assert value("ProtectHome") == "yes"
    assert value("PrivateTmp") == "yes"
    assert value("CapabilityBoundingSet") == ""
    assert "@system-service" in settings["SystemCallFilter"]
    unit = unit_settings(UNIT.read_text())["Unit"]
    assert "modprobe@nvidia_uvm.service" in " ".join(unit["Wants"])


def test_runs_as_its_own_user_with_restart_and_state():
    settings = service()
    assert settings["User"] == ["einsummable"] and settings["Group"] == ["einsummable"]
    assert "DynamicUser" not in settings
    assert settings["Restart"] == ["on-failure"]
    assert re.fullmatch(r"\d+s", settings["RestartSec"][0])
    assert settings["StateDirectory"] == ["einsummable"]
    assert settings["EnvironmentFile"] == ["/etc/einsummable/einsummabled.env"]
    unit = unit_settings(UNIT.read_text())["Unit"]
    assert int(unit["StartLimitBurst"][0]) >= 3


def test_stop_timeout_covers_the_drain():
    """SIGKILL must not come before the daemon's drain (--shutdown_grace_seconds) and its
    metrics endpoint's stop (about 2 s) are over."""
    timeout = re.fullmatch(r"(\d+)s", service()["TimeoutStopSec"][0])
    grace = int(read_env_file(ENV_EXAMPLE).get("FLAGS_shutdown_grace_seconds", 30))
    assert timeout and int(timeout.group(1)) >= grace + 10


def test_tryfromenv_names_every_flag():
    """The unit's --tryfromenv lists name every flag but those it sets itself, once each: a flag
    added to the daemon fails this until the unit (and the Dockerfile) take it too."""
    listed = tryfromenv_flags(unit_exec_start(UNIT.read_text()))
    assert len(listed) == len(set(listed)), sorted(listed)
    assert set(listed) == daemon_flags() - NOT_CONFIGURABLE


def example_lines() -> list[tuple[bool, str, str]]:
    """The example's FLAGS_ and other variables, active or commented out: (active, key, value)."""
    found = []
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.fullmatch(r"(#?)([A-Z][A-Za-z0-9_]*)=(.*)", line.strip())
        if match:
            found.append((match.group(1) == "", match.group(2), match.group(3)))
    return found


def test_example_names_only_listed_flags():
    """A variable --tryfromenv does not list is silently ignored, so a misspelt name in the
    example would be too: every FLAGS_ name in it, commented out or not, is in the list."""
    listed = set(tryfromenv_flags(unit_exec_start(UNIT.read_text())))
    lines = example_lines()
    assert len(lines) > 20
    for _, key, _ in lines:
        if key.startswith("FLAGS_"):
            assert key[len("FLAGS_") :] in listed, key
        else:
            assert key.startswith("MALLOC_"), key
    assert set(read_env_file(ENV_EXAMPLE)) >= {"FLAGS_listen", "FLAGS_metrics_port"}


def test_example_commented_values_are_the_defaults(daemon_binary):
    """A commented-out line shows the flag's default, or an example for a flag whose default is
    empty (devices, topology, TLS files): checked against `einsummabled --helpfull`."""
    helpfull = run([daemon_binary, "--helpfull"]).stdout
    # Entries "    --name (help, over lines); default: value;", one per flag.
    defaults = {}
    for entry in re.split(r"\n(?=    --)", helpfull):
        entry = entry.split("\n\n")[0]
        match = re.match(r"\s*--(\w+) \(.*; default: (.*);\s*$", " ".join(entry.split()), re.S)
        if match:
            defaults[match.group(1)] = match.group(2).strip('"')
    assert "max_tensor_bytes" in defaults, helpfull[:2000]
    for active, key, value in example_lines():
        if active or not key.startswith("FLAGS_"):
            continue
        flag = key[len("FLAGS_") :]
        assert value == defaults[flag] or defaults[flag] == "", (key, value, defaults[flag])


def test_sysusers_creates_the_user(tmp_path):
    (tmp_path / "etc").mkdir()
    result = run([tool("systemd-sysusers"), f"--root={tmp_path}", SYSUSERS], env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text()
    (user,) = [line for line in passwd.splitlines() if line.startswith("einsummable:")]
    fields = user.split(":")
    assert fields[5] == "/var/lib/einsummable" and fields[6] == "/usr/sbin/nologin", user
    assert int(fields[2]) < 1000  # a system user
    group = (tmp_path / "etc" / "group").read_text()
    assert any(line.startswith("einsummable:") for line in group.splitlines())


def test_daemon_runs_from_the_unit_and_example(daemon_binary, tmp_path):
    """What systemd would start: ExecStart's arguments with ${STATE_DIRECTORY} expanded, and the
    environment from the example file, with two changes so the test owns its ports
    (FLAGS_listen=127.0.0.1:0, FLAGS_metrics_port=<free>) and the CPU backend. The daemon takes
    them from the environment alone (nothing on its command line names a port), serves
    /metrics on that port, keeps its plans under the state directory, and stops with status 0
    on SIGTERM within TimeoutStopSec. Every FLAGS_ variable is read: the daemon warns about
    any it is not (server/config.h unread_flag_variables), and says nothing of the kind here."""
    import einsummable as es

    state = tmp_path / "state"
    state.mkdir()
    metrics_port = free_port()
    env = read_env_file(ENV_EXAMPLE)
    env.update(
        FLAGS_listen="127.0.0.1:0",
        FLAGS_metrics_port=str(metrics_port),
        FLAGS_backend="cpu",
        FLAGS_devices="2",
    )
    env.update(STATE_DIRECTORY=str(state), PATH=os.environ.get("PATH", "/usr/bin:/bin"))
    args = [
        arg.replace("${STATE_DIRECTORY}", str(state)) for arg in unit_exec_start(UNIT.read_text())
    ]
    args[0] = str(daemon_binary)
    assert not any(str(metrics_port) in arg for arg in args)

    daemon = DaemonProcess(args, env=env, workdir=tmp_path)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            assert "einsummable_inflight_requests" in r.read().decode()
        g = es.createGraph()
        x = g.insertTensor(es.tensorDesc(["tokens", ("d", 8)]), name="x")
        w = g.insertTensor(es.tensorDesc([("d", 8), ("e", 8)]), name="w")
        g.save(g.matmul(x, w, name="y"))
        with es.Client(daemon.address, timeout=60) as client:
            assert client.server_info().devices == 2
            client.register_model("m", g, weights=["w"])
            client.upload_tensor("m", "w", np.ones((8, 8), dtype=np.float32))
            result = client.execute("m", {"x": np.ones((4, 8), dtype=np.float32)}, {"tokens": 4})
            np.testing.assert_allclose(result.outputs["y"], np.full((4, 8), 8.0))
        wait_for(lambda: list((state / "plans").glob("*.plan")), 10, "a plan file in the state dir")
    finally:
        timeout = int(service()["TimeoutStopSec"][0].rstrip("s"))
        status = daemon.stop(timeout=timeout)
    assert status == 0, daemon.log_tail()
    assert "is set but not read" not in daemon.log_path.read_text(), daemon.log_tail()


def test_daemon_names_a_flags_variable_it_does_not_read(daemon_binary, tmp_path):
    """A misspelt variable in the environment file is not silently ignored."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "FLAGS_instance_per_plan": "2"}
    args = [str(daemon_binary), "--listen=127.0.0.1:0", "--backend=cpu", "--devices=1"]
    daemon = DaemonProcess([*args, "--metrics_port=0"], env=env, workdir=tmp_path)
    assert daemon.stop() == 0, daemon.log_tail()
    assert (
        "FLAGS_instance_per_plan is set but not read: einsummabled has no flag "
        "--instance_per_plan" in daemon.log_path.read_text()
    ), daemon.log_tail()
