"""The ``argmax`` operator: the client's typed helper (its shape rule and checks), and, against a
real einsummabled (the ``daemon`` fixture, conftest.py), LM-head logits and their argmax on
several device counts and planners, compared with NumPy's ``argmax`` — ties (to the first index)
and NaN (the first NaN wins, as in NumPy and torch) included. Skipped with a message when the
daemon binary is absent."""

import numpy as np
import pytest

import einsummable as es
from einsummable.graph import OPERATOR_KINDS


def test_argmax_keeps_the_reduced_dimension_as_i64():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("vocab", 50)], "bf16"), name="x")
    ids = g.argmax(x, name="ids")
    assert ids.dtype == "i64"
    assert [(d.name, d.size) for d in ids.dims] == [("tokens", "tokens"), ("argmax", 1)]
    g.save(ids)
    [node] = g.to_graphdef().operators
    assert (node.kind, list(node.inputs)) == ("argmax", ["x"])
    same = g.op("argmax", [x], name="same")
    assert same.dims == ids.dims and "argmax" in OPERATOR_KINDS


def test_argmax_refuses_integers_and_scalars():
    g = es.createGraph()
    ids = g.insertTensor(es.tensorDesc(["tokens"], "i32"), name="ids")
    with pytest.raises(es.GraphError, match=r"node 'bad' \(argmax.*floating-point"):
        g.argmax(ids, name="bad")


@pytest.mark.integration
def test_argmax_of_lm_head_logits_matches_numpy(daemon_client):
    # Small integers make exact ties. An +inf in row 5 of h makes that row's logits +inf, -inf
    # or NaN (inf · 0) by column: NaN must win, at its first column.
    rng = np.random.default_rng(37)
    tokens, d, vocab = 12, 8, 40
    h = rng.integers(0, 2, (tokens, d)).astype(np.float32)
    w = rng.integers(-1, 2, (d, vocab)).astype(np.float32)
    h_inf = h.copy()
    h_inf[5, 2] = np.inf
    g = es.createGraph()
    h_t = g.insertTensor(es.tensorDesc([("tokens", tokens), ("d", d)]), name="h")
    w_t = g.insertTensor(es.tensorDesc([("d", d), ("vocab", vocab)]), name="w")
    logits = g.matmul(h_t, w_t, name="logits")
    ids = g.argmax(logits, name="ids")
    g.save(ids)
    assert any(len(set(row)) < vocab for row in (h @ w).tolist())  # ties exist
    with np.errstate(invalid="ignore"):
        row5 = (h_inf @ w)[5]
    assert np.isnan(row5).any() and np.isposinf(row5).any()
    setups = ((list(range(8)), None), ([0, 1, 2], None), (list(range(4)), "megatron"))
    for values in (h, h_inf):
        with np.errstate(invalid="ignore"):
            expected = np.argmax(values @ w, axis=-1, keepdims=True)
        for device, planner in setups:
            with es.compileGraph(g, device=device, planner=planner, client=daemon_client) as cg:
                cg.load(h_t, values)
                cg.load(w_t, w)
                cg.execute()
                got = cg.offload(ids)
                assert got.dtype == np.int64 and got.shape == (tokens, 1)
                np.testing.assert_array_equal(got, expected, err_msg=f"{device} {planner}")
