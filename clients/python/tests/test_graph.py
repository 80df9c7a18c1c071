"""Graph building without a server: shapes, names, attributes, GraphDef, client-side errors."""

import pytest

import einsummable as es
from einsummable.graph import Attr, Dim


def ffn_graph(d_model=1024, d_ff=4096):
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", d_model)], "f32"), name="x")
    w1 = g.insertTensor(es.tensorDesc([("d_model", d_model), ("d_ff", d_ff)], "f32"), name="w1")
    w2 = g.insertTensor(es.tensorDesc([("d_ff", d_ff), ("d_model", d_model)], "f32"), name="w2")
    return g, x, w1, w2


def attrs(graph_def, op_name):
    op = next(o for o in graph_def.operators if o.name == op_name)
    return {k: getattr(v, v.WhichOneof("value")) for k, v in op.attributes.items()}


def test_paper_ffn_shapes_and_names():
    g, x, w1, w2 = ffn_graph()
    h = g.matmul(x, w1)
    a = g.unary(h, "relu", 0.0)
    y = g.matmul(a, w2)
    g.save(y)
    assert h.dims == (Dim("tokens", "tokens"), Dim("d_ff", 4096))
    assert y.shape == ("tokens", 1024)
    assert [h.name, a.name, y.name] == ["matmul_0", "relu_0", "matmul_1"]
    assert g.symbols() == ("tokens",)
    assert repr(y) == "Tensor('matmul_1', f32[tokens, d_model=1024])"


def test_graphdef_matches_the_documented_ffn():
    g, x, w1, w2 = ffn_graph()
    y = g.matmul(g.unary(g.matmul(x, w1, name="h"), "relu", 0.0, name="a"), w2, name="y")
    g.save(y)
    gd = g.to_graphdef()
    assert [t.name for t in gd.inputs] == ["x", "w1", "w2"]
    assert gd.inputs[0].dims[0].symbol == "tokens" and gd.inputs[0].dims[0].name == "tokens"
    assert gd.inputs[0].dims[1].fixed == 1024 and gd.inputs[0].dims[1].name == "d_model"
    assert gd.inputs[0].dtype == 3  # F32
    assert [(o.name, o.kind, list(o.inputs)) for o in gd.operators] == [
        ("h", "einsum", ["x", "w1"]),
        ("a", "einsum", ["h"]),
        ("y", "einsum", ["a", "w2"]),
    ]
    assert attrs(gd, "h") == {"equation": "ij,jk->ik"}
    assert attrs(gd, "a") == {"equation": "ij->ij", "join": "relu"}
    assert list(gd.saved) == ["y"]
    assert 'string_value: "ij,jk->ik"' in g.to_text()
    assert '"saved": [\n    "y"\n  ]' in g.to_json()


def test_generated_names_are_unique_and_skip_user_names():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([4, 4]))
    assert x.name == "input_0"
    user = g.unary(x, "exp", name="exp_0")
    auto = g.unary(user, "exp")
    assert auto.name == "exp_1"
    with pytest.raises(es.GraphError, match="'exp_0': a tensor with this name already exists"):
        g.unary(x, "exp", name="exp_0")
    with pytest.raises(es.GraphError, match="already exists"):
        g.insertTensor(es.tensorDesc([4]), name="input_0")


def test_default_dimension_names():
    g = es.createGraph()
    w = g.insertTensor(es.tensorDesc([3, "n"], "f16"), name="w")
    assert w.dims == (Dim("w.0", 3), Dim("n", "n"))
    v = g.insertTensor(es.tensorDesc([3, 5], "bf16", dim_names=["rows", "cols"]), name="v")
    assert [d.name for d in v.dims] == ["rows", "cols"]
    assert v.dtype == "bf16"


def test_camel_and_snake_case_aliases():
    assert es.create_graph is es.createGraph
    assert es.tensor_desc is es.tensorDesc
    assert es.compile_graph is es.compileGraph
    assert es.Graph.insert_tensor is es.Graph.insertTensor
    assert es.Graph.splitHeads is es.Graph.split_heads


def test_einsum_attributes_and_broadcast():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d", 8)]), name="x")
    b = g.insertTensor(es.tensorDesc([("d", 8)]), name="b")
    y = g.einsum("ij,j->ij", x, b, join="add", name="y")
    m = g.einsum("ij->i", y, agg="max", name="m")
    s = g.unary(m, "scale", 0.5, name="s")
    g.save(s)
    gd = g.to_graphdef()
    assert attrs(gd, "y") == {"equation": "ij,j->ij", "join": "add"}
    assert attrs(gd, "m") == {"equation": "ij->i", "agg": "max"}
    assert attrs(gd, "s") == {"equation": "i->i", "join": "scale", "constant": 0.5}
    assert m.dims == (Dim("tokens", "tokens"),)


def test_binary_broadcasts_trailing_dims():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([("t", 4), ("d", 8)]), name="x")
    b = g.insertTensor(es.tensorDesc([("d", 8)]), name="b")
    y = g.binary(x, b, "add")
    z = g.binary(b, x, "sub")
    assert y.dims == x.dims and z.dims == x.dims
    gd = (g.save(z), g.to_graphdef())[1]
    assert attrs(gd, z.name)["equation"] == "j,ij->ij"
    with pytest.raises(es.GraphError, match=r"shape mismatch on index 'j'.*has size 4, expected 8"):
        g.binary(x, g.insertTensor(es.tensorDesc([4])), "mul")
    assert (x + b).name.startswith("add_")
    with pytest.raises(es.GraphError, match="unknown binary function 'pow'"):
        g.binary(x, b, "pow")


def test_matmul_batched_and_shared_weight():
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([("b", 2), ("m", 3), ("k", 5)]), name="a")
    w = g.insertTensor(es.tensorDesc([("k", 5), ("n", 7)]), name="w")
    bw = g.insertTensor(es.tensorDesc([("b", 2), ("k", 5), ("n", 7)]), name="bw")
    assert g.matmul(a, w).shape == (2, 3, 7)
    assert g.matmul(a, bw).shape == (2, 3, 7)
    assert (a @ w).shape == (2, 3, 7)
    g.save(g.matmul(a, w, name="p"))
    assert attrs(g.to_graphdef(), "p")["equation"] == "aij,jk->aik"


def test_matmul_shape_mismatch_names_node_and_dimensions():
    g, x, w1, w2 = ffn_graph()
    with pytest.raises(es.GraphError) as info:
        g.matmul(x, w2, name="bad")
    assert str(info.value) == (
        "node 'bad' (einsum, inputs x, w2): shape mismatch on index 'j': input 1 dimension 0 "
        "('d_ff') has size 4096, expected 1024 as at input 0 dimension 1 ('d_model')"
    )
    # Nothing was added.
    assert [op.name for op in g.operators] == []
    with pytest.raises(es.GraphError, match="rank >= 2"):
        g.matmul(g.insertTensor(es.tensorDesc([3])), w1)


def test_einsum_errors():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([2, 3]), name="x")
    cases = [
        (("ij,jk", x), "must have the form 'inputs->output'"),
        (("ij->ij", x, x), "has 1 input terms for 2 inputs"),
        (
            ("ijk->i", x),
            r"input 0 has rank 2 \(x f32\[x.0=2, x.1=3\]\) but its equation term "
            "'ijk' has 3 indices",
        ),
        (("ii->i", x), "index 'i' repeats in input 0 term 'ii'"),
        (("i1->i", x), "has '1' at position 1"),
        (("ij->k", x), "output index 'k' appears in no input"),
    ]
    for args, message in cases:
        with pytest.raises(es.GraphError, match=message):
            g.einsum(*args)
    with pytest.raises(es.GraphError, match="join 'relu' takes 1 operand"):
        g.einsum("ij,ij->ij", x, x, join="relu")
    with pytest.raises(es.GraphError, match="cannot combine 3 inputs; only mul"):
        g.einsum("ij,ij,ij->ij", x, x, x, join="add")
    with pytest.raises(es.GraphError, match="unknown aggregation 'mean'"):
        g.einsum("ij->i", x, agg="mean")
    with pytest.raises(es.GraphError, match="unknown scalar op 'cube'"):
        g.einsum("ij->ij", x, join="cube")
    with pytest.raises(es.GraphError, match="unknown unary function 'cube'"):
        g.unary(x, "cube")
    h = g.insertTensor(es.tensorDesc([2, 3], "f16"), name="h")
    with pytest.raises(es.GraphError, match="dtype mismatch: input 1 is f16, input 0 is f32"):
        g.binary(x, h, "add")


def test_symbols_are_checked_by_the_server_not_here():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", 4]), name="x")
    y = g.insertTensor(es.tensorDesc(["seq", 4]), name="y")
    z = g.insertTensor(es.tensorDesc([16, 4]), name="z")
    assert g.binary(x, y, "add").shape == ("tokens", 4)
    assert g.binary(x, z, "add").shape == ("tokens", 4)
    assert g.symbols() == ("tokens", "seq")


def test_softmax_and_norms():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d", 8)]), name="x")
    w = g.insertTensor(es.tensorDesc([("d", 8)]), name="w")
    beta = g.insertTensor(es.tensorDesc([("d", 8)]), name="beta")
    s = g.softmax(x, axis=0, name="s")
    r = g.rmsnorm(x, w, eps=1e-6, name="r")
    ln = g.layernorm(x, w, beta, name="ln")
    ln2 = g.layernorm(x, w, name="ln2")
    g.save(s, r, ln, ln2)
    gd = g.to_graphdef()
    assert attrs(gd, "s") == {"axis": 0}
    assert attrs(gd, "r") == {"eps": 1e-6}
    assert list(next(o for o in gd.operators if o.name == "ln").inputs) == ["x", "w", "beta"]
    assert list(next(o for o in gd.operators if o.name == "ln2").inputs) == ["x", "w"]
    assert r.dims == x.dims
    with pytest.raises(es.GraphError, match="softmax axis 2 is out of range for rank 2"):
        g.softmax(x, axis=2)
    bad = g.insertTensor(es.tensorDesc([("e", 7)]), name="bad")
    with pytest.raises(es.GraphError) as info:
        g.rmsnorm(x, bad, name="rn")
    assert str(info.value) == (
        "node 'rn' (rmsnorm, inputs x, bad): input 1 (bad f32[e=7]): shape mismatch: expected a "
        "vector of 8 (the normalised dimension 'd' of input 0)"
    )
    with pytest.raises(es.GraphError, match="'eps' must be >= 0"):
        g.rmsnorm(x, w, eps=-1)


def test_heads_rope_attention():
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([("tokens", 16), ("q_out", 64)]), name="q")
    k = g.insertTensor(es.tensorDesc([("tokens", 16), ("kv_out", 32)]), name="k")
    qh = g.split_heads(q, 4, heads_name="heads_q", name="qh")
    kh = g.split_heads(k, 2, heads_name="heads_kv", name="kh")
    assert qh.dims == (Dim("tokens", 16), Dim("heads_q", 4), Dim("d_head", 16))
    qr = g.rope(qh, theta=500000, sequence_ends=[5, 16], name="qr")
    a = g.attention(qr, kh, kh, causal=True, sequence_ends=[5, 16], scale=0.25, name="a")
    assert a.dims == (Dim("tokens", 16), Dim("heads_q", 4), Dim("d_head", 16))
    m = g.merge_heads(a, name="m")
    assert m.dims == (Dim("tokens", 16), Dim("heads_q*d_head", 64))
    m2 = g.merge_heads(a, dim_name="q_out", name="m2")
    assert m2.dims[1] == Dim("q_out", 64)
    g.save(m, m2)
    gd = g.to_graphdef()
    assert attrs(gd, "qh") == {"heads": 4, "heads_name": "heads_q", "head_dim_name": "d_head"}
    qr_attrs = attrs(gd, "qr")
    assert qr_attrs["theta"] == 500000.0 and list(qr_attrs["sequence_ends"].values) == [5, 16]
    a_attrs = attrs(gd, "a")
    assert a_attrs["causal"] is True and a_attrs["scale"] == 0.25
    assert attrs(gd, "m") == {} and attrs(gd, "m2") == {"dim_name": "q_out"}


def test_decode_attention_key_ends():
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([("tokens", 3), ("heads_q", 4), ("d", 8)]), name="q")
    k = g.insertTensor(es.tensorDesc([("keys", 50), ("heads_kv", 2), ("d", 8)]), name="k")
    a = g.attention(q, k, k, causal=True, sequence_ends=[1, 3], key_ends=[20, 50], name="a")
    assert a.dims == (Dim("tokens", 3), Dim("heads_q", 4), Dim("d", 8))
    g.save(a)
    assert list(attrs(g.to_graphdef(), "a")["key_ends"].values) == [20, 50]
    with pytest.raises(es.GraphError, match=r"is 50, q's sequence is 3 \(give key_ends"):
        g.attention(q, k, k)
    with pytest.raises(es.GraphError, match="key_ends has 1 entries and sequence_ends 2"):
        g.attention(q, k, k, sequence_ends=[1, 3], key_ends=[50])
    with pytest.raises(es.GraphError, match="key_ends end at 40, not at the number of keys 50"):
        g.attention(q, k, k, key_ends=[40])
    with pytest.raises(es.GraphError, match=r"key_ends\[1\] = 10 is not increasing"):
        g.attention(q, k, k, sequence_ends=[1, 3], key_ends=[20, 10])
    with pytest.raises(es.GraphError, match="sequence 1 has 2 queries and only 1 keys"):
        g.attention(q, k, k, causal=True, sequence_ends=[1, 3], key_ends=[49, 50])
    v = g.insertTensor(es.tensorDesc([("cache", 40), ("heads_kv", 2), ("d", 8)]), name="v")
    with pytest.raises(es.GraphError, match=r"dimension 0 \('cache'\) is 40, k's keys are 50"):
        g.attention(q, k, v, key_ends=[50])


def test_rope_positions_input():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([("tokens", 4), ("h", 2), ("d", 8)]), name="x")
    p = g.insertTensor(es.tensorDesc([("tokens", 4)], "i64"), name="p")
    r = g.rope(x, positions=p, name="r")
    g.save(r)
    gd = g.to_graphdef()
    op = next(o for o in gd.operators if o.name == "r")
    assert list(op.inputs) == ["x", "p"] and "sequence_ends" not in op.attributes
    with pytest.raises(es.GraphError, match="not both"):
        g.rope(x, positions=p, sequence_ends=[4])
    f = g.insertTensor(es.tensorDesc([("tokens", 4)]), name="f")
    with pytest.raises(es.GraphError, match="rope's positions are i32 or i64"):
        g.rope(x, positions=f)
    short = g.insertTensor(es.tensorDesc([("t", 3)], "i32"), name="short")
    with pytest.raises(es.GraphError, match="3 positions for x's 4 tokens"):
        g.rope(x, positions=short)


def test_write_rows():
    g = es.createGraph()
    state = g.insertTensor(es.tensorDesc([("cache", 10), ("d", 4)]), name="state")
    rows = g.insertTensor(es.tensorDesc([("new", 2), ("d", 4)]), name="rows")
    slots = g.insertTensor(es.tensorDesc([("new", 2)], "i32"), name="slots")
    out = g.write_rows(state, rows, slots, name="out")
    assert out.dims == state.dims and out.dtype == "f32"
    wide = g.insertTensor(es.tensorDesc([("new", 2), ("e", 5)]), name="wide")
    with pytest.raises(es.GraphError, match=r"dimension 1 \('e'\) is 5, the state's is 4"):
        g.write_rows(state, wide, slots)
    with pytest.raises(es.GraphError, match=r"slots are i32 or i64 \[n\], one per row \(2\)"):
        g.write_rows(state, rows, g.insertTensor(es.tensorDesc([("new", 3)], "i64")))


def test_heads_rope_attention_errors():
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([("tokens", 16), ("q_out", 48)]), name="q")
    with pytest.raises(es.GraphError, match=r"dimension 'q_out' \(48\) does not split into 5"):
        g.split_heads(q, 5)
    qh = g.split_heads(q, 3, heads_name="heads_q")
    kh = g.split_heads(g.insertTensor(es.tensorDesc([("tokens", 16), 32])), 2)
    with pytest.raises(es.GraphError, match="rope needs an even head dimension, 'd_head' is 3"):
        g.rope(g.split_heads(q, 16))
    with pytest.raises(es.GraphError, match="sequence_ends end at 12, not at the sequence length"):
        g.rope(qh, sequence_ends=[5, 12])
    with pytest.raises(es.GraphError, match=r"sequence_ends\[1\] = 5 is not increasing"):
        g.rope(qh, sequence_ends=[5, 5, 16])
    with pytest.raises(
        es.GraphError,
        match=r"heads_q \('heads_q' = 3\) is not a multiple of heads_kv \('heads' = 2\)",
    ):
        g.attention(qh, kh, kh)
    v = g.insertTensor(es.tensorDesc([("seq", 8), ("h", 2), ("d", 16)]), name="v")
    with pytest.raises(es.GraphError, match=r"dimension 0 \('seq'\) is 8, q's sequence is 16"):
        g.attention(qh, v, v)
    with pytest.raises(es.GraphError, match="must be \\[sequence, heads, head_dim\\]"):
        g.attention(q, q, q)
    symbolic = g.insertTensor(es.tensorDesc(["tokens", "width"]), name="sym")
    with pytest.raises(es.GraphError, match="must have a fixed size"):
        g.split_heads(symbolic, 2)


def test_bad_descs_and_foreign_tensors():
    with pytest.raises(es.GraphError, match="sizes must be positive"):
        es.tensorDesc([0, 3])
    with pytest.raises(es.GraphError, match="unknown dtype 'int8'"):
        es.tensorDesc([3], "int8")
    with pytest.raises(es.GraphError, match="neither an int nor a symbol"):
        es.tensorDesc([3.5])
    with pytest.raises(es.GraphError, match="dim_names has 1 names for a shape of rank 2"):
        es.tensorDesc([3, 4], dim_names=["a"])
    g1, g2 = es.createGraph(), es.createGraph()
    x = g1.insertTensor(es.tensorDesc([3]))
    with pytest.raises(es.GraphError, match="belongs to another graph"):
        g2.unary(x, "relu")
    with pytest.raises(es.GraphError, match="no tensor named 'nope'"):
        g1.save("nope")


def test_graph_without_saved_tensors():
    g = es.createGraph()
    g.insertTensor(es.tensorDesc([3]))
    with pytest.raises(es.GraphError, match="graph saves no tensor"):
        g.to_graphdef()


def test_every_dtype_reaches_the_graphdef():
    g = es.createGraph()
    for dtype, enum in [("f16", 1), ("bf16", 2), ("f32", 3), ("f64", 4), ("float32", 3)]:
        t = g.insertTensor(es.tensorDesc([2], dtype))
        g.save(t)
        assert g.to_graphdef().inputs[-1].dtype == enum


def test_op_is_the_path_of_every_typed_helper():
    # g.op with a typed kind applies the helper's checks and shape rule and writes the same node.
    def build(generic):
        g = es.createGraph()
        x = g.insertTensor(es.tensorDesc([("t", 4), ("hd", 8)]), name="x")
        w = g.insertTensor(es.tensorDesc([("hd", 8)]), name="w")
        if generic:
            n = g.op("rmsnorm", [x, w], {"eps": 1e-6}, name="n")
            h = g.op("split_heads", [n], {"heads": 2}, name="h")
            r = g.op("rope", [h], {"theta": 500000, "sequence_ends": [1, 4]}, name="r")
            s = g.op("softmax", ["r"], {"axis": 0}, name="s")
            e = g.op("einsum", [s], {"equation": "ijk->ik", "agg": "max"}, name="e")
        else:
            n = g.rmsnorm(x, w, eps=1e-6, name="n")
            h = g.split_heads(n, 2, name="h")
            r = g.rope(h, theta=500000, sequence_ends=[1, 4], name="r")
            s = g.softmax(r, axis=0, name="s")
            e = g.einsum("ijk->ik", s, agg="max", name="e")
        g.save(e)
        return g, e

    generic, e = build(True)
    assert e.dims == (Dim("t", 4), Dim("d_head", 4))
    assert [op.kind for op in generic.operators] == [
        "rmsnorm",
        "split_heads",
        "rope",
        "softmax",
        "einsum",
    ]
    assert generic.to_graphdef() == build(False)[0].to_graphdef()


def test_op_of_a_typed_kind_reports_the_helpers_errors():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([("t", 4), ("d", 8)]), name="x")
    with pytest.raises(es.GraphError, match="softmax axis 2 is out of range for rank 2"):
        g.op("softmax", [x], {"axis": 2}, name="s")
    with pytest.raises(es.GraphError, match=r"softmax with 1 inputs and attributes \['dim'\]"):
        g.op("softmax", [x], {"dim": 0})
    with pytest.raises(es.GraphError, match="einsum needs an 'equation' attribute"):
        g.op("einsum", [x], {"join": "relu"})
    assert g.operators == ()


def test_op_of_a_kind_without_a_helper_takes_its_output_type():
    # A kind the client has no helper for goes through the same path: attributes typed by their
    # Python values, the output type given, the node written as any other.
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([("t", 3), ("d", 8)]), name="a")
    b = g.insertTensor(es.tensorDesc([("t", 5), ("d", 8)]), name="b")
    attributes = {
        "axis": 0,
        "scale": 0.5,
        "flag": True,
        "mode": "pad",
        "sizes": [3, 5],
        "exact": Attr("double", 2),
    }
    c = g.op("concat", [a, b], attributes, output=es.tensorDesc([("t", 8), ("d", 8)]))
    assert c.name == "concat_0" and c.producer == "concat"
    assert c.dims == (Dim("t", 8), Dim("d", 8)) and c.dtype == "f32"
    y = g.matmul(c, g.insertTensor(es.tensorDesc([("d", 8), ("e", 2)]), name="w"), name="y")
    assert y.shape == (8, 2)
    g.save(y)
    gd = g.to_graphdef()
    first = gd.operators[0]
    assert (first.name, first.kind, list(first.inputs)) == ("concat_0", "concat", ["a", "b"])
    node = gd.operators[0].attributes
    assert {k: v.WhichOneof("value") for k, v in node.items()} == {
        "axis": "int_value",
        "scale": "double_value",
        "flag": "bool_value",
        "mode": "string_value",
        "sizes": "int_list",
        "exact": "double_value",
    }
    assert list(node["sizes"].int_list.values) == [3, 5] and node["exact"].double_value == 2.0
    unnamed = g.op("pad", [a], output=es.tensorDesc([4, ("d", 8)], "bf16"), name="p")
    assert unnamed.dims == (Dim("p.0", 4), Dim("d", 8)) and unnamed.dtype == "bf16"


def test_op_of_a_kind_without_a_helper_needs_its_output_type():
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([3]), name="a")
    with pytest.raises(es.GraphError, match="operator kind 'concat' has no typed helper"):
        g.op("concat", [a], {"axis": 0})
    with pytest.raises(es.GraphError, match="output must be a tensorDesc"):
        g.op("concat", [a], output=[3])
    with pytest.raises(es.GraphError, match=r"attribute 'axis': 0\.5j is none of"):
        g.op("concat", [a], {"axis": 0.5j}, output=es.tensorDesc([3]))
    with pytest.raises(es.GraphError, match="non-empty string"):
        g.op("", [a], output=es.tensorDesc([3]))
    with pytest.raises(es.GraphError, match="concat input 0: no tensor named 'b'"):
        g.op("concat", ["b"], output=es.tensorDesc([3]))
    assert g.operators == ()
