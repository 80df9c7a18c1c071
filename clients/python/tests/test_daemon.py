"""Integration: the client against a real einsummabled (the ``daemon`` fixture, conftest.py).

Skipped with a message when the daemon binary is absent ($EINSUMMABLE_DAEMON, default
<repository>/build/bin/einsummabled). One daemon with 8 CPU virtual devices serves the module;
sizes are small so the whole file runs in well under a minute.
"""

import io
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import Daemon, load_example

import einsummable as es

pytestmark = pytest.mark.integration


def test_server_info(daemon_client):
    info = daemon_client.server_info()
    assert info.devices == 8
    assert info.backend in ("cpu", "cuda")
    assert info.version
    # The default CPU topology gives the devices no capacity.
    assert info.device_memory_capacity_bytes == ()
    # The CPU backend names its gemm library and the kernel family it runs (docs/runtime.md).
    if info.backend == "cpu":
        assert info.kernels.startswith("oneDNN "), info.kernels
        assert " kernels (CPU: " in info.kernels, info.kernels


def test_ffn_example_at_two_token_counts(daemon):
    ffn = load_example("ffn")
    out = io.StringIO()
    ok = ffn.run(daemon.address, devices=4, tokens=(64, 96), d_model=64, d_ff=256, out=out)
    assert ok, out.getvalue()
    text = out.getvalue()
    assert text.count(": ok") == 2, text
    assert "h" in text and "y" in text  # the plan names the operators


def test_ffn_example_naive_on_eight_devices(daemon):
    ffn = load_example("ffn")
    assert (
        ffn.main(
            [
                "--server",
                daemon.address,
                "--devices",
                "8",
                "--tokens",
                "32",
                "--d-model",
                "32",
                "--d-ff",
                "128",
                "--schedule",
                "naive",
                "--no-explain",
            ]
        )
        == 0
    )


def test_llama_block_example(daemon):
    llama = load_example("llama_block")
    config = llama.Config(
        d_model=64, heads_q=8, heads_kv=4, d_head=8, d_ff=128, sequences=[5, 11, 16]
    )
    out = io.StringIO()
    ok = llama.run(daemon.address, devices=8, config=config, out=out)
    assert ok, out.getvalue()


def test_matrix_chain_b_end_to_end(daemon_client):
    """Matrix chain B of docs/workloads.md, (M1 M2)((M3 M4) M5), at 1/64 of its sizes (ends 144,
    interior alternating 320 and 80), every matrix an input: the daemon splits it over 8 and
    over 3 devices and both results match NumPy."""
    dims = [144, 320, 80, 320, 80, 144]
    g = es.createGraph()
    m = [
        g.insertTensor(
            es.tensorDesc([(f"b{i}", dims[i]), (f"b{i + 1}", dims[i + 1])]), name=f"m{i + 1}"
        )
        for i in range(5)
    ]
    left = g.matmul(m[0], m[1], name="m12")
    right = g.matmul(g.matmul(m[2], m[3], name="m34"), m[4], name="m345")
    out = g.matmul(left, right, name="chain")
    g.save(out)
    rng = np.random.default_rng(64)
    values = [rng.standard_normal((dims[i], dims[i + 1]), dtype=np.float32) / 8 for i in range(5)]
    expected = values[0].astype(np.float64)
    for value in values[1:]:
        expected = expected @ value
    for device in (list(range(8)), [0, 1, 2]):
        with es.compileGraph(g, device=device, client=daemon_client) as cg:
            for tensor, value in zip(m, values):
                cg.load(tensor, value)
            cg.execute()
            np.testing.assert_allclose(cg.offload(out), expected, rtol=1e-4, atol=1e-4)
            assert "chain" in cg.explain()


def ffn_graph(d_model=16, d_ff=32):
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", d_model)]), name="x")
    w = g.insertTensor(es.tensorDesc([("d_model", d_model), ("d_ff", d_ff)]), name="w")
    y = g.unary(g.matmul(x, w, name="h"), "gelu", name="y")
    g.save(y)
    return g, x, w, y


def test_symbolic_shapes_compile_once_per_size(daemon_client):
    g, x, w, y = ffn_graph()
    rng = np.random.default_rng(3)
    w_value = rng.standard_normal((16, 32), dtype=np.float32)
    with es.compileGraph(
        g, device=[0, 1, 2, 3], client=daemon_client, weights=[w], dims={"tokens": 8}
    ) as cg:
        assert cg.compile_result.cache_hit is False
        again = daemon_client.compile(cg.model, {"tokens": 8}, cg.options)
        assert again.cache_hit is True and again.plan_key == cg.compile_result.plan_key
        cg.load(w, w_value)
        for tokens in (8, 20):
            x_value = rng.standard_normal((tokens, 16), dtype=np.float32)
            cg.load(x, x_value)
            cg.execute()
            h = x_value.astype(np.float64) @ w_value
            from math import erf, sqrt

            expected = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
            np.testing.assert_allclose(cg.offload(y), expected, rtol=1e-4, atol=1e-4)
        assert cg.last_execute.cache_hit is False  # tokens=20 was new
        models = {m.model: m for m in daemon_client.list_models()}
        assert models[cg.model].plans >= 2
        assert models[cg.model].weights_loaded == ("w",)
    assert cg.model not in {m.model for m in daemon_client.list_models()}


def test_model_options_are_the_defaults_of_its_requests(daemon_client):
    """register_model(options=...): a request naming no planner compiles with the model's, one
    naming a planner gets it; bad model options are refused naming the field."""
    g, x, w, y = ffn_graph()
    with pytest.raises(es.InvalidArgumentError, match=r"options\.devices: 99"):
        daemon_client.register_model("model-options", g, weights=["w"], options={"devices": 99})
    daemon_client.register_model(
        "model-options", g, weights=["w"], options=es.CompileOptions(planner="megatron")
    )
    try:
        by_model = daemon_client.compile("model-options", {"tokens": 8})
        assert " planner=megatron " in by_model.plan_key
        by_request = daemon_client.compile("model-options", {"tokens": 8}, {"planner": "dp"})
        assert " planner=dp " in by_request.plan_key
        again = daemon_client.compile("model-options", {"tokens": 8}, {"planner": "megatron"})
        assert again.cache_hit and again.plan_key == by_model.plan_key
    finally:
        daemon_client.unregister("model-options")


def test_objectives_are_their_own_plans_and_match_numpy(daemon_client):
    """No objective is the time objective (the server's default); bytes ("cost", its old name,
    alike) and search are other plans (key, cache entry) of the same shape, computing the same
    function."""
    g, x, w, y = ffn_graph()
    rng = np.random.default_rng(5)
    w_value = rng.standard_normal((16, 32), dtype=np.float32)
    x_value = rng.standard_normal((24, 16), dtype=np.float32)
    h = x_value.astype(np.float64) @ w_value
    from math import erf, sqrt

    expected = 0.5 * h * (1 + np.vectorize(erf)(h / sqrt(2)))
    with es.compileGraph(
        g, device=4, client=daemon_client, weights=[w], dims={"tokens": 24}, objective="search"
    ) as cg:
        assert cg.options.objective == "search"
        search_key = cg.compile_result.plan_key
        assert "objective=search" in search_key
        by_default = daemon_client.compile(cg.model, {"tokens": 24}, {"devices": 4})
        assert by_default.cache_hit is False
        assert "objective=time" in by_default.plan_key and by_default.plan_key != search_key
        by_bytes = daemon_client.compile(
            cg.model, {"tokens": 24}, {"devices": 4, "objective": "bytes"}
        )
        assert by_bytes.cache_hit is False
        assert "objective" not in by_bytes.plan_key
        by_cost = daemon_client.compile(
            cg.model, {"tokens": 24}, {"devices": 4, "objective": "cost"}
        )
        assert by_cost.cache_hit is True and by_cost.plan_key == by_bytes.plan_key
        again = daemon_client.compile(cg.model, {"tokens": 24}, cg.options)
        assert again.cache_hit is True and again.plan_key == search_key
        models = {m.model: m for m in daemon_client.list_models()}
        assert models[cg.model].plans == 3
        cg.load(w, w_value)
        cg.load(x, x_value)
        cg.execute()
        assert cg.last_execute.cache_hit is True  # the search plan compiled above
        np.testing.assert_allclose(cg.offload(y), expected, rtol=1e-4, atol=1e-4)


def test_bad_objective_is_refused_by_the_server(daemon_client):
    """The daemon checks the objective too (for clients that do not): INVALID_ARGUMENT."""
    g, x, w, y = ffn_graph()
    with es.compileGraph(g, client=daemon_client, weights=[w]) as cg:
        pb = daemon_client._pb.service_pb2
        request = pb.CompileRequest(
            model=cg.model, dims={"tokens": 8}, options=pb.CompileOptions(objective="fastest")
        )
        with pytest.raises(es.InvalidArgumentError) as info:
            daemon_client._call("Compile", request)
        assert (
            "options.objective: 'fastest' is not an objective (bytes, time, search; cost means "
            "bytes)" in str(info.value)
        )


def test_error_unknown_model(daemon_client):
    with pytest.raises(es.NotFoundError) as info:
        daemon_client.compile("no-such-model", {})
    assert "no-such-model" in info.value.details
    with pytest.raises(es.NotFoundError):
        daemon_client.explain("no-such-model")
    with pytest.raises(es.NotFoundError):
        daemon_client.unregister("no-such-model")


def test_error_wrong_shape_and_missing_weight(daemon_client):
    g, x, w, y = ffn_graph()
    with es.compileGraph(g, client=daemon_client, weights=[w], dims={"tokens": 4}) as cg:
        with pytest.raises(es.FailedPreconditionError, match="'w'"):
            daemon_client.execute(cg.model, {"x": np.zeros((4, 16), np.float32)}, {"tokens": 4})
        cg.load(w, np.zeros((16, 32)))
        with pytest.raises(es.InvalidArgumentError) as info:
            daemon_client.execute(cg.model, {"x": np.zeros((4, 15), np.float32)}, {"tokens": 4})
        assert "'x'" in info.value.details and "shape" in info.value.details
        with pytest.raises(es.InvalidArgumentError, match="tokens"):
            daemon_client.compile(cg.model, {})
        with pytest.raises(es.InvalidArgumentError, match="devices"):
            daemon_client.compile(cg.model, {"tokens": 4}, {"devices": 64})
        with pytest.raises(es.AlreadyExistsError):
            daemon_client.register_model(cg.model, g)


def test_error_bad_graph_is_named_by_the_server(daemon_client):
    # Two symbols the client cannot compare: the server finds the mismatch once they are bound.
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc(["rows", ("d", 4)]), name="a")
    b = g.insertTensor(es.tensorDesc(["cols", ("d", 4)]), name="b")
    g.save(g.binary(a, b, "add", name="sum"))
    with pytest.raises(es.InvalidArgumentError) as info:
        es.compileGraph(g, client=daemon_client, dims={"rows": 3, "cols": 5})
    assert "sum" in info.value.details
    assert not [
        m
        for m in daemon_client.list_models()
        if m.model.startswith("graph-") and "rows" in m.symbols
    ]  # unregistered again after the failed compile


@pytest.mark.parametrize("dtype, np_type", [("f16", np.float16), ("bf16", np.float32)])
def test_half_precision_dtypes(daemon_client, dtype, np_type):
    # Both of the daemon's backends run f16 and bf16 (runtime/README.md, docs/cuda.md): nothing is
    # absent here (only the daemon itself may be: the fixture skips then), and an error is a
    # broken path and fails the test.
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([("n", 8)], dtype), name="x")
    g.save(g.unary(x, "scale", 2.0, name="y"))
    with es.compileGraph(g, device=1, client=daemon_client) as cg:
        values = np.linspace(-1, 1, 8)
        cg.load(x, values)
        cg.execute()
        out = cg.offload("y")
        assert out.dtype == np_type
        np.testing.assert_allclose(out, 2 * values, rtol=1e-2, atol=1e-2)


def test_bearer_token(daemon_binary):
    with tempfile.TemporaryDirectory(prefix="einsummable-token-") as workdir:
        token_file = Path(workdir) / "token"
        token_file.write_text("s3cret\n")
        d = Daemon(daemon_binary, Path(workdir), [f"--token_file={token_file}"], token="s3cret")
        d.start()
        try:
            with (
                es.Client(d.address, token="wrong") as client,
                pytest.raises(es.UnauthenticatedError),
            ):
                client.server_info()
            with (
                es.Client(d.address, token="") as client,
                pytest.raises(es.UnauthenticatedError, match="missing"),
            ):
                client.server_info()
            with es.Client(d.address, token="s3cret") as client:
                assert client.server_info().devices == 8
        finally:
            d.stop()


def test_every_operator_kind_matches_numpy(daemon_client):
    """A graph using every operator kind and attribute, against fake_server's NumPy evaluator:
    the client's attribute encoding means to the server what the docs say it means."""
    from fake_server import evaluate

    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([("tokens", 12), ("d", 16)]), name="x")
    gamma = g.insertTensor(es.tensorDesc([("d", 16)]), name="gamma")
    beta = g.insertTensor(es.tensorDesc([("d", 16)]), name="beta")
    w = g.insertTensor(es.tensorDesc([("d", 16), ("e", 24)]), name="w")
    ln = g.layernorm(x, gamma, beta, eps=1e-3, name="ln")
    p = g.matmul(ln, w, name="p")
    lr = g.unary(p, "leaky_relu", 0.1, name="lr")
    sm = g.softmax(lr, axis=0, name="sm")
    heads = g.split_heads(sm, 3, heads_name="h", head_dim_name="hd", name="heads")
    r = g.rope(heads, theta=100.0, sequence_ends=[4, 12], name="r")
    att = g.attention(r, r, heads, causal=False, sequence_ends=[4, 12], scale=0.3, name="att")
    merged = g.merge_heads(att, name="merged")
    mx = g.einsum("ij->j", merged, agg="max", name="mx")
    ratio = g.binary(merged, g.unary(mx, "add_scalar", 2.0), "div", name="ratio")
    g.save(ratio, mx)
    rng = np.random.default_rng(7)
    arrays = {
        "x": rng.standard_normal((12, 16)),
        "gamma": 1 + 0.1 * rng.standard_normal(16),
        "beta": 0.1 * rng.standard_normal(16),
        "w": rng.standard_normal((16, 24)) / 4,
    }
    expected = evaluate(g.to_graphdef(), arrays)
    with es.compileGraph(g, device=4, client=daemon_client, weights=[w, gamma, beta]) as cg:
        for name, value in arrays.items():
            cg.load(name, value)
        outputs = cg.execute()
    assert set(outputs) == {"ratio", "mx"}
    for name in ("ratio", "mx"):
        scale = np.abs(expected[name]).max()
        np.testing.assert_allclose(outputs[name], expected[name], rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize(
    "devices,planner", [(1, None), (4, None), (4, "megatron"), (8, "ulysses"), (4, "data-parallel")]
)
def test_decode_attention_matches_numpy(daemon_client, devices, planner):
    """Decode-shaped attention (key_ends): three sequences' new tokens (2, 1, 3) against caches
    of 37, 9 and 70 keys, causal bottom-right, through the daemon's planners against NumPy."""
    from graph_numpy import attention as numpy_attention

    fresh, cached = [2, 1, 3], [37, 9, 70]
    ends = np.cumsum(fresh).tolist()
    key_ends = np.cumsum(np.add(fresh, cached)).tolist()
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([("tokens", ends[-1]), ("heads_q", 4), ("d", 8)]), name="q")
    k = g.insertTensor(es.tensorDesc([("keys", key_ends[-1]), ("heads_kv", 2), ("d", 8)]), name="k")
    v = g.insertTensor(es.tensorDesc([("keys", key_ends[-1]), ("heads_kv", 2), ("d", 8)]), name="v")
    g.save(g.attention(q, k, v, causal=True, sequence_ends=ends, key_ends=key_ends, name="att"))
    rng = np.random.default_rng(11)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in (q, k, v)}
    expected = numpy_attention(
        *(arrays[n].astype(np.float64) for n in "qkv"), ends, True, 8**-0.5, key_ends
    )
    with es.compileGraph(g, device=devices, client=daemon_client, planner=planner) as cg:
        for name, value in arrays.items():
            cg.load(name, value)
        got = cg.execute()["att"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("devices,dtype", [(1, "i32"), (4, "i64")])
def test_rope_positions_given_at_run_time_match_numpy(daemon_client, devices, dtype):
    """rope with a positions input (a decode step's tokens continue their caches): each token
    rotated by its own given position, through the daemon's plan; a negative position is
    refused naming the token."""
    from graph_numpy import rope as numpy_rope

    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([("tokens", 6), ("heads", 2), ("d", 8)]), name="x")
    p = g.insertTensor(es.tensorDesc([("tokens", 6)], dtype), name="p")
    g.save(g.rope(x, theta=500.0, positions=p, name="r"))
    rng = np.random.default_rng(3)
    x_value = rng.standard_normal((6, 2, 8)).astype(np.float32)
    positions = np.array([40, 41, 7, 0, 100, 3], dtype=np.int32 if dtype == "i32" else np.int64)
    expected = numpy_rope(x_value.astype(np.float64), {"theta": 500.0}, [6], positions)
    with es.compileGraph(g, device=devices, client=daemon_client) as cg:
        cg.load("x", x_value)
        cg.load("p", positions)
        np.testing.assert_allclose(cg.execute()["r"], expected, rtol=1e-5, atol=1e-5)
        cg.load("p", np.array([1, 2, -1, 3, 4, 5], positions.dtype))
        with pytest.raises(es.InvalidArgumentError, match="token 2 has position -1"):
            cg.execute()


def test_decode_attention_key_lengths_read_the_filled_keys(daemon_client):
    """key_lengths: one plan for regions of 20, 9 and 30 keys serves every fill; each sequence
    reads only its filled keys (against NumPy), and a fill past a region is refused naming it."""
    from graph_numpy import attention as numpy_attention

    fresh, capacity = [1, 2, 1], [20, 9, 30]
    ends, key_ends = np.cumsum(fresh).tolist(), np.cumsum(capacity).tolist()
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([("tokens", 4), ("heads_q", 4), ("d", 8)]), name="q")
    k = g.insertTensor(es.tensorDesc([("keys", 59), ("heads_kv", 2), ("d", 8)]), name="k")
    v = g.insertTensor(es.tensorDesc([("keys", 59), ("heads_kv", 2), ("d", 8)]), name="v")
    n = g.insertTensor(es.tensorDesc([("sequences", 3)], "i32"), name="n")
    a = g.attention(q, k, v, True, ends, name="att", key_ends=key_ends, key_lengths=n)
    g.save(a)
    rng = np.random.default_rng(13)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in (q, k, v)}
    wide = {name: value.astype(np.float64) for name, value in arrays.items()}
    with es.compileGraph(g, device=4, client=daemon_client) as cg:
        for name, value in arrays.items():
            cg.load(name, value)
        for fills in ([20, 9, 30], [3, 2, 17], [1, 9, 1]):
            cg.load("n", np.array(fills, np.int32))
            expected = numpy_attention(
                wide["q"], wide["k"], wide["v"], ends, True, 8**-0.5, key_ends, fills
            )
            np.testing.assert_allclose(cg.execute()["att"], expected, rtol=1e-5, atol=1e-5)
        cg.load("n", np.array([21, 2, 2], np.int32))
        with pytest.raises(es.InvalidArgumentError, match=r"key_lengths\[0\] = 21"):
            cg.execute()


@pytest.mark.parametrize("devices", [1, 4])
def test_paged_attention_reads_each_sequences_keys_through_its_pages(daemon_client, devices):
    """Paged attention: three sequences' keys on pages of 4 rows scattered over a pool of 16
    pages, read through a page table loaded at run time; one plan serves every table and fill
    (against NumPy over the gathered keys), and a page outside the pool is refused naming its
    entry."""
    from graph_numpy import attention as numpy_attention
    from graph_numpy import paged_keys

    fresh, page_size = [1, 2, 1], 4
    ends = np.cumsum(fresh).tolist()
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([("tokens", 4), ("heads_q", 4), ("d", 8)]), name="q")
    k = g.insertTensor(es.tensorDesc([("keys", 64), ("heads_kv", 2), ("d", 8)]), name="k")
    v = g.insertTensor(es.tensorDesc([("keys", 64), ("heads_kv", 2), ("d", 8)]), name="v")
    n = g.insertTensor(es.tensorDesc([("sequences", 3)], "i32"), name="n")
    table = g.insertTensor(es.tensorDesc([("sequences", 3), ("pages", 5)], "i64"), name="table")
    a = g.attention(
        q, k, v, True, ends, name="att", key_lengths=n, page_table=table, page_size=page_size
    )
    g.save(a)
    rng = np.random.default_rng(19)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in (q, k, v)}
    wide = {name: value.astype(np.float64) for name, value in arrays.items()}
    with es.compileGraph(g, device=devices, client=daemon_client) as cg:
        for name, value in arrays.items():
            cg.load(name, value)
        for fills, pages in (
            ([20, 9, 17], [[3, 4, 5, 6, 7], [15, 0, 1, 1, 1], [9, 2, 12, 8, 10]]),
            ([2, 5, 1], [[11, 0, 0, 0, 0], [6, 13, 0, 0, 0], [14, 0, 0, 0, 0]]),
        ):
            cg.load("n", np.array(fills, np.int32))
            cg.load("table", np.array(pages, np.int64))
            k_rows, v_rows, key_ends = paged_keys(wide["k"], wide["v"], fills, pages, page_size)
            expected = numpy_attention(wide["q"], k_rows, v_rows, ends, True, 8**-0.5, key_ends)
            np.testing.assert_allclose(cg.execute()["att"], expected, rtol=1e-5, atol=1e-5)
        cg.load("table", np.array([[3, 4, 5, 6, 7], [15, 0, 16, 1, 1], [9, 2, 12, 8, 10]]))
        with pytest.raises(es.InvalidArgumentError, match=r"page_table\[1\]\[2\] = 16"):
            cg.execute()


@pytest.mark.parametrize("devices", [1, 4])
def test_a_decode_step_writes_its_keys_into_the_cache_and_reads_them(daemon_client, devices):
    """write_rows then attention with key_lengths: two sequences' caches (regions of 16 keys)
    get their new token's key and value written at the end of their fill, and the new tokens
    attend to the filled keys, their own included — one decode step, against NumPy. A slot
    written twice is refused naming it."""
    from graph_numpy import attention as numpy_attention
    from graph_numpy import write_rows as numpy_write_rows

    g = es.createGraph()
    cache = [("keys", 32), ("heads_kv", 1), ("d", 8)]
    k_cache = g.insertTensor(es.tensorDesc(cache), name="k_cache")
    v_cache = g.insertTensor(es.tensorDesc(cache), name="v_cache")
    q = g.insertTensor(es.tensorDesc([("tokens", 2), ("heads_q", 2), ("d", 8)]), name="q")
    k_new = g.insertTensor(es.tensorDesc([("tokens", 2), ("heads_kv", 1), ("d", 8)]), name="k")
    v_new = g.insertTensor(es.tensorDesc([("tokens", 2), ("heads_kv", 1), ("d", 8)]), name="v")
    slots = g.insertTensor(es.tensorDesc([("tokens", 2)], "i64"), name="slots")
    fills = g.insertTensor(es.tensorDesc([("sequences", 2)], "i64"), name="fills")
    k_all = g.write_rows(k_cache, k_new, slots, name="k_all")
    v_all = g.write_rows(v_cache, v_new, slots, name="v_all")
    a = g.attention(q, k_all, v_all, True, [1, 2], name="att", key_ends=[16, 32], key_lengths=fills)
    g.save(a, k_all)
    rng = np.random.default_rng(17)
    arrays = {
        name: rng.standard_normal(t.shape).astype(np.float32)
        for name, t in (
            ("k_cache", k_cache),
            ("v_cache", v_cache),
            ("q", q),
            ("k", k_new),
            ("v", v_new),
        )
    }
    # Sequence 0 holds 5 keys, sequence 1 holds 11: the new ones go to rows 5 and 16 + 11.
    arrays["slots"] = np.array([5, 27], np.int64)
    arrays["fills"] = np.array([6, 12], np.int64)
    wide = {name: value.astype(np.float64) for name, value in arrays.items()}
    k_want = numpy_write_rows(wide["k_cache"], wide["k"], arrays["slots"])
    v_want = numpy_write_rows(wide["v_cache"], wide["v"], arrays["slots"])
    att_want = numpy_attention(
        wide["q"], k_want, v_want, [1, 2], True, 8**-0.5, [16, 32], arrays["fills"]
    )
    with es.compileGraph(g, device=devices, client=daemon_client) as cg:
        for name, value in arrays.items():
            cg.load(name, value)
        out = cg.execute()
        np.testing.assert_allclose(out["att"], att_want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["k_all"], k_want, rtol=0, atol=0)
        cg.load("slots", np.array([27, 27], np.int64))
        with pytest.raises(es.InvalidArgumentError, match="slot 27 is written twice"):
            cg.execute()


def test_large_weight_upload_in_chunks(daemon_client):
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([("tokens", 4), ("d", 1024)]), name="x")
    w = g.insertTensor(es.tensorDesc([("d", 1024), ("e", 4096)]), name="w")  # 16 MiB
    g.save(g.matmul(x, w, name="y"))
    rng = np.random.default_rng(5)
    w_value = rng.standard_normal((1024, 4096), dtype=np.float32)
    x_value = rng.standard_normal((4, 1024), dtype=np.float32)
    with es.compileGraph(g, device=2, client=daemon_client, weights=[w]) as cg:
        cg.load(w, w_value, progress=False)  # 16 chunks of 1 MiB
        cg.load(x, x_value)
        cg.execute()
        expected = x_value.astype(np.float64) @ w_value
        np.testing.assert_allclose(cg.offload("y"), expected, rtol=1e-4, atol=1e-3)


def test_upload_reports_the_bytes_stored(daemon_client):
    g = es.createGraph()
    w = g.insertTensor(es.tensorDesc([("d", 256), ("e", 2048)]), name="w")  # 2 MiB
    g.save(g.unary(w, "neg", name="y"))
    with es.compileGraph(g, device=1, client=daemon_client, weights=[w]) as cg:
        value = np.ones((256, 2048), np.float32)
        assert daemon_client.upload_tensor(cg.model, "w", value, progress=False) == value.nbytes
