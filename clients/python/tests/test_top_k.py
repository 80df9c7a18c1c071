"""The ``top_k`` operator: the client's typed helper (its shape rule and checks), and, against a
real einsummabled (the ``daemon`` fixture, conftest.py), LM-head logits and their top-k pairs on
several device counts and planners, compared with a NumPy ranking — ties (to the smaller index)
and NaN (first, as argmax ranks it) included. Skipped with a message when the daemon binary is
absent."""

import numpy as np
import pytest

import einsummable as es
from einsummable.graph import OPERATOR_KINDS


def test_top_k_gives_k_pairs_per_row():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("vocab", 50)], "bf16"), name="x")
    pairs = g.top_k(x, 5, name="pairs")
    assert pairs.dtype == "f32"
    assert [(d.name, d.size) for d in pairs.dims] == [
        ("tokens", "tokens"),
        ("top_k", 5),
        ("top_k_pair", 2),
    ]
    g.save(pairs)
    [node] = g.to_graphdef().operators
    assert (node.kind, list(node.inputs)) == ("top_k", ["x"])
    assert node.attributes["k"].int_value == 5
    same = g.op("top_k", [x], {"k": 5}, name="same")
    assert same.dims == pairs.dims and "top_k" in OPERATOR_KINDS
    wide = g.insertTensor(es.tensorDesc([("vocab", 8)], "f64"), name="wide")
    assert g.topK(wide, 8).dtype == "f64"


def test_top_k_refuses_integers_and_a_k_outside_the_vocabulary():
    g = es.createGraph()
    ids = g.insertTensor(es.tensorDesc(["tokens"], "i32"), name="ids")
    with pytest.raises(es.GraphError, match=r"node 'bad' \(top_k.*floating-point"):
        g.top_k(ids, 1, name="bad")
    x = g.insertTensor(es.tensorDesc([("vocab", 6)]), name="x")
    with pytest.raises(es.GraphError, match=r"attribute k is 7; give 1 to 6"):
        g.top_k(x, 7, name="wide")
    with pytest.raises(es.GraphError, match=r"attribute k must be an integer"):
        g.top_k(x, 1.5)


def ranked_pairs(logits: np.ndarray, k: int) -> np.ndarray:
    """The k best (value, index) pairs per row: NaN first by index, then larger first, equal
    values by index."""

    def key(values, i):
        return (0, 0.0, i) if np.isnan(values[i]) else (1, -float(values[i]), i)

    out = np.empty((logits.shape[0], k, 2), np.float32)
    for row, values in enumerate(logits):
        order = sorted(range(values.size), key=lambda i: key(values, i))[:k]
        out[row, :, 0] = values[order]
        out[row, :, 1] = order
    return out


@pytest.mark.integration
def test_top_k_of_lm_head_logits_matches_numpy(daemon_client):
    # Small integers make exact ties. An +inf in row 5 of h makes that row's logits +inf, -inf
    # or NaN (inf · 0) by column: NaN comes first, then +inf.
    rng = np.random.default_rng(41)
    tokens, d, vocab, k = 12, 8, 40, 6
    h = rng.integers(0, 2, (tokens, d)).astype(np.float32)
    w = rng.integers(-1, 2, (d, vocab)).astype(np.float32)
    h_inf = h.copy()
    h_inf[5, 2] = np.inf
    g = es.createGraph()
    h_t = g.insertTensor(es.tensorDesc([("tokens", tokens), ("d", d)]), name="h")
    w_t = g.insertTensor(es.tensorDesc([("d", d), ("vocab", vocab)]), name="w")
    logits = g.matmul(h_t, w_t, name="logits")
    pairs = g.top_k(logits, k, name="pairs")
    ids = g.argmax(logits, name="ids")
    g.save(pairs)
    g.save(ids)
    setups = ((list(range(8)), None), ([0, 1, 2], None), (list(range(4)), "megatron"))
    for values in (h, h_inf):
        with np.errstate(invalid="ignore"):
            expected = ranked_pairs(values @ w, k)
        for device, planner in setups:
            with es.compileGraph(g, device=device, planner=planner, client=daemon_client) as cg:
                cg.load(h_t, values)
                cg.load(w_t, w)
                cg.execute()
                got = cg.offload(pairs)
                assert got.dtype == np.float32 and got.shape == (tokens, k, 2)
                np.testing.assert_array_equal(got, expected, err_msg=f"{device} {planner}")
                # Pair 0 is argmax's choice.
                np.testing.assert_array_equal(got[:, 0, 1:], cg.offload(ids))
