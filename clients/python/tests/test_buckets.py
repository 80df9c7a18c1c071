"""Token buckets on a real daemon (docs/server.md, "Token buckets"): a LLaMA-style block with
batching and buckets answers every request padded to its bucket — its padding a sequence of its
own, cut from the answer — as the same block without buckets answers it at its own length,
within f32 tolerance: one sequence or several, alone or batched with others; the padding and the
plans rebuilt from a bucket's plan are counted; ListModels shows the buckets resolved."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import Daemon, free_port
from serving_block import BlockSizes, block, random_weights, reference
from test_batching import concurrently
from test_serving import metric

import einsummable as es

pytestmark = pytest.mark.integration

SIZES = BlockSizes(d_model=16, heads_q=2, heads_kv=1, d_ff=32)
SEED = 20261206


@pytest.fixture(scope="module")
def buckets_daemon(daemon_binary):
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="einsummable-buckets-") as workdir:
        d = Daemon(
            daemon_binary,
            Path(workdir),
            ["--devices=2", f"--metrics_port={port}", "--synthesis_iterations=20"],
        )
        d.start()
        d.metrics_port = port
        try:
            yield d
        finally:
            d.stop()


def test_padded_answers_equal_the_unpadded_ones(buckets_daemon):
    rng = np.random.default_rng(SEED)
    weights = random_weights(SIZES, rng)
    with es.Client(buckets_daemon.address) as client:
        for model, buckets in [("bucketed", es.TokenBuckets(sizes=(8, 16))), ("exact", None)]:
            client.register_model(
                model,
                block(SIZES),
                weights=SIZES.weight_shapes(),
                batching=es.Batching("tokens", max_queue_delay_us=0, buckets=buckets),
            )
            for name, value in weights.items():
                client.upload_tensor(model, name, value, progress=False)
        info = {m.model: m for m in client.list_models()}
        assert info["bucketed"].batching.buckets == es.TokenBuckets(sizes=(8, 16))
        assert info["exact"].batching.buckets is None

        def run(model, x, ends=()):
            # No dims: the input's shape binds tokens.
            return client.execute(model, {"x": x}, sequence_ends=ends)

        # One sequence and several, in bucket 8 (three lengths: the plans after the first two
        # are rebuilt from the bucket's), at a bucket's size, in bucket 16, above the largest.
        cases = [(5, ()), (6, (2, 6)), (7, (3, 5, 7)), (8, ()), (11, (4, 11)), (20, ())]
        for tokens, ends in cases:
            x = rng.standard_normal((tokens, SIZES.d_model)).astype(np.float32)
            padded, exact = run("bucketed", x, ends), run("exact", x, ends)
            y = padded.outputs["y"]
            assert y.shape == (tokens, SIZES.d_model)
            np.testing.assert_allclose(
                y, exact.outputs["y"], rtol=1e-5, atol=1e-5, err_msg=f"{tokens} tokens {ends}"
            )
            want = reference(SIZES, x, weights, list(ends) or [tokens])
            np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=2e-3)

    port = buckets_daemon.metrics_port
    # 5 → 8, 6 → 8, 7 → 8, 8, 11 → 16, 20 (above the buckets: as it is).
    assert (
        metric(port, 'einsummable_bucket_padding_tokens_total{model="bucketed"}') == 3 + 2 + 1 + 5
    )
    assert (
        metric(port, 'einsummable_bucket_tokens_total{model="bucketed"}') == 5 + 6 + 7 + 8 + 11 + 20
    )
    assert metric(port, "einsummable_bucket_plan_rebuilds_total") >= 1


def test_batched_padded_requests_answer_as_alone(buckets_daemon):
    rng = np.random.default_rng(SEED + 1)
    weights = random_weights(SIZES, rng)
    with es.Client(buckets_daemon.address) as client:
        client.register_model(
            "bucketed-batch",
            block(SIZES),
            weights=SIZES.weight_shapes(),
            batching=es.Batching(
                "tokens", (4,), max_queue_delay_us=2_000_000, buckets=es.TokenBuckets(sizes=(8,))
            ),
        )
        for name, value in weights.items():
            client.upload_tensor("bucketed-batch", name, value, progress=False)
        xs = [rng.standard_normal((6, SIZES.d_model)).astype(np.float32) for _ in range(3)]
        results = concurrently([lambda x=x: client.execute("bucketed-batch", {"x": x}) for x in xs])
        assert [r.batch_size for r in results] == [3, 3, 3]
        for x, result in zip(xs, results):
            assert result.outputs["y"].shape == (6, SIZES.d_model)
            want = reference(SIZES, x, weights, [6])
            np.testing.assert_allclose(
                result.outputs["y"].astype(np.float64), want, rtol=2e-3, atol=2e-3
            )


def test_buckets_need_batching_and_valid_sizes(buckets_daemon):
    with es.Client(buckets_daemon.address) as client:
        with pytest.raises(es.InvalidArgumentError, match=r"batching\.buckets\.sizes: 4"):
            client.register_model(
                "bad-buckets",
                block(SIZES),
                weights=SIZES.weight_shapes(),
                batching=es.Batching("tokens", buckets=es.TokenBuckets(sizes=(8, 4))),
            )
        client.register_model(
            "default-buckets",
            block(SIZES),
            weights=SIZES.weight_shapes(),
            batching=es.Batching("tokens", buckets=es.TokenBuckets()),
        )
        info = {m.model: m for m in client.list_models()}["default-buckets"]
        sizes = info.batching.buckets.sizes
        assert (sizes[0], sizes[1], sizes[2], sizes[-1], len(sizes)) == (16, 20, 25, 4096, 26)
        client.unregister("default-buckets")


def test_warm_up_compiles_every_bucket_before_requests_need_them(buckets_daemon):
    rng = np.random.default_rng(SEED + 2)
    weights = random_weights(SIZES, rng)
    port = buckets_daemon.metrics_port
    with es.Client(buckets_daemon.address) as client:
        for model, warm_up in [("warm", True), ("cold", False)]:
            client.register_model(
                model,
                block(SIZES),
                weights=SIZES.weight_shapes(),
                batching=es.Batching(
                    "tokens",
                    max_queue_delay_us=0,
                    buckets=es.TokenBuckets(sizes=(8, 16, 32), warm_up=warm_up),
                ),
            )
            for name, value in weights.items():
                client.upload_tensor(model, name, value, progress=False)
        state = client.wait_for_warm_up("warm", timeout_s=600)
        assert state == es.WarmUp("done", ready=(8, 16, 32))
        assert client.wait_for_warm_up("cold") == es.WarmUp("none")
        assert client.server_info().warm_up_pending == 0
        assert metric(port, 'einsummable_warm_up_buckets{model="warm",state="ready"}') == 3
        compiled = metric(port, "einsummable_request_path_compiles_total")
        # Lengths in every bucket, one sequence and several: rebuilt from the bucket's plan.
        for tokens, ends in [(3, ()), (9, (4, 9)), (17, (5, 11, 17)), (32, ())]:
            x = rng.standard_normal((tokens, SIZES.d_model)).astype(np.float32)
            y = client.execute("warm", {"x": x}, sequence_ends=ends).outputs["y"]
            want = reference(SIZES, x, weights, list(ends) or [tokens])
            np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=2e-3)
        assert metric(port, "einsummable_request_path_compiles_total") == compiled
        client.unregister("warm")
        client.unregister("cold")
