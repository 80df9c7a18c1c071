"""The client end to end against the in-process fake server (tests/fake_server.py): no daemon.

These check the client's side of the contract — chunked uploads, symbol binding from loaded
arrays, outputs and dtypes, exceptions carrying the server's status and message — and run both
examples. test_daemon.py runs the same flows against the real einsummabled.
"""

import io

import numpy as np
import pytest
from conftest import load_example

import einsummable as es


@pytest.fixture()
def client(fake_server):
    with es.Client(fake_server.address, timeout=30) as c:
        yield c


def small_ffn():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", 8)]), name="x")
    w = g.insertTensor(es.tensorDesc([("d_model", 8), ("d_ff", 16)]), name="w")
    y = g.unary(g.matmul(x, w), "relu", 0.0, name="y")
    g.save(y)
    return g, x, w, y


def test_server_info_and_models(client, fake_server):
    info = client.server_info()
    assert info.backend == "cpu" and info.devices == 8
    g, x, w, y = small_ffn()
    cg = es.compileGraph(g, device=4, client=client, weights=[w], dims={"tokens": 4})
    try:
        assert cg.model.startswith("graph-")
        models = {m.model: m for m in client.list_models()}
        assert models[cg.model].symbols == ("tokens",)
        assert models[cg.model].weights == ("w",) and models[cg.model].inputs == ("x",)
        assert cg.compile_result.cache_hit is False
    finally:
        cg.unregister()
    assert cg.model not in {m.model for m in client.list_models()}
    cg.unregister()  # idempotent


def test_symbolic_graph_runs_at_two_sizes(client):
    g, x, w, y = small_ffn()
    rng = np.random.default_rng(1)
    w_value = rng.standard_normal((8, 16), dtype=np.float32)
    with es.compileGraph(
        g, device=[0, 1], schedule_mode="naive", client=client, weights=[w], dims={"tokens": 4}
    ) as cg:
        cg.load(w, w_value)
        for tokens in (4, 10):
            x_value = rng.standard_normal((tokens, 8), dtype=np.float32)
            cg.load(x, x_value)
            outputs = cg.execute()
            assert set(outputs) == {"y"}
            result = cg.offload(y)
            assert result.dtype == np.float32 and result.shape == (tokens, 16)
            np.testing.assert_allclose(
                result, np.maximum(x_value @ w_value, 0), rtol=1e-5, atol=1e-5
            )
            assert cg.dims == {"tokens": tokens}
        assert "fake plan" in cg.explain()


def test_symbolic_graph_without_dims_compiles_at_first_execute(client):
    g, x, w, y = small_ffn()
    with es.compileGraph(g, client=client, weights=["w"]) as cg:
        assert cg.compile_result is None
        with pytest.raises(ValueError, match=r"symbols \['tokens'\] are not bound"):
            cg.explain()
        cg.load("w", np.ones((8, 16)))
        cg.load("x", np.ones((3, 8)))
        cg.execute()
        assert cg.offload("y").shape == (3, 16)
        assert cg.explain()  # the executed shape


def test_uploads_are_chunked(client, fake_server):
    g = es.createGraph()
    w = g.insertTensor(es.tensorDesc([("rows", 300), ("cols", 1024)]), name="w")
    g.save(g.unary(w, "neg", name="out"))
    fake_server.servicer.upload_chunks.clear()
    with es.compileGraph(g, client=client, weights=[w]) as cg:
        value = np.arange(300 * 1024, dtype=np.float32).reshape(300, 1024)
        stored = client.upload_tensor(
            cg.model, "w", value, "f32", chunk_bytes=256 * 1024, progress=False
        )
        assert stored == value.nbytes
        assert fake_server.servicer.upload_chunks == [256 * 1024] * 4 + [
            value.nbytes - 4 * 256 * 1024
        ]
        cg._loaded_weights.add("w")
        cg.execute()
        np.testing.assert_array_equal(cg.offload("out"), -value)


def test_uploads_carry_offsets_and_the_whole_tensors_crc32(client, fake_server):
    """Every chunk says where it starts and the first gives zlib.crc32 of all the bytes, so the
    server can refuse a lost, repeated or corrupted chunk (service.proto, UploadTensorChunk)."""
    import zlib

    g = es.createGraph()
    w = g.insertTensor(es.tensorDesc([("rows", 300), ("cols", 1024)]), name="w")
    g.save(g.unary(w, "neg", name="out"))
    servicer = fake_server.servicer
    with es.compileGraph(g, client=client, weights=[w]) as cg:
        value = np.arange(300 * 1024, dtype=np.float32).reshape(300, 1024)
        servicer.upload_offsets.clear()
        servicer.upload_crc32s.clear()
        client.upload_tensor(cg.model, "w", value, "f32", chunk_bytes=256 * 1024, progress=False)
        assert servicer.upload_offsets == [k * 256 * 1024 for k in range(5)]
        assert servicer.upload_crc32s == [zlib.crc32(value.tobytes())]
        # A tensor smaller than one chunk: one chunk, at offset 0.
        servicer.upload_offsets.clear()
        servicer.upload_crc32s.clear()
        client.upload_tensor(
            cg.model, "w", value, "f32", chunk_bytes=2 * value.nbytes, progress=False
        )
        assert servicer.upload_offsets == [0]
        assert servicer.upload_crc32s == [zlib.crc32(value.tobytes())]


def test_upload_progress_bar(client, monkeypatch):
    import tqdm.auto

    stream = io.StringIO()
    real = tqdm.auto.tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda *a, **k: real(*a, file=stream, **k))
    g = es.createGraph()
    w = g.insertTensor(es.tensorDesc([("n", 1024)]), name="w")
    g.save(g.unary(w, "neg"))
    with es.compileGraph(g, client=client, weights=[w]) as cg:
        cg.load(w, np.zeros(1024), progress=True)
    assert "upload w" in stream.getvalue()


def test_dtypes_come_back_as_documented(client):
    for dtype, np_type, rtol in [
        ("f16", np.float16, 1e-3),
        ("bf16", np.float32, 1e-2),
        ("f64", np.float64, 1e-12),
    ]:
        g = es.createGraph()
        x = g.insertTensor(es.tensorDesc([("n", 5)], dtype), name="x")
        y = g.unary(x, "scale", 2.0, name="y")
        g.save(y)
        with es.compileGraph(g, client=client) as cg:
            values = np.linspace(-1, 1, 5)
            cg.load(x, values)
            cg.execute()
            out = cg.offload(y)
            assert out.dtype == np_type, dtype
            np.testing.assert_allclose(out, 2 * values, rtol=rtol, atol=rtol)


def test_client_side_usage_errors(client):
    g, x, w, y = small_ffn()
    with es.compileGraph(g, client=client, weights=[w], dims={"tokens": 2}) as cg:
        with pytest.raises(ValueError, match=r"dimension 1 \('d_model'\) is 8, the array has 9"):
            cg.load(x, np.zeros((2, 9)))
        with pytest.raises(ValueError, match="the array has rank 1"):
            cg.load(x, np.zeros(8))
        with pytest.raises(es.GraphError, match="only inputs can be loaded"):
            cg.load(y, np.zeros((2, 16)))
        with pytest.raises(ValueError, match=r"inputs \['x'\] are not loaded"):
            cg.execute()
        cg.load(x, np.zeros((2, 8)))
        with pytest.raises(ValueError, match=r"weights \['w'\] are not uploaded"):
            cg.execute()
        cg.load(w, np.zeros((8, 16)))
        with pytest.raises(RuntimeError, match="call execute"):
            cg.offload(y)
        with pytest.raises(es.GraphError, match="'x' is not saved"):
            cg.offload(x)
    with pytest.raises(ValueError, match="takes only their count"):
        es.compileGraph(g, device=[1, 2], client=client)
    with pytest.raises(ValueError, match="schedule_mode 'fast'"):
        es.compileGraph(g, schedule_mode="fast", client=client)
    with pytest.raises(es.GraphError, match=r"weight 'x' .* has symbolic dimensions"):
        es.compileGraph(g, weights=[x], client=client)


def test_bad_objective_is_refused_before_anything_is_sent(client):
    g, x, w, y = small_ffn()
    models = client.list_models()
    with pytest.raises(
        ValueError, match=r"objective 'fastest': expected one of bytes, time, search, cost"
    ):
        es.compileGraph(g, objective="fastest", client=client)
    assert client.list_models() == models  # nothing was registered
    # A server would answer NotFound for the model; the client refuses the options first.
    with pytest.raises(ValueError, match="objective 'speed'"):
        client.compile("no-such-model", {}, {"objective": "speed"})
    with pytest.raises(ValueError, match="objective 'Time'"):
        es.CompileOptions(objective="Time")
    for objective in ("bytes", "time", "search", "cost"):
        assert es.CompileOptions(objective=objective).to_proto().objective == objective
    # Unset: the server's default, the time objective (test_daemon checks the key it gives).
    assert es.CompileOptions().to_proto().objective == ""


def test_server_errors_carry_status_and_message(client):
    with pytest.raises(es.NotFoundError) as info:
        client.compile("no-such-model", {})
    assert info.value.code == "NOT_FOUND" and info.value.method == "Compile"
    assert "no-such-model" in info.value.details
    g, x, w, y = small_ffn()
    with es.compileGraph(g, client=client, weights=[w], dims={"tokens": 2}) as cg:
        with pytest.raises(es.InvalidArgumentError, match="symbol 'tokens' is not bound"):
            client.compile(cg.model, {})
        with pytest.raises(es.FailedPreconditionError, match="'w' is not uploaded"):
            client.execute(cg.model, {"x": np.zeros((2, 8), np.float32)}, {"tokens": 2})
        cg.load(w, np.zeros((8, 16)))
        with pytest.raises(es.InvalidArgumentError, match=r"has shape \[3, 8\], expected \[2, 8\]"):
            client.execute(cg.model, {"x": np.zeros((3, 8), np.float32)}, {"tokens": 2})
        with pytest.raises(es.AlreadyExistsError):
            client.register_model(cg.model, g)


def test_a_kind_the_fake_has_no_numerics_for_registers_and_compiles(client):
    # The fake takes any kind through registration and compilation (the generic path); only
    # executing needs the kind's numerics (fake_server._NUMERICS).
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([("t", 2), ("d", 4)]), name="a")
    c = g.op("no_such_kind", [a], {"axis": 0}, output=es.tensorDesc([("t", 2), ("d", 4)]))
    g.save(c)
    with es.compileGraph(g, client=client, dims={}) as cg:
        assert cg.compile_result is not None
        with pytest.raises(es.InvalidArgumentError, match="unknown operator kind 'no_such_kind'"):
            client.execute(cg.model, {"a": np.zeros((2, 4), np.float32)}, {})


def test_unreachable_server_is_unavailable():
    with es.Client("127.0.0.1:1", timeout=5) as c:
        with pytest.raises(es.UnavailableError):
            c.server_info()
        with pytest.raises(es.UnavailableError, match=r"no answer from 127\.0\.0\.1:1"):
            c.wait_ready(timeout=0.3)


def test_server_from_environment(monkeypatch, fake_server):
    monkeypatch.setenv("EINSUMMABLE_SERVER", fake_server.address)
    with es.Client() as c:
        assert c.server == fake_server.address
        assert c.server_info().version == "fake"


def test_ffn_example(fake_server):
    ffn = load_example("ffn")
    out = io.StringIO()
    assert ffn.run(
        fake_server.address,
        devices=4,
        tokens=(16, 40),
        d_model=32,
        d_ff=64,
        schedule="naive",
        out=out,
    )
    assert out.getvalue().count(": ok") == 2
    assert (
        ffn.main(
            [
                "--server",
                fake_server.address,
                "--tokens",
                "8",
                "--d-model",
                "16",
                "--d-ff",
                "32",
                "--no-explain",
            ]
        )
        == 0
    )


def test_llama_block_example(fake_server):
    llama = load_example("llama_block")
    config = llama.Config(d_model=32, heads_q=4, heads_kv=2, d_head=8, d_ff=64, sequences=[3, 5, 8])
    out = io.StringIO()
    assert llama.run(fake_server.address, devices=8, config=config, out=out)
    assert ": ok" in out.getvalue()


def test_llama_reference_is_sensitive():
    """The example's check fails when the result is wrong: perturb and compare."""
    llama = load_example("llama_block")
    config = llama.Config(d_model=32, heads_q=4, heads_kv=2, d_head=8, d_ff=64, sequences=[3, 5])
    arrays = llama.random_arrays(config)
    expected = llama.reference(config, arrays)
    assert llama.max_error(expected.astype(np.float32), expected) <= 1.0
    # One sequence instead of two packed ones changes positions and attention: detected.
    merged = llama.Config(**{**config.__dict__, "sequences": [8]})
    assert llama.max_error(llama.reference(merged, arrays), expected) > 1.0
