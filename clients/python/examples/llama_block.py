#!/usr/bin/env python3
"""A small LLaMA block on an Einsummable daemon, checked against NumPy.

The structure of compiler/workloads/llama.cc: RMSNorm -> Q, K, V projections -> split heads ->
RoPE on Q and K -> grouped-query causal attention over packed sequences -> merge heads ->
output projection -> residual add -> RMSNorm -> SwiGLU feed-forward (silu(x·w1) * (x·w3)) · w2
-> residual add. Sequences are packed end to end (``--sequences 7 9 16`` = 32 tokens); RoPE
positions restart and attention stops at every sequence end. Prints the server's plan; exit
status 1 when the result differs from NumPy beyond f32 tolerance.

    python examples/llama_block.py --server 127.0.0.1:50051 --devices 8
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np

import einsummable as es  # installed: scripts/setup, or `pip install clients/python`

RTOL = 1e-4


@dataclass
class Config:
    d_model: int = 128
    heads_q: int = 8
    heads_kv: int = 4
    d_head: int = 16
    d_ff: int = 256
    sequences: list = field(default_factory=lambda: [7, 9, 16])
    rope_theta: float = 10000.0
    eps: float = 1e-5

    @property
    def tokens(self) -> int:
        return sum(self.sequences)

    @property
    def sequence_ends(self) -> list:
        return np.cumsum(self.sequences).tolist()


WEIGHTS = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w3", "w2")


def weight_shapes(c: Config) -> dict:
    """Each weight's dimensions as (name, size) pairs, as in llama.cc."""
    d, f = ("d_model", c.d_model), ("d_ff", c.d_ff)
    q_out, kv_out = ("q_out", c.heads_q * c.d_head), ("kv_out", c.heads_kv * c.d_head)
    return {
        "attn_norm": [d],
        "wq": [d, q_out],
        "wk": [d, kv_out],
        "wv": [d, kv_out],
        "wo": [q_out, d],
        "ffn_norm": [d],
        "w1": [d, f],
        "w3": [d, f],
        "w2": [f, d],
    }


def build(c: Config, dtype: str = "f32"):
    """The block's graph; returns (graph, {name: tensor})."""
    g = es.createGraph()
    t = {
        "x": g.insertTensor(
            es.tensorDesc([("tokens", c.tokens), ("d_model", c.d_model)], dtype), name="x"
        )
    }
    for name, dims in weight_shapes(c).items():
        t[name] = g.insertTensor(es.tensorDesc(dims, dtype), name=name)
    ends = c.sequence_ends

    # Attention half.
    attn_in = g.rmsnorm(t["x"], t["attn_norm"], eps=c.eps, name="attn_in")
    q = g.matmul(attn_in, t["wq"], name="q")
    k = g.matmul(attn_in, t["wk"], name="k")
    v = g.matmul(attn_in, t["wv"], name="v")
    q_heads = g.split_heads(
        q, c.heads_q, heads_name="heads_q", head_dim_name="d_head", name="q_heads"
    )
    k_heads = g.split_heads(
        k, c.heads_kv, heads_name="heads_kv", head_dim_name="d_head", name="k_heads"
    )
    v_heads = g.split_heads(
        v, c.heads_kv, heads_name="heads_kv", head_dim_name="d_head", name="v_heads"
    )
    q_rope = g.rope(q_heads, theta=c.rope_theta, sequence_ends=ends, name="q_rope")
    k_rope = g.rope(k_heads, theta=c.rope_theta, sequence_ends=ends, name="k_rope")
    attn = g.attention(q_rope, k_rope, v_heads, causal=True, sequence_ends=ends, name="attn")
    attn_merged = g.merge_heads(attn, dim_name="q_out", name="attn_merged")
    attn_out = g.matmul(attn_merged, t["wo"], name="attn_out")
    h = g.binary(t["x"], attn_out, "add", name="h")

    # SwiGLU feed-forward half.
    ffn_in = g.rmsnorm(h, t["ffn_norm"], eps=c.eps, name="ffn_in")
    gate = g.matmul(ffn_in, t["w1"], name="gate")
    up = g.matmul(ffn_in, t["w3"], name="up")
    gate_silu = g.unary(gate, "silu", name="gate_silu")
    ffn_hidden = g.binary(gate_silu, up, "mul", name="ffn_hidden")
    ffn_out = g.matmul(ffn_hidden, t["w2"], name="ffn_out")
    t["y"] = g.binary(h, ffn_out, "add", name="y")
    g.save(t["y"])
    return g, t


# ---- NumPy reference (float64) ------------------------------------------------------------------


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def positions(ends, tokens):
    """Each token's position within its packed sequence."""
    pos = np.empty(tokens)
    start = 0
    for end in ends:
        pos[start:end] = np.arange(end - start)
        start = end
    return pos


def rope(x, theta, ends):
    """x [tokens, heads, d]: "rotate half" with positions restarting at each sequence end."""
    d = x.shape[-1]
    half = d // 2
    angle = positions(ends, x.shape[0])[:, None] * theta ** (-2.0 * np.arange(half) / d)
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    lo, hi = x[..., :half], x[..., half:]
    return np.concatenate([lo * cos - hi * sin, lo * sin + hi * cos], axis=-1)


def attention(q, k, v, ends, causal=True):
    """Grouped-query attention per packed sequence: query head h reads kv head h // group."""
    tokens, heads_q, d = q.shape
    group = heads_q // k.shape[1]
    out = np.zeros((tokens, heads_q, v.shape[2]))
    start = 0
    for end in ends:
        for head in range(heads_q):
            qs, ks, vs = (
                q[start:end, head],
                k[start:end, head // group],
                v[start:end, head // group],
            )
            scores = qs @ ks.T / np.sqrt(d)
            if causal:
                scores = np.where(np.tril(np.ones_like(scores, dtype=bool)), scores, -np.inf)
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[start:end, head] = (weights / weights.sum(axis=-1, keepdims=True)) @ vs
        start = end
    return out


def reference(c: Config, arrays: dict) -> np.ndarray:
    a = {name: np.asarray(value, dtype=np.float64) for name, value in arrays.items()}
    ends = c.sequence_ends
    x = a["x"]
    attn_in = rmsnorm(x, a["attn_norm"], c.eps)
    q = (attn_in @ a["wq"]).reshape(c.tokens, c.heads_q, c.d_head)
    k = (attn_in @ a["wk"]).reshape(c.tokens, c.heads_kv, c.d_head)
    v = (attn_in @ a["wv"]).reshape(c.tokens, c.heads_kv, c.d_head)
    attn = attention(rope(q, c.rope_theta, ends), rope(k, c.rope_theta, ends), v, ends)
    h = x + attn.reshape(c.tokens, -1) @ a["wo"]
    ffn_in = rmsnorm(h, a["ffn_norm"], c.eps)
    gate = ffn_in @ a["w1"]
    silu = gate / (1.0 + np.exp(-gate))
    return h + (silu * (ffn_in @ a["w3"])) @ a["w2"]


def random_arrays(c: Config, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {"x": rng.standard_normal((c.tokens, c.d_model), dtype=np.float32)}
    for name, dims in weight_shapes(c).items():
        shape = [size for _, size in dims]
        if len(shape) == 1:  # norm weights around 1
            arrays[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            arrays[name] = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
    return arrays


def max_error(actual, expected):
    """Largest |actual - expected| / (rtol·(|expected| + max|expected|)): <= 1 passes."""
    scale = np.abs(expected) + np.abs(expected).max()
    return float(np.max(np.abs(actual - expected) / (RTOL * scale)))


def run(
    server=None,
    devices=8,
    config: Config | None = None,
    schedule="optimized",
    planner=None,
    seed=0,
    explain=True,
    out=sys.stdout,
    client=None,
):
    """Compiles and runs the block once, checks it; returns True when it matches NumPy."""
    c = config or Config()
    g, t = build(c)
    arrays = random_arrays(c, seed)
    with es.compileGraph(
        g,
        device=list(range(devices)),
        schedule_mode=schedule,
        planner=planner,
        server=server,
        client=client,
        weights=[t[w] for w in WEIGHTS],
        name="llama-block",
    ) as cg:
        for name, array in arrays.items():
            cg.load(t[name], array)
        cg.execute()
        y = cg.offload(t["y"])
        error = max_error(y, reference(c, arrays))
        ok = y.shape == (c.tokens, c.d_model) and error <= 1.0
        print(
            f"llama block tokens={c.tokens} (sequences {c.sequences}) devices={devices}: "
            f"{'ok' if ok else 'MISMATCH'} (error {error:.3g} of the tolerance, rtol {RTOL:g}; "
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
    parser.add_argument("--devices", type=int, default=8, help="devices to split across (4 or 8)")
    parser.add_argument(
        "--sequences",
        type=int,
        nargs="+",
        default=[7, 9, 16],
        help="lengths of the packed sequences",
    )
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads-q", type=int, default=8)
    parser.add_argument("--heads-kv", type=int, default=4)
    parser.add_argument("--d-head", type=int, default=16)
    parser.add_argument("--d-ff", type=int, default=256)
    parser.add_argument("--schedule", default="optimized", choices=["optimized", "naive", "ai"])
    parser.add_argument("--planner", default=None, choices=["dp", "greedy", "random"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-explain", action="store_true", help="do not print the plan")
    args = parser.parse_args(argv)
    config = Config(
        d_model=args.d_model,
        heads_q=args.heads_q,
        heads_kv=args.heads_kv,
        d_head=args.d_head,
        d_ff=args.d_ff,
        sequences=args.sequences,
    )
    try:
        ok = run(
            args.server,
            args.devices,
            config,
            args.schedule,
            args.planner,
            args.seed,
            explain=not args.no_explain,
        )
    except es.GraphError as error:
        print(f"llama_block: {error}", file=sys.stderr)
        return 2
    except es.EinsummableError as error:
        print(f"llama_block: server error: {error}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
