"""Dynamic batching on a real daemon (docs/server.md, "Dynamic batching"): concurrent requests to
a LLaMA-style block (rmsnorm, grouped-query attention with rope, ffn) run as one execution,
completed to a preferred size, and every answer equals, bit for bit, the one the request gets
alone, in f32, bf16 and f16; requests of several sequences each batch too, and the batch
metrics are exported."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import Daemon, free_port
from test_serving import metric

import einsummable as es

D_MODEL = 64
HEADS_Q = 4
HEADS_KV = 2
D_HEAD = D_MODEL // HEADS_Q
D_FF = 128
TOKENS = 8
SEED = 20261203
WEIGHT_SHAPES = {
    "wn": (D_MODEL,),
    "wq": (D_MODEL, D_MODEL),
    "wk": (D_MODEL, HEADS_KV * D_HEAD),
    "wv": (D_MODEL, HEADS_KV * D_HEAD),
    "wo": (D_MODEL, D_MODEL),
    "w1": (D_MODEL, D_FF),
    "w2": (D_FF, D_MODEL),
}


def block(dtype: str):
    """y = r + relu(r·w1)·w2 with r = x + attention(rope(q), rope(k), v)·wo over rmsnorm(x);
    tokens symbolic, no sequence ends of its own (the batcher gives them)."""
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", D_MODEL)], dtype), name="x")
    w = {
        name: g.insertTensor(
            es.tensorDesc([(f"{name}{i}", size) for i, size in enumerate(shape)], dtype),
            name=name,
        )
        for name, shape in WEIGHT_SHAPES.items()
    }
    h = g.rmsnorm(x, w["wn"], name="h")
    q = g.split_heads(g.matmul(h, w["wq"], name="q"), HEADS_Q, heads_name="heads_q", name="qh")
    k = g.split_heads(g.matmul(h, w["wk"], name="k"), HEADS_KV, heads_name="heads_kv", name="kh")
    v = g.split_heads(g.matmul(h, w["wv"], name="v"), HEADS_KV, heads_name="heads_kv", name="vh")
    a = g.attention(g.rope(q, name="qr"), g.rope(k, name="kr"), v, causal=True, name="a")
    o = g.matmul(g.merge_heads(a, name="m"), w["wo"], name="o")
    r = g.binary(x, o, "add", name="r")
    f = g.matmul(g.unary(g.matmul(r, w["w1"], name="f1"), "relu", 0.0, name="f"), w["w2"])
    g.save(g.binary(r, f, "add", name="y"))
    return g


def reference(x, weights, ends):
    """The block in float64, sequence by sequence."""
    x = x.astype(np.float64)
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    h = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w["wn"]
    q = (h @ w["wq"]).reshape(len(x), HEADS_Q, D_HEAD)
    k = (h @ w["wk"]).reshape(len(x), HEADS_KV, D_HEAD)
    v = (h @ w["wv"]).reshape(len(x), HEADS_KV, D_HEAD)
    out = np.zeros_like(q)
    start = 0
    for end in ends:
        positions = np.arange(end - start, dtype=np.float64)[:, None, None]
        half = D_HEAD // 2
        freq = 10000.0 ** (-2.0 * np.arange(half) / D_HEAD)

        def rope(t):
            lo, hi = t[..., :half], t[..., half:]
            c, s = np.cos(positions * freq), np.sin(positions * freq)
            return np.concatenate([lo * c - hi * s, lo * s + hi * c], axis=-1)

        qs, ks, vs = rope(q[start:end]), rope(k[start:end]), v[start:end]
        n = end - start
        mask = np.tril(np.ones((n, n), dtype=bool))
        for head in range(HEADS_Q):
            kv = head // (HEADS_Q // HEADS_KV)
            scores = qs[:, head] @ ks[:, kv].T / np.sqrt(D_HEAD)
            scores = np.where(mask, scores, -np.inf)
            p = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[start:end, head] = (p / p.sum(axis=-1, keepdims=True)) @ vs[:, kv]
        start = end
    r = x + out.reshape(len(x), D_MODEL) @ w["wo"]
    return r + np.maximum(r @ w["w1"], 0.0) @ w["w2"]


@pytest.fixture(scope="module")
def batching_daemon(daemon_binary):
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="einsummable-batching-") as workdir:
        d = Daemon(
            daemon_binary,
            Path(workdir),
            ["--devices=4", f"--metrics_port={port}", "--synthesis_iterations=50"],
        )
        d.start()
        d.metrics_port = port
        try:
            yield d
        finally:
            d.stop()


def concurrently(calls):
    """Runs every call on its own thread, started together; their results in order."""
    results = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(i):
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as error:  # surfaced by the test below
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_a_batch_answers_each_request_as_it_is_answered_alone(batching_daemon, dtype):
    print(f"seed {SEED}")
    rng = np.random.default_rng(SEED)
    weights = {
        name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        for name, shape in WEIGHT_SHAPES.items()
    }
    weights["wn"] = (1.0 + 0.1 * rng.standard_normal(D_MODEL)).astype(np.float32)
    with es.Client(batching_daemon.address) as client:
        # "batched" waits up to 2 s for a batch of 3 and completes it to 4; "alone" runs each
        # request as soon as it comes (one at a time here).
        for model, batching in [
            (f"batched-{dtype}", es.Batching("tokens", (4,), max_queue_delay_us=2_000_000)),
            (f"alone-{dtype}", es.Batching("tokens", max_queue_delay_us=0)),
        ]:
            client.register_model(model, block(dtype), weights=WEIGHT_SHAPES, batching=batching)
            for name, value in weights.items():
                client.upload_tensor(model, name, value, dtype=dtype)

        requests = [
            (rng.standard_normal((TOKENS, D_MODEL)).astype(np.float32), ends)
            for ends in ([TOKENS], [TOKENS], [TOKENS], [3, TOKENS], [3, TOKENS])
        ]

        def call(model, x, ends):
            return lambda: client.execute(
                model,
                {"x": x},
                dims={"tokens": TOKENS},
                dtypes={"x": dtype},
                sequence_ends=ends if ends != [TOKENS] else (),
            )

        # Three one-sequence requests (a batch of 3, completed to 4) and two of two sequences
        # each (their own batch: other ends, other plan).
        batched = concurrently([call(f"batched-{dtype}", x, ends) for x, ends in requests])
        assert [r.batch_size for r in batched] == [3, 3, 3, 2, 2]
        assert [r.batch_padding for r in batched] == [1, 1, 1, 2, 2]
        tolerance = {"f32": 2e-3, "bf16": 0.25, "f16": 0.05}[dtype]
        for i, ((x, ends), got) in enumerate(zip(requests, batched)):
            alone = call(f"alone-{dtype}", x, ends)()
            assert alone.batch_size == 1 and alone.batch_padding == 0
            y, y_alone = got.outputs["y"], alone.outputs["y"]
            assert y.shape == (TOKENS, D_MODEL)
            assert y.tobytes() == y_alone.tobytes(), (
                f"request {i} ({dtype}, ends {ends}): the batch's answer differs from its own "
                f"by up to {np.max(np.abs(y.astype(np.float64) - y_alone)):.3g}"
            )
            want = reference(x, weights, ends)
            np.testing.assert_allclose(
                y.astype(np.float64), want, atol=tolerance, rtol=tolerance, err_msg=f"request {i}"
            )
        # The two-sequence requests differ from the same tokens as one sequence: attention
        # restarted at 3.
        assert batched[3].outputs["y"].tobytes() != call(
            f"alone-{dtype}", requests[3][0], [TOKENS]
        )().outputs["y"].tobytes()

        info = {m.model: m for m in client.list_models()}[f"batched-{dtype}"]
        assert info.batching == es.Batching("tokens", (4,), 4, 2_000_000)

    assert metric(batching_daemon.metrics_port, "einsummable_batch_size_count") >= 2
    assert metric(batching_daemon.metrics_port, "einsummable_batch_queue_seconds_count") >= 5


def test_registration_refuses_a_graph_that_mixes_requests(batching_daemon):
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d", 8)]), name="x")
    # Softmax along tokens: every row depends on every other request's rows.
    g.save(g.softmax(x, axis=0, name="mix"))
    with es.Client(batching_daemon.address) as client:
        with pytest.raises(es.InvalidArgumentError, match="operator 'mix'"):
            client.register_model("mixer", g, batching=es.Batching("tokens"))
        assert "mixer" not in [m.model for m in client.list_models()]
