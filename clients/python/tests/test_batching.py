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
from serving_block import BlockSizes, block, random_weights, reference
from test_serving import metric

import einsummable as es

SIZES = BlockSizes(d_model=64, heads_q=4, heads_kv=2, d_ff=128)
D_MODEL = SIZES.d_model
WEIGHT_SHAPES = SIZES.weight_shapes()
TOKENS = 8
SEED = 20261203


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
    weights = random_weights(SIZES, rng)
    with es.Client(batching_daemon.address) as client:
        # "batched" waits up to 2 s for a batch of 3 and completes it to 4; "alone" runs each
        # request as soon as it comes (one at a time here).
        for model, batching in [
            (f"batched-{dtype}", es.Batching("tokens", (4,), max_queue_delay_us=2_000_000)),
            (f"alone-{dtype}", es.Batching("tokens", max_queue_delay_us=0)),
        ]:
            client.register_model(
                model, block(SIZES, dtype), weights=WEIGHT_SHAPES, batching=batching
            )
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
            want = reference(SIZES, x, weights, ends)
            np.testing.assert_allclose(
                y.astype(np.float64), want, atol=tolerance, rtol=tolerance, err_msg=f"request {i}"
            )
        # The two-sequence requests differ from the same tokens as one sequence: attention
        # restarted at 3.
        assert (
            batched[3].outputs["y"].tobytes()
            != call(f"alone-{dtype}", requests[3][0], [TOKENS])().outputs["y"].tobytes()
        )

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
