"""Integration: einsummabled with TLS (``--tls_cert``, ``--tls_key``) and a bearer token
(``--token_file``), docs/server.md "Security", through real TLS handshakes.

The certificates are self-signed for localhost and 127.0.0.1 and made by the ``openssl`` CLI in
a temporary directory (skipped, saying so, without it). The client trusts them through
``es.Client(root_certificates=...)``, which uses ``grpc.ssl_channel_credentials``; one check
goes through the raw generated stub too. About 2 s.
"""

import shutil
import subprocess
import tempfile
from pathlib import Path

import grpc
import numpy as np
import pytest
from conftest import DAEMON_DEVICES, Daemon, matmul_graph

import einsummable as es
from einsummable import _stubs

pytestmark = pytest.mark.integration

# Calls expected to fail do so at once (the handshake fails); the deadline only bounds a hang.
FAIL_TIMEOUT_S = 10


def _self_signed(directory: Path, name: str) -> tuple:
    """A self-signed certificate and key for localhost / 127.0.0.1: (cert.pem, key.pem)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not found on PATH: install Debian's openssl package")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture(scope="module")
def certs():
    """The daemon's certificate and key, and an unrelated self-signed certificate."""
    with tempfile.TemporaryDirectory(prefix="einsummable-tls-certs-") as directory:
        directory = Path(directory)
        cert, key = _self_signed(directory, "server")
        other, _ = _self_signed(directory, "other")
        yield {"cert": cert, "key": key, "other": other}


def _tiny_model(client: es.Client, name: str = "tiny") -> None:
    """Registers y = x·w (tokens symbolic), uploads w, executes at 2 token counts on 2 devices
    and checks the results against NumPy."""
    g = matmul_graph(d=8, e=4)
    rng = np.random.default_rng(7)
    w_value = rng.standard_normal((8, 4), dtype=np.float32)
    client.register_model(name, g, weights=["w"])
    assert client.upload_tensor(name, "w", w_value) == w_value.nbytes
    for tokens in (3, 6):
        x_value = rng.standard_normal((tokens, 8), dtype=np.float32)
        result = client.execute(name, {"x": x_value}, {"tokens": tokens}, {"devices": 2})
        np.testing.assert_allclose(result.outputs["y"], x_value @ w_value, rtol=1e-5, atol=1e-5)


def _start(daemon_binary, workdir: Path, certs, extra=(), token=None) -> Daemon:
    d = Daemon(
        daemon_binary,
        workdir,
        [f"--tls_cert={certs['cert']}", f"--tls_key={certs['key']}", *extra],
        token=token,
        root_certificates=certs["cert"],
    )
    try:
        d.start(timeout=30)
    except BaseException:
        d.stop()
        raise
    return d


def test_tls_handshake(daemon_binary, certs):
    with tempfile.TemporaryDirectory(prefix="einsummable-tls-") as workdir:
        d = _start(daemon_binary, Path(workdir), certs)
        try:
            # The client trusting the daemon's certificate: info and a model run.
            with es.Client(d.address, root_certificates=certs["cert"], timeout=60) as client:
                assert client.server_info().devices == DAEMON_DEVICES
                _tiny_model(client)

            # The raw stub over grpc.ssl_channel_credentials, the certificate given as bytes.
            pb = _stubs.modules()  # the generated einsummable.v1 modules
            credentials = grpc.ssl_channel_credentials(root_certificates=certs["cert"].read_bytes())
            with grpc.secure_channel(d.address, credentials) as channel:
                stub = pb.service_pb2_grpc.EinsummableStub(channel)
                info = stub.GetServerInfo(pb.service_pb2.GetServerInfoRequest(), timeout=30)
                assert info.devices == DAEMON_DEVICES

            # Plaintext to a TLS port: no HTTP/2 connection comes up.
            with (
                es.Client(d.address, timeout=FAIL_TIMEOUT_S) as client,
                pytest.raises(es.UnavailableError),
            ):
                client.server_info()

            # Trusting another self-signed certificate: the handshake fails verification
            # (gRPC: "Tls handshake failed ... CERTIFICATE_VERIFY_FAILED").
            with (
                es.Client(
                    d.address, root_certificates=certs["other"], timeout=FAIL_TIMEOUT_S
                ) as client,
                pytest.raises(es.UnavailableError, match=r"(?i)handshake|certificate"),
            ):
                client.server_info()

            # Nothing the refused connections did took the daemon down.
            with es.Client(d.address, root_certificates=certs["cert"], timeout=30) as client:
                assert [m.model for m in client.list_models()] == ["tiny"]
        finally:
            d.stop()
        assert d.process.returncode == 0, d.log_tail()


def test_tls_with_bearer_token(daemon_binary, certs):
    with tempfile.TemporaryDirectory(prefix="einsummable-tls-token-") as workdir:
        workdir = Path(workdir)
        token_file = workdir / "token"
        token_file.write_text("  tls-s3cret\n")  # surrounding white space is ignored
        d = _start(daemon_binary, workdir, certs, [f"--token_file={token_file}"], "tls-s3cret")
        try:
            for token in ("", "wrong", "tls-s3cre", "tls-s3cret2"):
                with (
                    es.Client(
                        d.address,
                        token=token,
                        root_certificates=certs["cert"],
                        timeout=FAIL_TIMEOUT_S,
                    ) as client,
                    pytest.raises(es.UnauthenticatedError),
                ):
                    client.list_models()

            with es.Client(
                d.address, token="tls-s3cret", root_certificates=certs["cert"], timeout=60
            ) as client:
                assert client.server_info().devices == DAEMON_DEVICES
                _tiny_model(client)

            # The right token over plaintext is no way around TLS.
            with (
                es.Client(d.address, token="tls-s3cret", timeout=FAIL_TIMEOUT_S) as client,
                pytest.raises(es.UnavailableError),
            ):
                client.server_info()
        finally:
            d.stop()
        assert d.process.returncode == 0, d.log_tail()
