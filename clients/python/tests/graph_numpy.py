"""A float64 NumPy interpreter of client graphs, for the operators the LLaMA-family graph uses
(einsum with its element-wise joins, embedding, rmsnorm, split_heads, merge_heads, rope with its
scalings, grouped-query attention over packed sequences). It lets test_models.py check the
converter's graph and weights against transformers' logits without a daemon, and states the
operators' meaning (rope's llama3 and linear scalings as transformers computes them) a second
time, apart from the C++ kernels."""

from __future__ import annotations

import math

import numpy as np


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


# The einsum joins, shared with fake_server.py.
UNARY = {
    "identity": lambda x, c: x,
    "neg": lambda x, c: -x,
    "abs": lambda x, c: np.abs(x),
    "relu": lambda x, c: np.maximum(x, 0.0),
    "gelu": lambda x, c: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "silu": lambda x, c: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x, c: 1.0 / (1.0 + np.exp(-x)),
    "tanh": lambda x, c: np.tanh(x),
    "exp": lambda x, c: np.exp(x),
    "log": lambda x, c: np.log(x),
    "sqrt": lambda x, c: np.sqrt(x),
    "rsqrt": lambda x, c: 1.0 / np.sqrt(x),
    "square": lambda x, c: x * x,
    "reciprocal": lambda x, c: 1.0 / x,
    "scale": lambda x, c: x * c,
    "add_scalar": lambda x, c: x + c,
    "pow_scalar": lambda x, c: np.power(x, c),
    "leaky_relu": lambda x, c: np.where(x >= 0, x, c * x),
}
BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
}


def inv_freq(d: int, attrs: dict) -> np.ndarray:
    """RoPE's frequencies: transformers' default, "linear" and "llama3" (its
    ``_compute_llama3_parameters``) schedules."""
    theta = attrs.get("theta", 10000.0)
    freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    scaling = attrs.get("scaling", "none")
    if scaling == "linear":
        return freq / attrs["scaling_factor"]
    if scaling == "llama3":
        factor = attrs["scaling_factor"]
        low, high = attrs["low_freq_factor"], attrs["high_freq_factor"]
        original = attrs["original_max_position"]
        low_wavelen, high_wavelen = original / low, original / high
        wavelen = 2 * math.pi / freq
        scaled = np.where(wavelen > low_wavelen, freq / factor, freq)
        smooth = (original / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled)
    return freq


def positions(ends, tokens: int) -> np.ndarray:
    pos = np.empty(tokens)
    start = 0
    for end in ends:
        pos[start:end] = np.arange(end - start)
        start = end
    return pos


def rope(x, attrs, ends, given=None):
    """``given``: the positions input, when the graph gives one (else from ``ends``)."""
    d = x.shape[-1]
    at = positions(ends, x.shape[0]) if given is None else np.asarray(given, np.float64)
    angle = at[:, None] * inv_freq(d, attrs)[None, :]
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (d // 2,)
    cos, sin = np.cos(angle).reshape(shape), np.sin(angle).reshape(shape)
    lo, hi = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([lo * cos - hi * sin, lo * sin + hi * cos], axis=-1)


def paged_keys(k, v, key_lengths, page_table, page_size):
    """The keys and values of paged attention laid out in regions of their fills, and the
    regions' ends: sequence s's key j is row page_table[s][j // page_size] * page_size +
    j % page_size of the pool."""
    rows = [
        int(page_table[s][j // page_size]) * page_size + j % page_size
        for s in range(len(key_lengths))
        for j in range(int(key_lengths[s]))
    ]
    return k[rows], v[rows], np.cumsum([int(n) for n in key_lengths]).tolist()


def attention(q, k, v, ends, causal, scale, key_ends=None, key_lengths=None):
    """Sequence s's queries q[ends[s-1]:ends[s]] over its keys k[key_ends[s-1]:key_ends[s]]
    (the queries' own rows without key_ends); causal masking is bottom-right (the last query
    sees every key of its sequence), which is the usual lower triangle when the two agree."""
    tokens, heads_q, d = q.shape
    group = heads_q // k.shape[1]
    out = np.zeros((tokens, heads_q, v.shape[2]))
    key_ends = key_ends or ends
    start = key_start = 0
    for s, (end, key_end) in enumerate(zip(ends, key_ends)):
        region_end = key_end
        if key_lengths is not None:  # only the filled part of the region
            key_end = key_start + int(key_lengths[s])
        for head in range(heads_q):
            keys = k[key_start:key_end, head // group]
            scores = q[start:end, head] @ keys.T * scale
            if causal:
                visible = np.tril(np.ones_like(scores, dtype=bool), k=len(keys) - (end - start))
                scores = np.where(visible, scores, -np.inf)
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights /= weights.sum(axis=-1, keepdims=True)
            out[start:end, head] = weights @ v[key_start:key_end, head // group]
        start, key_start = end, region_end
    return out


def write_rows(state, rows, slots):
    """``state`` with ``rows`` written at ``slots`` (distinct, inside the state; -1: not
    written)."""
    slots = np.asarray(slots, np.int64)
    kept = slots != -1
    slots = slots[kept]
    assert (slots >= 0).all() and (slots < state.shape[0]).all() and len(set(slots)) == len(slots)
    out = np.array(state, copy=True)
    out[slots] = np.asarray(rows)[kept]
    return out


def run(graph, inputs: dict, sequence_ends=None) -> dict:
    """Every saved tensor of ``graph`` for ``inputs`` (name -> array; weights included), in
    float64. ``sequence_ends`` are the request's, for attention and rope without their own."""
    values = {}
    for tensor in graph.inputs:
        array = np.asarray(inputs[tensor.name])
        values[tensor.name] = array if array.dtype.kind == "i" else array.astype(np.float64)
    for op in graph.operators:
        a = {key: attr.value for key, attr in op.attributes.items()}
        xs = [values[name] for name in op.inputs]
        tokens = xs[0].shape[0]
        ends = a.get("sequence_ends") or sequence_ends or [tokens]
        if op.kind == "einsum":
            join = a.get("join") or ("identity" if len(xs) == 1 else "mul")
            lhs, out = a["equation"].split("->")
            terms = lhs.split(",")
            if join in UNARY:
                y = UNARY[join](np.einsum(f"{terms[0]}->{terms[0]}", xs[0]), a.get("constant", 0))
                y = np.einsum(f"{terms[0]}->{out}", y)
            elif join == "mul":
                y = np.einsum(a["equation"], *xs)
            else:
                # Element-wise binary: broadcast the second term onto the first's trailing axes.
                assert set(terms[1]) <= set(terms[0]) and terms[0] == out, a["equation"]
                y = BINARY[join](xs[0], xs[1])
        elif op.kind == "embedding":
            table, ids = xs
            assert ids.min() >= 0 and ids.max() < table.shape[0]
            y = table[ids]
        elif op.kind == "write_rows":
            y = write_rows(*xs)
        elif op.kind == "rmsnorm":
            x, w = xs
            y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + a["eps"]) * w
        elif op.kind == "split_heads":
            x = xs[0]
            y = x.reshape(*x.shape[:-1], a["heads"], x.shape[-1] // a["heads"])
        elif op.kind == "merge_heads":
            x = xs[0]
            y = x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])
        elif op.kind == "rope":
            y = rope(xs[0], a, ends, xs[1] if len(xs) > 1 else None)
        elif op.kind == "attention":
            q, k, v = xs[:3]
            scale = a.get("scale", 1.0 / math.sqrt(q.shape[-1]))
            lengths = xs[3] if len(xs) > 3 else None
            key_ends = a.get("key_ends")
            if len(xs) > 4:  # paged: the pool's keys gathered into regions of their fills
                k, v, key_ends = paged_keys(k, v, lengths, xs[4], a["page_size"])
                lengths = None
            y = attention(q, k, v, ends, a.get("causal", False), scale, key_ends, lengths)
        else:
            raise NotImplementedError(f"graph_numpy: operator kind {op.kind}")
        values[op.name] = y
    return {t.name: values[t.name] for t in graph.saved}
