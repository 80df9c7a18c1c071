"""Serving behaviour of a real daemon (docs/server.md, "How weights are placed"): a model's
weights are resident once for all its plans, an upload reaches every plan, and one plan runs
several requests at once (--instances_per_plan)."""

from __future__ import annotations

import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import Daemon, free_port

import einsummable as es

D_MODEL = 512
D_FF = 512
SEED = 20261202


def ffn():
    """y = relu(x·w1)·w2, x [tokens, d_model] with tokens symbolic; w1, w2 weights."""
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", D_MODEL)]), name="x")
    w1 = g.insertTensor(es.tensorDesc([("d_model", D_MODEL), ("d_ff", D_FF)]), name="w1")
    w2 = g.insertTensor(es.tensorDesc([("d_ff", D_FF), ("d_model", D_MODEL)]), name="w2")
    h = g.unary(g.matmul(x, w1, name="h"), "relu", 0.0, name="a")
    g.save(g.matmul(h, w2, name="y"))
    return g


def reference(x, w1, w2):
    return np.maximum(x.astype(np.float64) @ w1, 0.0) @ w2


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    assert found, f"{name} is not exported"
    return total


def explained_bytes(text: str, label: str) -> int:
    """The sum of the per-device byte list on Explain's line containing ``label``
    ("peak memory per device (static plan): 1, 2 B", "...; resident memory per device: 3, 4 B")."""
    for line in text.splitlines():
        if label in line:
            numbers = line.split(label, 1)[1].split(":", 1)[1].strip().removesuffix("B")
            return sum(int(n) for n in numbers.replace(" ", "").split(","))
    raise AssertionError(f"explain has no line with {label!r}:\n{text}")


@pytest.fixture()
def serving_daemon(daemon_binary):
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="einsummable-serving-") as workdir:
        d = Daemon(
            daemon_binary,
            Path(workdir),
            [
                "--devices=4",
                f"--metrics_port={port}",
                "--instances_per_plan=2",
                "--synthesis_iterations=50",
            ],
        )
        d.start()
        d.metrics_port = port
        try:
            yield d
        finally:
            d.stop()


def test_two_shapes_share_one_copy_of_the_weights(serving_daemon):
    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED)
    w1 = rng.standard_normal((D_MODEL, D_FF), dtype=np.float32) / 8
    w2 = rng.standard_normal((D_FF, D_MODEL), dtype=np.float32) / 8
    weight_bytes = w1.nbytes + w2.nbytes
    with es.Client(serving_daemon.address, timeout=120) as client:
        client.register_model("shared", ffn(), weights=["w1", "w2"])
        client.upload_tensor("shared", "w1", w1)
        client.upload_tensor("shared", "w2", w2)
        assert sum(client.server_info().device_memory_bytes) == 0

        x8 = rng.standard_normal((8, D_MODEL), dtype=np.float32)
        y8 = client.execute("shared", {"x": x8}, dims={"tokens": 8}).outputs["y"]
        np.testing.assert_allclose(y8, reference(x8, w1, w2), rtol=1e-4, atol=1e-4)
        one_shape = sum(client.server_info().device_memory_bytes)

        x32 = rng.standard_normal((32, D_MODEL), dtype=np.float32)
        y32 = client.execute("shared", {"x": x32}, dims={"tokens": 32}).outputs["y"]
        np.testing.assert_allclose(y32, reference(x32, w1, w2), rtol=1e-4, atol=1e-4)
        info = client.server_info()
        two_shapes = sum(info.device_memory_bytes)

        # Device memory = each plan's arenas (times its 2 instances) + the weights once.
        explains = {t: client.explain("shared", dims={"tokens": t}).text for t in (8, 32)}
        arenas = {
            t: explained_bytes(text, "peak memory per device") for t, text in explains.items()
        }
        resident = {
            t: explained_bytes(text, "resident memory per device") for t, text in explains.items()
        }
        assert resident[8] == resident[32] >= weight_bytes, resident
        assert "weights=defines" in explains[8] and "weights=resident:" in explains[32]
        assert one_shape == resident[8] + 2 * arenas[8], (one_shape, resident, arenas)
        assert two_shapes == resident[8] + 2 * (arenas[8] + arenas[32]), (
            two_shapes,
            resident,
            arenas,
        )
        # The gauge says the same, device by device.
        for device, bytes_ in enumerate(info.device_memory_bytes):
            gauge = metric(
                serving_daemon.metrics_port,
                f'einsummable_device_memory_bytes{{device="{device}"}}',
            )
            assert gauge == bytes_, (device, gauge, bytes_)

        # A weight uploaded again is seen by both plans.
        w1_new = rng.standard_normal((D_MODEL, D_FF), dtype=np.float32) / 8
        client.upload_tensor("shared", "w1", w1_new)
        for x, tokens in ((x8, 8), (x32, 32)):
            y = client.execute("shared", {"x": x}, dims={"tokens": tokens}).outputs["y"]
            np.testing.assert_allclose(y, reference(x, w1_new, w2), rtol=1e-4, atol=1e-4)


def test_a_plan_runs_several_requests_at_once(daemon_binary):
    print(f"seed {SEED}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="einsummable-instances-") as workdir:
        d = Daemon(
            daemon_binary,
            Path(workdir),
            [
                "--devices=2",
                f"--metrics_port={port}",
                "--instances_per_plan=2",
                "--synthesis_iterations=50",
                "--execute_delay_ms_for_testing=1500",
            ],
        )
        d.start()
        try:
            rng = np.random.default_rng(SEED + 1)
            w1 = rng.standard_normal((D_MODEL, D_FF), dtype=np.float32) / 8
            w2 = rng.standard_normal((D_FF, D_MODEL), dtype=np.float32) / 8
            xs = [rng.standard_normal((16, D_MODEL), dtype=np.float32) for _ in range(4)]
            with es.Client(d.address, timeout=120) as client:
                client.register_model("busy", ffn(), weights=["w1", "w2"])
                client.upload_tensor("busy", "w1", w1)
                client.upload_tensor("busy", "w2", w2)
                client.compile("busy", dims={"tokens": 16})
            results = [None] * len(xs)

            def request(i):
                with es.Client(d.address, timeout=120) as c:
                    results[i] = c.execute("busy", {"x": xs[i]}, dims={"tokens": 16}).outputs["y"]

            threads = [threading.Thread(target=request, args=(i,)) for i in range(len(xs))]
            for thread in threads:
                thread.start()
            # Each execute holds its instance for 1.5 s: two run at once, never more.
            most = 0.0
            deadline = time.monotonic() + 10
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                running = metric(port, "einsummable_executions_running")
                assert running <= 2
                most = max(most, running)
                time.sleep(0.05)
            for thread in threads:
                thread.join()
            assert most == 2, most
            for x, y in zip(xs, results):
                np.testing.assert_allclose(y, reference(x, w1, w2), rtol=1e-4, atol=1e-4)
        finally:
            d.stop()


def test_a_restart_finds_the_layout_and_every_plan_again(daemon_binary):
    """The weights layout is kept beside the plan files: after a restart the shape compiled
    second, asked for first, is restored from the store against the same layout (not compiled,
    and not laying the weights out anew), and so is the shape that laid them out."""
    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED + 2)
    w1 = rng.standard_normal((D_MODEL, D_FF), dtype=np.float32) / 8
    w2 = rng.standard_normal((D_FF, D_MODEL), dtype=np.float32) / 8
    xs = {t: rng.standard_normal((t, D_MODEL), dtype=np.float32) for t in (8, 32)}
    flags = ["--devices=4", "--synthesis_iterations=50"]
    with tempfile.TemporaryDirectory(prefix="einsummable-restart-") as workdir:
        keys = {}
        for run in ("first", "restarted"):
            d = Daemon(daemon_binary, Path(workdir), flags).start()
            try:
                with es.Client(d.address, timeout=120) as client:
                    client.register_model("kept", ffn(), weights=["w1", "w2"])
                    client.upload_tensor("kept", "w1", w1)
                    client.upload_tensor("kept", "w2", w2)
                    order = (8, 32) if run == "first" else (32, 8)
                    for tokens in order:
                        result = client.execute("kept", {"x": xs[tokens]}, dims={"tokens": tokens})
                        np.testing.assert_allclose(
                            result.outputs["y"], reference(xs[tokens], w1, w2), rtol=1e-4, atol=1e-4
                        )
                        key = client.compile("kept", dims={"tokens": tokens}).plan_key
                        if run == "first":
                            assert result.cache_hit is False
                            keys[tokens] = key
                        else:
                            assert result.cache_hit is True, (tokens, d.log_tail())
                            assert key == keys[tokens]
                assert "weights=defines" in keys[8] and "weights=resident:" in keys[32]
            finally:
                d.stop()
