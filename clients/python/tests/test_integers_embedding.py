"""The client's integer element types (i32, i64), the embedding operator's typed helper and
rope's scaling attributes (issue 36): names, wire bytes, checks and the GraphDef they make."""

import numpy as np
import pytest

import einsummable as es
from einsummable import _stubs
from einsummable import dtypes as dt
from einsummable.graph import OPERATOR_KINDS


def test_integer_dtype_names_and_numpy_types():
    assert dt.normalize("i32") == "i32" and dt.normalize("int32") == "i32"
    assert dt.normalize("I64") == "i64" and dt.normalize("int64") == "i64"
    assert dt.normalize(np.int32) == "i32" and dt.normalize(np.dtype("<i8")) == "i64"
    assert dt.enum_name("i32") == "I32" and dt.from_enum_name("I64") == "i64"
    assert dt.itemsize("i32") == 4 and dt.itemsize("i64") == 8
    assert dt.is_integer("int64") and not dt.is_integer("bf16")
    assert dt.numpy_dtype("i32") == np.int32 and dt.numpy_dtype("bf16") == np.float32
    for other in (np.int8, np.uint32, np.int16, "u8"):
        with pytest.raises(es.GraphError, match="unknown dtype"):
            dt.normalize(other)


def test_integers_on_the_wire_are_little_endian_twos_complement():
    ids = np.array([0, 1, -1, 2**31 - 1, -(2**31)], dtype=np.int64)
    data = dt.to_bytes(ids, "i32")
    assert data == b"".join(int(v).to_bytes(4, "little", signed=True) for v in ids)
    back = dt.from_bytes(data, "i32", (5,))
    assert back.dtype == np.int32 and back.tolist() == ids.tolist()
    big = np.array([2**40, -3], dtype=np.int64)
    data = dt.to_bytes(big, "i64")
    assert data[:8] == (2**40).to_bytes(8, "little") and len(data) == 16
    assert dt.from_bytes(data, "i64", (2,)).tolist() == [2**40, -3]
    # A python list of ints is fine; floats are never rounded into ids, and values that do not
    # fit are refused rather than wrapped.
    assert dt.to_bytes([3, 4], "i32") == dt.to_bytes(np.array([3, 4], np.int32), "i32")
    with pytest.raises(TypeError, match="cannot send an array of float32 as i32"):
        dt.to_bytes(np.array([1.0], np.float32), "i32")
    with pytest.raises(ValueError, match=r"value 2147483648 does not fit i32"):
        dt.to_bytes(np.array([2**31], np.int64), "i32")
    with pytest.raises(ValueError, match=r"value -2147483649 does not fit i32"):
        dt.to_bytes(np.array([-(2**31) - 1], np.int64), "i32")
    with pytest.raises(ValueError, match="needs 8"):
        dt.from_bytes(b"\0" * 4, "i32", (2,))


def _table_and_ids(dtype="f32", ids_dtype="i32"):
    g = es.createGraph()
    table = g.insertTensor(es.tensorDesc([("vocab", 128), ("d_model", 32)], dtype), name="table")
    ids = g.insertTensor(es.tensorDesc(["tokens"], ids_dtype), name="ids")
    return g, table, ids


@pytest.mark.parametrize("ids_dtype", ["i32", "i64"])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_embedding_output_takes_ids_rows_and_table_columns(dtype, ids_dtype):
    g, table, ids = _table_and_ids(dtype, ids_dtype)
    y = g.embedding(table, ids, name="x")
    assert y.dtype == dtype
    assert [(d.name, d.size) for d in y.dims] == [("tokens", "tokens"), ("d_model", 32)]
    g.save(y)
    graph_def = g.to_graphdef()
    [node] = graph_def.operators
    assert (node.kind, list(node.inputs), dict(node.attributes)) == (
        "embedding",
        ["table", "ids"],
        {},
    )
    ids_desc = next(i for i in graph_def.inputs if i.name == "ids")
    assert ids_desc.dtype == _stubs.modules().graph_pb2.DType.Value(ids_dtype.upper())
    # The generic path gets the same checks and shape rule.
    z = g.op("embedding", [table, ids], name="z")
    assert z.dims == y.dims and "embedding" in OPERATOR_KINDS


def test_embedding_refuses_what_it_cannot_read():
    g, table, ids = _table_and_ids()
    floats = g.insertTensor(es.tensorDesc(["tokens"]), name="floats")
    with pytest.raises(es.GraphError, match=r"input 1 \(floats f32.*ids must be i32 or i64"):
        g.embedding(table, floats)
    g2, table2, ids2 = _table_and_ids(ids_dtype="i32")
    with pytest.raises(es.GraphError, match=r"input 0 \(ids i32.*\[vocab, d\]"):
        g2.embedding(ids2, ids2)
    g3, _, ids3 = _table_and_ids()
    vec = g3.insertTensor(es.tensorDesc([("v", 4)], "i32"), name="vec")
    mat = g3.insertTensor(es.tensorDesc([("v", 4), ("d", 2)], "i32"), name="itable")
    with pytest.raises(es.GraphError, match="must have a float dtype"):
        g3.embedding(mat, ids3)
    ids2d = g3.insertTensor(es.tensorDesc([("a", 2), ("b", 2)], "i32"), name="ids2d")
    table3 = g3.insertTensor(es.tensorDesc([("v", 4), ("d", 2)]), name="t3")
    with pytest.raises(es.GraphError, match=r"ids must be \[tokens\]"):
        g3.embedding(table3, ids2d)
    del vec


def test_arithmetic_refuses_integer_tensors():
    g, table, ids = _table_and_ids()
    for call in (
        lambda: g.unary(ids, "neg"),
        lambda: g.binary(ids, ids, "add"),
        lambda: g.softmax(ids),
        lambda: g.einsum("t->t", ids),
    ):
        with pytest.raises(es.GraphError, match="integer tensor; only embedding reads integers"):
            call()


def _heads():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("heads", 4), ("d_head", 8)]), name="x")
    return g, x


def _attrs(g, name):
    node = next(op for op in g.to_graphdef().operators if op.name == name)
    return {
        key: getattr(value, value.WhichOneof("value")) for key, value in node.attributes.items()
    }


def test_rope_scaling_attributes():
    g, x = _heads()
    g.save(
        g.rope(x, theta=500000.0, name="plain"),
        g.rope(x, scaling="linear", scaling_factor=2, name="linear"),
        g.rope(
            x,
            theta=500000.0,
            scaling="llama3",
            scaling_factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position=8192,
            name="llama3",
        ),
    )
    assert _attrs(g, "plain") == {"theta": 500000.0}  # no scaling: the attributes of before
    assert _attrs(g, "linear") == {"theta": 10000.0, "scaling": "linear", "scaling_factor": 2.0}
    assert _attrs(g, "llama3") == {
        "theta": 500000.0,
        "scaling": "llama3",
        "scaling_factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position": 8192,
    }
    # g.op reaches the same helper with the attributes as keywords.
    y = g.op("rope", [x], {"scaling": "linear", "scaling_factor": 4.0}, name="generic")
    assert y.dims == x.dims


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scaling": "yarn"}, "rope scaling 'yarn' is not one of none, linear, llama3"),
        ({"scaling": "linear"}, "rope scaling 'linear' needs scaling_factor"),
        ({"scaling_factor": 2.0}, "rope scaling_factor given, but scaling 'none' does not use"),
        (
            {"scaling": "linear", "scaling_factor": 2.0, "low_freq_factor": 1.0},
            "low_freq_factor given, but scaling 'linear'",
        ),
        ({"scaling": "linear", "scaling_factor": 0.0}, "scaling_factor must be > 0"),
        (
            {
                "scaling": "llama3",
                "scaling_factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
            },
            "needs original_max_position",
        ),
        (
            {
                "scaling": "llama3",
                "scaling_factor": 8.0,
                "low_freq_factor": 4.0,
                "high_freq_factor": 4.0,
                "original_max_position": 8192,
            },
            r"high_freq_factor \(4.0\) must be above low_freq_factor \(4.0\)",
        ),
        (
            {
                "scaling": "llama3",
                "scaling_factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position": 0,
            },
            "original_max_position must be > 0",
        ),
    ],
)
def test_rope_scaling_is_checked(kwargs, message):
    g, x = _heads()
    with pytest.raises(es.GraphError, match=message):
        g.rope(x, **kwargs)
