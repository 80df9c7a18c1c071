"""Plans that fit in device memory on a real daemon (docs/server.md, "Memory"): with
--device_memory small, a model whose first plan would replicate its weights has them sharded and
still answers like NumPy; a request that cannot fit gets RESOURCE_EXHAUSTED naming the device,
the bytes it needs (weights and activations) and the bytes it has; the daemon keeps serving."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import Daemon
from test_serving import explained_bytes, reference

import einsummable as es

SEED = 20261203
# Per device on 2 CPU devices, the FFN with d_model 128 and d_ff 32 at 64 tokens runs data
# parallel in 72 KiB (32 KiB of it its replicated weights); the plan that shards them needs
# 64 KiB (tests/unit/runtime/memory_fit_test.cc). (On 4 devices the data-parallel plan needs no
# more than a sharded one: the saved output stays where it was computed.)
CAPACITY = 69632


def ffn(d_model: int, d_ff: int):
    """y = relu(x·w1)·w2, x [tokens, d_model] with tokens symbolic; w1, w2 weights."""
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", d_model)]), name="x")
    w1 = g.insertTensor(es.tensorDesc([("d_model", d_model), ("d_ff", d_ff)]), name="w1")
    w2 = g.insertTensor(es.tensorDesc([("d_ff", d_ff), ("d_model", d_model)]), name="w2")
    h = g.unary(g.matmul(x, w1, name="h"), "relu", 0.0, name="a")
    g.save(g.matmul(h, w2, name="y"))
    return g


@pytest.fixture()
def small_memory_daemon(daemon_binary):
    with tempfile.TemporaryDirectory(prefix="einsummable-memory-") as workdir:
        d = Daemon(
            daemon_binary,
            Path(workdir),
            ["--devices=2", f"--device_memory={CAPACITY}", "--synthesis_iterations=20"],
        )
        d.start()
        try:
            yield d
        finally:
            d.stop()


def upload_weights(client, model: str, d_model: int, d_ff: int, rng):
    w1 = rng.standard_normal((d_model, d_ff), dtype=np.float32) / 8
    w2 = rng.standard_normal((d_ff, d_model), dtype=np.float32) / 8
    client.register_model(model, ffn(d_model, d_ff), weights=["w1", "w2"])
    client.upload_tensor(model, "w1", w1)
    client.upload_tensor(model, "w2", w2)
    return w1, w2


def test_weights_are_sharded_to_fit_and_a_plan_that_cannot_fit_is_refused(small_memory_daemon):
    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED)
    with es.Client(small_memory_daemon.address, timeout=120) as client:
        # Data parallel would hold all 32 KiB of weights on both devices: sharded instead, each
        # weight once over the two, and the answer is still right.
        w1, w2 = upload_weights(client, "small", 128, 32, rng)
        x = rng.standard_normal((64, 128), dtype=np.float32)
        y = client.execute("small", {"x": x}, dims={"tokens": 64}).outputs["y"]
        np.testing.assert_allclose(y, reference(x, w1, w2), rtol=1e-4, atol=1e-4)
        explained = client.explain("small", dims={"tokens": 64}).text
        assert "planned again with its weights unreplicated" in explained, explained
        assert explained_bytes(explained, "resident memory per device") == w1.nbytes + w2.nbytes
        assert f"device_memory={CAPACITY}" in client.compile("small", dims={"tokens": 64}).plan_key
        assert f"device memory: {CAPACITY} B per device (--device_memory)" in explained
        assert client.server_info().device_memory_capacity_bytes == (CAPACITY,) * 2

        # 2 MiB of weights cannot fit in 68 KiB however they are split.
        upload_weights(client, "big", 512, 512, rng)
        with pytest.raises(es.ResourceExhaustedError) as refused:
            client.execute(
                "big",
                {"x": np.zeros((256, 512), dtype=np.float32)},
                dims={"tokens": 256},
            )
        details = refused.value.details
        print(details)
        match = re.search(
            r"device (\d) needs (\d+) B \(weights (\d+) B \+ activations (\d+) B\) and has (\d+) B",
            details,
        )
        assert match, details
        needed, weights, activations, has = (int(g) for g in match.groups()[1:])
        assert has == CAPACITY
        assert needed == weights + activations > CAPACITY
        assert weights > 0 and activations > 0
        assert "model 'big'" in details and "w1, w2 unreplicated" in details

        # The daemon keeps serving: the small model answers again, at another shape too.
        for tokens in (64, 16):
            x = rng.standard_normal((tokens, 128), dtype=np.float32)
            y = client.execute("small", {"x": x}, dims={"tokens": tokens}).outputs["y"]
            np.testing.assert_allclose(y, reference(x, w1, w2), rtol=1e-4, atol=1e-4)
