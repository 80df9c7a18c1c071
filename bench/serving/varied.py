"""Serving benchmark with varied prompt lengths: token buckets and their warm-up against a plan
per length (bench/README.md, "serving: varied lengths").

    .venv/bin/python bench/serving/varied.py [--quick] [--daemon build/bin/einsummabled]

One daemon (CPU backend, --devices virtual devices) serves a LAYERS-layer LLaMA-shaped stack
(SIZES: causal grouped-query attention, rope, rmsnorm, a ReLU FFN; tokens symbolic) registered
twice with batching: "buckets", with the default token buckets (16, 32, ..., 4096) and their
warm-up, and "exact", without buckets (every length its own plan). Prompt lengths are drawn
uniformly from 1 to MAX_TOKENS with --seed. Each request runs alone (one client, one at a time),
so a latency is one request's own: its wait for a plan, padding included.

- cold: the first pass, sent right after registration and upload while the warm-up runs;
- warm: a fresh draw of lengths once the warm-up is done;
- replay: the warm pass's requests again, every plan in memory;
- exact cold / exact replay: the cold pass's lengths against "exact", then again.

For each pass: latency p50 / p90 / p99 / max, compiles on the request path
(einsummable_request_path_compiles_total) and bucket-plan rebuilds during it; for the buckets
the padded fraction of the tokens run (padding / (tokens + padding)) and the warm-up's time. One
request of each pass is checked against a float64 NumPy reference.

Writes the raw numbers to bench/results/serving-varied-<date>.json (--quick: bench/results/quick/,
which git ignores) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import ClassVar

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "clients" / "python" / "tests"))

import einsummable as es
from conftest import Daemon, free_port
from serving_block import BlockSizes, random_weights, reference
from test_serving import metric

SIZES = BlockSizes(d_model=128, heads_q=8, heads_kv=4, d_ff=256)
LAYERS = 4
MAX_TOKENS = 2048
DEFAULT_SEED = 20261206


def stack(sizes: BlockSizes, layers: int) -> es.Graph:
    """``layers`` blocks of serving_block.block, layer i's weights named ``l{i}_<name>``."""
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", sizes.d_model)], "f32"), name="x")
    for layer in range(layers):
        w = {
            name: g.insertTensor(
                es.tensorDesc([(f"{name}{i}", size) for i, size in enumerate(shape)], "f32"),
                name=f"l{layer}_{name}",
            )
            for name, shape in sizes.weight_shapes().items()
        }
        p = f"l{layer}_"
        h = g.rmsnorm(x, w["wn"], name=p + "h")
        q = g.matmul(h, w["wq"], name=p + "q")
        k = g.matmul(h, w["wk"], name=p + "k")
        v = g.matmul(h, w["wv"], name=p + "v")
        qh = g.split_heads(q, sizes.heads_q, heads_name="heads_q", name=p + "qh")
        kh = g.split_heads(k, sizes.heads_kv, heads_name="heads_kv", name=p + "kh")
        vh = g.split_heads(v, sizes.heads_kv, heads_name="heads_kv", name=p + "vh")
        a = g.attention(
            g.rope(qh, name=p + "qr"), g.rope(kh, name=p + "kr"), vh, causal=True, name=p + "a"
        )
        o = g.matmul(g.merge_heads(a, name=p + "m"), w["wo"], name=p + "o")
        r = g.binary(x, o, "add", name=p + "r")
        f1 = g.matmul(r, w["w1"], name=p + "f1")
        f = g.matmul(g.unary(f1, "relu", 0.0, name=p + "f"), w["w2"], name=p + "f2")
        x = g.binary(r, f, "add", name=p + "y" if layer + 1 < layers else "y")
    g.save(x)
    return g


def stack_weights(sizes: BlockSizes, layers: int, rng: np.random.Generator) -> dict:
    weights = {}
    for layer in range(layers):
        for name, value in random_weights(sizes, rng).items():
            weights[f"l{layer}_{name}"] = value
    return weights


def stack_reference(sizes: BlockSizes, layers: int, x, weights, ends):
    y = x.astype(np.float64)
    for layer in range(layers):
        mine = {name: weights[f"l{layer}_{name}"] for name in sizes.weight_shapes()}
        y = reference(sizes, y, mine, ends)
    return y


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


class Metrics:
    """The daemon's counters this benchmark reads, before and after a pass."""

    NAMES: ClassVar[dict] = {
        "compiles": "einsummable_request_path_compiles_total",
        "rebuilds": "einsummable_bucket_plan_rebuilds_total",
        "tokens": 'einsummable_bucket_tokens_total{model="buckets"}',
        "padding": 'einsummable_bucket_padding_tokens_total{model="buckets"}',
    }

    def __init__(self, port: int):
        self.port = port

    def read(self) -> dict:
        out = {}
        for key, name in self.NAMES.items():
            try:
                out[key] = metric(self.port, name)
            except AssertionError:  # a model's series exists after its first request
                out[key] = 0.0
        return out


def run_pass(client, metrics, model, requests, weights, check_index=0):
    """Runs ``requests`` (inputs) one at a time; the latencies and the counters' deltas."""
    before = metrics.read()
    latencies = []
    for index, x in enumerate(requests):
        start = time.perf_counter()
        result = client.execute(model, {"x": x})
        latencies.append(time.perf_counter() - start)
        if index == check_index:
            want = stack_reference(SIZES, LAYERS, x, weights, [len(x)])
            np.testing.assert_allclose(
                result.outputs["y"].astype(np.float64), want, rtol=5e-3, atol=5e-3
            )
    after = metrics.read()
    delta = {key: after[key] - before[key] for key in after}
    padded = delta["padding"] / (delta["tokens"] + delta["padding"]) if delta["tokens"] else None
    return {
        "model": model,
        "requests": len(requests),
        "tokens": [len(x) for x in requests],
        "latency_s": latencies,
        "p50_s": percentile(latencies, 50),
        "p90_s": percentile(latencies, 90),
        "p99_s": percentile(latencies, 99),
        "max_s": max(latencies),
        "request_path_compiles": int(delta["compiles"]),
        "bucket_rebuilds": int(delta["rebuilds"]),
        "padded_fraction": padded if model == "buckets" else None,
    }


def draw(rng, count):
    lengths = rng.integers(1, MAX_TOKENS, size=count, endpoint=True)
    return [rng.standard_normal((int(t), SIZES.d_model)).astype(np.float32) for t in lengths]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemon", type=Path, default=REPO_ROOT / "build" / "bin" / "einsummabled")
    parser.add_argument("--quick", action="store_true", help="12 requests per pass")
    parser.add_argument("--requests", type=int, help="requests per pass (default 60)")
    parser.add_argument("--devices", type=int, default=8, help="CPU virtual devices")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, help="JSON of the raw numbers")
    args = parser.parse_args()
    requests = args.requests or (12 if args.quick else 60)
    print(f"seed {args.seed}, {requests} requests per pass, lengths 1-{MAX_TOKENS}", flush=True)
    rng = np.random.default_rng(args.seed)
    weights = stack_weights(SIZES, LAYERS, rng)
    cold_requests = draw(rng, requests)
    warm_requests = draw(rng, requests)

    passes = {}
    with tempfile.TemporaryDirectory(prefix="einsummable-varied-") as workdir:
        port = free_port()
        daemon = Daemon(
            args.daemon, Path(workdir), [f"--devices={args.devices}", f"--metrics_port={port}"]
        )
        daemon.start()
        try:
            metrics = Metrics(port)
            with es.Client(daemon.address) as client:
                graph = stack(SIZES, LAYERS)
                for model, buckets in [("buckets", es.TokenBuckets()), ("exact", None)]:
                    client.register_model(
                        model,
                        graph,
                        weights=list(weights),
                        batching=es.Batching("tokens", max_queue_delay_us=0, buckets=buckets),
                    )
                    if model == "buckets":
                        registered = time.perf_counter()
                    for name, value in weights.items():
                        client.upload_tensor(model, name, value, progress=False)
                passes["cold"] = run_pass(client, metrics, "buckets", cold_requests, weights)
                state = client.wait_for_warm_up("buckets", timeout_s=3600)
                warm_up_s = time.perf_counter() - registered
                assert state.state == "done", state
                passes["warm"] = run_pass(client, metrics, "buckets", warm_requests, weights)
                passes["replay"] = run_pass(client, metrics, "buckets", warm_requests, weights)
                passes["exact cold"] = run_pass(client, metrics, "exact", cold_requests, weights)
                passes["exact replay"] = run_pass(client, metrics, "exact", cold_requests, weights)
                info = client.server_info()
        finally:
            daemon.stop()

    result = {
        "date": datetime.date.today().isoformat(),
        "machine": platform.processor() or platform.machine(),
        "cores": len(os.sched_getaffinity(0)),
        "backend": f"{info.backend}, {info.devices} devices",
        "kernels": info.kernels,
        "model": f"{LAYERS} layers, {SIZES}",
        "seed": args.seed,
        "warm_up_s": warm_up_s,
        "warm_up_ready": list(state.ready),
        "passes": passes,
    }
    out = args.out
    if out is None:
        folder = REPO_ROOT / "bench" / "results" / ("quick" if args.quick else "")
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / f"serving-varied-{result['date']}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")

    print(f"\n{result['model']}; {result['backend']}; {result['cores']} cores; seed {args.seed}")
    print(f"warm-up of buckets {state.ready}: {warm_up_s:.1f} s after registration\n")
    print(
        "| pass | model | requests | p50 ms | p90 ms | p99 ms | max ms | request-path compiles "
        "| bucket rebuilds | padded tokens |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, p in passes.items():
        padded = "" if p["padded_fraction"] is None else f"{100 * p['padded_fraction']:.1f} %"
        print(
            f"| {name} | {p['model']} | {p['requests']} | {1e3 * p['p50_s']:.1f} | "
            f"{1e3 * p['p90_s']:.1f} | {1e3 * p['p99_s']:.1f} | {1e3 * p['max_s']:.1f} | "
            f"{p['request_path_compiles']} | {p['bucket_rebuilds']} | {padded} |"
        )
    ratio = passes["warm"]["p99_s"] / passes["replay"]["p99_s"]
    print(f"\nwarm p99 / replay p99: {ratio:.2f} (target <= 2); median latencies are of one run")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
