"""The LLaMA-style block that test_batching.py batches and bench/serving/run.py serves, with its
sizes as parameters, and its float64 reference.

y = r + relu(r·w1)·w2 with r = x + attention(rope(q), rope(k), v)·wo, the q, k, v projections of
rmsnorm(x); causal grouped-query attention; tokens symbolic and no sequence ends of its own (a
model with batching gets them from the batcher, one sequence per request).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import einsummable as es


@dataclass(frozen=True)
class BlockSizes:
    d_model: int = 64
    heads_q: int = 4
    heads_kv: int = 2
    d_ff: int = 128

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads_q

    def weight_shapes(self) -> dict:
        kv = self.heads_kv * self.d_head
        return {
            "wn": (self.d_model,),
            "wq": (self.d_model, self.d_model),
            "wk": (self.d_model, kv),
            "wv": (self.d_model, kv),
            "wo": (self.d_model, self.d_model),
            "w1": (self.d_model, self.d_ff),
            "w2": (self.d_ff, self.d_model),
        }

    def weight_bytes(self, itemsize: int = 4) -> int:
        return itemsize * sum(int(np.prod(shape)) for shape in self.weight_shapes().values())

    def __str__(self) -> str:
        return (
            f"d_model={self.d_model},heads_q={self.heads_q},heads_kv={self.heads_kv},"
            f"d_head={self.d_head},d_ff={self.d_ff}"
        )


def block(sizes: BlockSizes, dtype: str = "f32") -> es.Graph:
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", sizes.d_model)], dtype), name="x")
    w = {
        name: g.insertTensor(
            es.tensorDesc([(f"{name}{i}", size) for i, size in enumerate(shape)], dtype),
            name=name,
        )
        for name, shape in sizes.weight_shapes().items()
    }
    h = g.rmsnorm(x, w["wn"], name="h")
    q = g.matmul(h, w["wq"], name="q")
    k = g.matmul(h, w["wk"], name="k")
    v = g.matmul(h, w["wv"], name="v")
    qh = g.split_heads(q, sizes.heads_q, heads_name="heads_q", name="qh")
    kh = g.split_heads(k, sizes.heads_kv, heads_name="heads_kv", name="kh")
    vh = g.split_heads(v, sizes.heads_kv, heads_name="heads_kv", name="vh")
    a = g.attention(g.rope(qh, name="qr"), g.rope(kh, name="kr"), vh, causal=True, name="a")
    o = g.matmul(g.merge_heads(a, name="m"), w["wo"], name="o")
    r = g.binary(x, o, "add", name="r")
    f = g.matmul(g.unary(g.matmul(r, w["w1"], name="f1"), "relu", 0.0, name="f"), w["w2"])
    g.save(g.binary(r, f, "add", name="y"))
    return g


def random_weights(sizes: BlockSizes, rng: np.random.Generator) -> dict:
    """f32 weights scaled so activations stay of order one through the block."""
    weights = {
        name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        for name, shape in sizes.weight_shapes().items()
    }
    weights["wn"] = (1.0 + 0.1 * rng.standard_normal(sizes.d_model)).astype(np.float32)
    return weights


def reference(sizes: BlockSizes, x, weights, ends):
    """The block in float64, sequence by sequence (``ends``: where each sequence ends)."""
    d_head, heads_q, heads_kv = sizes.d_head, sizes.heads_q, sizes.heads_kv
    x = x.astype(np.float64)
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    h = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w["wn"]
    q = (h @ w["wq"]).reshape(len(x), heads_q, d_head)
    k = (h @ w["wk"]).reshape(len(x), heads_kv, d_head)
    v = (h @ w["wv"]).reshape(len(x), heads_kv, d_head)
    out = np.zeros_like(q)
    half = d_head // 2
    freq = 10000.0 ** (-2.0 * np.arange(half) / d_head)
    start = 0
    for end in ends:
        positions = np.arange(end - start, dtype=np.float64)[:, None, None]
        c, s = np.cos(positions * freq), np.sin(positions * freq)

        def rope(t, c=c, s=s):
            lo, hi = t[..., :half], t[..., half:]
            return np.concatenate([lo * c - hi * s, lo * s + hi * c], axis=-1)

        qs, ks, vs = rope(q[start:end]), rope(k[start:end]), v[start:end]
        n = end - start
        mask = np.tril(np.ones((n, n), dtype=bool))
        for head in range(heads_q):
            kv = head // (heads_q // heads_kv)
            scores = qs[:, head] @ ks[:, kv].T / np.sqrt(d_head)
            scores = np.where(mask, scores, -np.inf)
            p = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[start:end, head] = (p / p.sum(axis=-1, keepdims=True)) @ vs[:, kv]
        start = end
    r = x + out.reshape(len(x), sizes.d_model) @ w["wo"]
    return r + np.maximum(r @ w["w1"], 0.0) @ w["w2"]
