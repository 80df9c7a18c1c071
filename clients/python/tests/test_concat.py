"""Integration: the ``concat`` operator through the client's generic path against a real
einsummabled (the ``daemon`` fixture, conftest.py).

The client has no typed helper for concat, so each graph adds it with
``g.op("concat", inputs, {"axis": ...}, output=es.tensorDesc(...))`` — the path any kind the
server gained after the client takes (docs/operators.md "Adding an operator"). Results are
compared with NumPy's ``concatenate``; errors are the server's, naming the input and the
dimension. Skipped with a message when the daemon binary is absent.
"""

import numpy as np
import pytest

import einsummable as es

pytestmark = pytest.mark.integration


def dims(shape, axis, axis_name):
    """Named dimensions a, b, c of `shape`, the axis called `axis_name`."""
    return [
        (axis_name if dim == axis % len(shape) else name, size)
        for dim, (name, size) in enumerate(zip("abc", shape))
    ]


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat_of_three_inputs_matches_numpy(daemon_client, axis):
    # Three inputs of different lengths along the axis, on 8 and on 3 devices: the planner
    # splits the other two dimensions, each function reading its rows of every input whole.
    shape = [4, 6, 8]
    lengths = [3, 1, 2]
    g = es.createGraph()
    tensors, values = [], []
    rng = np.random.default_rng(11 + axis)
    for idx, length in enumerate(lengths):
        part = list(shape)
        part[axis] = length
        tensors.append(
            g.insertTensor(es.tensorDesc(dims(part, axis, f"part{idx}")), name=f"x{idx}")
        )
        values.append(rng.standard_normal(part, dtype=np.float32))
    joined_shape = list(shape)
    joined_shape[axis] = sum(lengths)
    joined = g.op(
        "concat",
        tensors,
        {"axis": axis, "dim_name": "joined"},
        output=es.tensorDesc(dims(joined_shape, axis, "joined")),
        name="joined",
    )
    g.save(joined)
    expected = np.concatenate(values, axis=axis)
    for device in (list(range(8)), [0, 1, 2]):
        with es.compileGraph(g, device=device, client=daemon_client) as cg:
            for tensor, value in zip(tensors, values):
                cg.load(tensor, value)
            cg.execute()
            out = cg.offload(joined)
            assert out.shape == expected.shape
            np.testing.assert_array_equal(out, expected)  # a copy: bit for bit
            assert "joined" in cg.explain()


def test_concat_then_matmul(daemon_client):
    # [tokens, d] of two halves joined along d, then projected: the concat's token dimension is
    # split with the matmul's.
    g = es.createGraph()
    lo = g.insertTensor(es.tensorDesc([("tokens", 16), ("lo", 4)]), name="lo")
    hi = g.insertTensor(es.tensorDesc([("tokens", 16), ("hi", 12)]), name="hi")
    w = g.insertTensor(es.tensorDesc([("d", 16), ("e", 8)]), name="w")
    x = g.op(
        "concat",
        [lo, hi],
        {"axis": 1, "dim_name": "d"},
        output=es.tensorDesc([("tokens", 16), ("d", 16)]),
        name="x",
    )
    y = g.matmul(x, w, name="y")
    g.save(y)
    rng = np.random.default_rng(5)
    lo_v = rng.standard_normal((16, 4), dtype=np.float32)
    hi_v = rng.standard_normal((16, 12), dtype=np.float32)
    w_v = rng.standard_normal((16, 8), dtype=np.float32)
    with es.compileGraph(g, device=4, client=daemon_client, weights=[w]) as cg:
        cg.load(w, w_v)
        cg.load(lo, lo_v)
        cg.load(hi, hi_v)
        cg.execute()
        expected = np.concatenate([lo_v, hi_v], axis=1).astype(np.float64) @ w_v
        np.testing.assert_allclose(cg.offload(y), expected, rtol=1e-4, atol=1e-4)


def test_concat_in_f16(daemon_client):
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([("n", 3), ("d", 2)], "f16"), name="a")
    b = g.insertTensor(es.tensorDesc([("m", 5), ("d", 2)], "f16"), name="b")
    c = g.op("concat", [a, b], {"axis": 0}, output=es.tensorDesc([("n", 8), ("d", 2)], "f16"))
    g.save(c)
    a_v = np.arange(6, dtype=np.float16).reshape(3, 2)
    b_v = -np.arange(10, dtype=np.float16).reshape(5, 2)
    with es.compileGraph(g, device=2, client=daemon_client) as cg:
        cg.load(a, a_v)
        cg.load(b, b_v)
        cg.execute()
        out = cg.offload(c)
        assert out.dtype == np.float16
        np.testing.assert_array_equal(out, np.concatenate([a_v, b_v]))


def register_error(daemon_client, inputs, attributes, output):
    """The server's INVALID_ARGUMENT details for a graph of one concat of `inputs` (name,
    tensorDesc pairs)."""
    g = es.createGraph()
    tensors = [g.insertTensor(desc, name=name) for name, desc in inputs]
    g.save(g.op("concat", tensors, attributes, output=output, name="c"))
    with pytest.raises(es.InvalidArgumentError) as info:
        es.compileGraph(g, client=daemon_client)
    return info.value.details


def test_mismatched_dimension_names_the_input_dimension_and_sizes(daemon_client):
    details = register_error(
        daemon_client,
        [("a", es.tensorDesc([("t", 4), ("d", 3)])), ("b", es.tensorDesc([("t", 5), ("e", 2)]))],
        {"axis": 1},
        es.tensorDesc([("t", 4), ("d", 5)]),
    )
    assert "node 'c'" in details, details
    assert "input 1" in details, details
    assert "dimension 0 ('t') has size 5 where input 0's ('t') has 4" in details, details


def test_axis_out_of_range_and_missing_axis(daemon_client):
    inputs = [
        ("a", es.tensorDesc([("t", 4), ("d", 3)])),
        ("b", es.tensorDesc([("t", 4), ("d", 3)])),
    ]
    output = es.tensorDesc([("t", 4), ("d", 6)])
    details = register_error(daemon_client, inputs, {"axis": 2}, output)
    assert "concat axis 2 is out of range for rank 2" in details, details
    details = register_error(daemon_client, inputs, {}, output)
    assert "missing attribute 'axis'" in details, details
