"""The Docker image's health check, einsummable-health-probe (tools/health_probe_main.cc), against
the real daemon: exit 0 and SERVING while the daemon can take work, 1 with NOT_SERVING while
every work slot is taken, 1 when nothing answers or an argument is bad, the address taken from
$FLAGS_listen as the image sets it, and TLS with the CA given.

The probe is the one built beside the daemon ($EINSUMMABLE_DAEMON's directory); without it the
tests skip like the daemon's. openssl comes from scripts/setup (missing: the tests fail).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import DaemonProcess, free_port, run, tool, wait_for


@pytest.fixture(scope="session")
def probe(daemon_binary) -> Path:
    path = Path(daemon_binary).parent / "einsummable-health-probe"
    if not path.is_file():
        pytest.skip(f"{path} is not built (the build's einsummable-health-probe target)")
    return path


def start_daemon(binary, workdir: Path, *flags, env=None) -> DaemonProcess:
    return DaemonProcess(
        [
            binary,
            "--listen=127.0.0.1:0",
            "--backend=cpu",
            "--devices=2",
            "--metrics_port=0",
            *flags,
        ],
        env=env,
        workdir=workdir,
    )


def probe_env(**variables) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FLAGS_")}
    env.update(variables)
    return env


def test_serving_daemon_is_healthy(probe, daemon_binary, tmp_path):
    daemon = start_daemon(daemon_binary, tmp_path)
    try:
        result = run([probe, f"--address={daemon.address}"], env=probe_env())
        assert result.returncode == 0, result.stdout
        assert result.stdout.strip() == f"SERVING ({daemon.address})"
        # The image's health check passes no address: the probe dials $FLAGS_listen, the
        # daemon's own setting, with the wildcard host turned into loopback.
        port = daemon.address.rsplit(":", 1)[1]
        result = run([probe], env=probe_env(FLAGS_listen=f"0.0.0.0:{port}"))
        assert result.returncode == 0 and result.stdout.startswith("SERVING (127.0.0.1:"), (
            result.stdout
        )
    finally:
        assert daemon.stop() == 0, daemon.log_tail()


def test_daemon_loading_its_repository_is_unhealthy_until_loaded(probe, daemon_binary, tmp_path):
    """The port answers while the model repository loads, but health is NOT_SERVING (the
    image's check fails, so a start-up allowance is needed: docs/operations.md "Model
    repository") until every model has loaded or failed; held here by the testing gate."""
    model = tmp_path / "repo" / "mm" / "1"
    model.mkdir(parents=True)
    (model / "graph.pbtxt").write_text(
        'inputs { name: "x" dtype: F32 dims { name: "t" fixed: 2 } }\n'
        'operators { name: "y" kind: "einsum" inputs: "x"\n'
        '  attributes { key: "equation" value { string_value: "i->i" } }\n'
        '  attributes { key: "join" value { string_value: "relu" } } }\n'
        'saved: "y"\n'
    )
    gate = tmp_path / "gate"
    daemon = start_daemon(
        daemon_binary,
        tmp_path,
        f"--model_repository={tmp_path / 'repo'}",
        f"--repository_load_gate_for_testing={gate}",
    )
    try:
        result = run([probe, f"--address={daemon.address}"], env=probe_env())
        assert result.returncode == 1, result.stdout
        assert result.stdout.startswith("NOT_SERVING"), result.stdout
        gate.touch()

        def serving():
            result = run([probe, f"--address={daemon.address}"], env=probe_env())
            return result.returncode == 0

        wait_for(serving, 30, "the probe to see SERVING once the repository loaded")
    finally:
        assert daemon.stop() == 0, daemon.log_tail()


def test_nothing_listening_is_unhealthy(probe):
    result = run(
        [probe, f"--address=127.0.0.1:{free_port()}", "--timeout_ms=2000"], env=probe_env()
    )
    assert result.returncode == 1
    assert result.stdout.startswith("no answer from 127.0.0.1:") and "UNAVAILABLE" in result.stdout


def test_bad_arguments_are_unhealthy_not_reserved_codes(probe):
    """Docker reserves exit status 2, so a misconfigured health check exits 1 saying why."""
    for args in (["--bogus=1"], ["--timeout_ms=0"], ["--tls_server_name=x"], ["--address"]):
        result = run([probe, *args], env=probe_env())
        assert result.returncode == 1, (args, result.stdout)
        assert result.stdout.startswith("einsummable-health-probe: "), result.stdout


def test_saturated_daemon_is_not_serving(probe, daemon_binary, tmp_path):
    """With its one work slot held by an Execute (slowed by the testing flag), the daemon's
    health is NOT_SERVING and the probe fails; once the call ends it passes again."""
    import einsummable as es

    daemon = start_daemon(
        daemon_binary,
        tmp_path,
        "--max_concurrent_requests=1",
        "--execute_delay_ms_for_testing=3000",
    )
    try:
        g = es.createGraph()
        x = g.insertTensor(es.tensorDesc(["tokens", ("d", 8)]), name="x")
        w = g.insertTensor(es.tensorDesc([("d", 8), ("e", 8)]), name="w")
        g.save(g.matmul(x, w, name="y"))
        with es.Client(daemon.address, timeout=60) as client:
            client.register_model("m", g, weights=["w"])
            client.upload_tensor("m", "w", np.ones((8, 8), dtype=np.float32))
        errors = []

        def execute():
            try:
                with es.Client(daemon.address, timeout=60) as client:
                    client.execute("m", {"x": np.ones((4, 8), dtype=np.float32)}, {"tokens": 4})
            except Exception as error:  # reported below
                errors.append(error)

        caller = threading.Thread(target=execute)
        caller.start()

        def not_serving():
            result = run([probe, f"--address={daemon.address}"], env=probe_env())
            return result if result.stdout.startswith("NOT_SERVING") else None

        result = wait_for(not_serving, 10, "the probe to see NOT_SERVING")
        assert result.returncode == 1
        caller.join(timeout=30)
        assert not errors, errors
        result = run([probe, f"--address={daemon.address}"], env=probe_env())
        assert result.returncode == 0, result.stdout
    finally:
        assert daemon.stop() == 0, daemon.log_tail()


def test_tls_needs_the_ca(probe, daemon_binary, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = run(
        [
            tool("openssl"),
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "1",
            "-subj",
            "/CN=einsummable.test",
            "-addext",
            "subjectAltName=DNS:einsummable.test,IP:127.0.0.1",
        ]
    )
    assert made.returncode == 0, made.stderr
    daemon = start_daemon(daemon_binary, tmp_path, f"--tls_cert={cert}", f"--tls_key={key}")
    try:
        address = f"--address={daemon.address}"
        result = run([probe, address, f"--tls_ca={cert}"], env=probe_env())
        assert result.returncode == 0 and result.stdout.startswith("SERVING"), result.stdout
        result = run(
            [probe, address, f"--tls_ca={cert}", "--tls_server_name=einsummable.test"],
            env=probe_env(),
        )
        assert result.returncode == 0 and result.stdout.startswith("SERVING"), result.stdout
        # Plaintext against TLS, and a name the certificate does not carry: no answer.
        for args in (
            [address, "--timeout_ms=2000"],
            [address, f"--tls_ca={cert}", "--tls_server_name=other.test", "--timeout_ms=2000"],
        ):
            result = run([probe, *args], env=probe_env())
            assert result.returncode == 1 and result.stdout.startswith("no answer"), (
                args,
                result.stdout,
            )
    finally:
        assert daemon.stop() == 0, daemon.log_tail()
