#!/usr/bin/env python3
"""The paper's feed-forward network, y = relu(x · w1) · w2, on an Einsummable daemon.

The number of tokens is symbolic: the graph is registered once and the server compiles a plan
per token count. The result is checked against NumPy (float64 reference, f32 tolerance) and
the plan the server chose is printed. Exit status 1 on a mismatch.

    python examples/ffn.py --server 127.0.0.1:50051 --devices 4 --tokens 64 128
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import einsummable as es  # installed: scripts/setup, or `pip install clients/python`

RTOL = 1e-4


def build(d_model: int, d_ff: int, dtype: str = "f32"):
    """The graph and its tensors: x [tokens, d_model], w1 [d_model, d_ff], w2 [d_ff, d_model]."""
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", d_model)], dtype), name="x")
    w1 = g.insertTensor(es.tensorDesc([("d_model", d_model), ("d_ff", d_ff)], dtype), name="w1")
    w2 = g.insertTensor(es.tensorDesc([("d_ff", d_ff), ("d_model", d_model)], dtype), name="w2")
    h = g.matmul(x, w1, name="h")
    a = g.unary(h, "relu", 0.0, name="a")
    y = g.matmul(a, w2, name="y")
    g.save(y)
    return g, {"x": x, "w1": w1, "w2": w2, "y": y}


def reference(x, w1, w2):
    x, w1, w2 = (np.asarray(t, dtype=np.float64) for t in (x, w1, w2))
    return np.maximum(x @ w1, 0.0) @ w2


def max_error(actual, expected):
    """Largest |actual - expected| relative to rtol·(|expected| + max|expected|): <= 1 passes.

    The second term lets elements near zero (where summation order decides the last bits)
    pass at the same absolute error as the largest elements."""
    scale = np.abs(expected) + np.abs(expected).max()
    return float(np.max(np.abs(actual - expected) / (RTOL * scale)))


def run(
    server=None,
    devices=4,
    tokens=(64,),
    d_model=128,
    d_ff=512,
    schedule="optimized",
    planner=None,
    seed=0,
    explain=True,
    out=sys.stdout,
    client=None,
):
    """Compiles the FFN, runs it at each token count, checks it; returns True when all match."""
    rng = np.random.default_rng(seed)
    g, t = build(d_model, d_ff)
    w1 = rng.standard_normal((d_model, d_ff), dtype=np.float32) / np.sqrt(d_model)
    w2 = rng.standard_normal((d_ff, d_model), dtype=np.float32) / np.sqrt(d_ff)
    ok = True
    with es.compileGraph(
        g,
        device=list(range(devices)),
        schedule_mode=schedule,
        planner=planner,
        server=server,
        client=client,
        dims={"tokens": tokens[0]},
        weights=[t["w1"], t["w2"]],
        name="ffn",
    ) as cg:
        cg.load(t["w1"], w1)
        cg.load(t["w2"], w2)
        for count in tokens:
            x = rng.standard_normal((count, d_model), dtype=np.float32)
            cg.load(t["x"], x)
            cg.execute()
            y = cg.offload(t["y"])
            error = max_error(y, reference(x, w1, w2))
            passed = y.shape == (count, d_model) and y.dtype == np.float32 and error <= 1.0
            ok &= passed
            print(
                f"ffn tokens={count} devices={devices}: {'ok' if passed else 'MISMATCH'} "
                f"(error {error:.3g} of the tolerance, rtol {RTOL:g}; "
                f"{cg.last_execute.execute_seconds:.4f} s)",
                file=out,
            )
            if explain:
                print(cg.explain(), file=out)
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument(
        "--server", default=None, help="host:port (default $EINSUMMABLE_SERVER or 127.0.0.1:50051)"
    )
    parser.add_argument("--devices", type=int, default=4, help="devices to split across (4 or 8)")
    parser.add_argument(
        "--tokens", type=int, nargs="+", default=[64], help="token counts to run, e.g. 64 128"
    )
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--d-ff", type=int, default=512)
    parser.add_argument("--schedule", default="optimized", choices=["optimized", "naive", "ai"])
    parser.add_argument("--planner", default=None, choices=["dp", "greedy", "random"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-explain", action="store_true", help="do not print the plan")
    args = parser.parse_args(argv)
    try:
        ok = run(
            args.server,
            args.devices,
            args.tokens,
            args.d_model,
            args.d_ff,
            args.schedule,
            args.planner,
            args.seed,
            explain=not args.no_explain,
        )
    except es.EinsummableError as error:
        print(f"ffn: server error: {error}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
