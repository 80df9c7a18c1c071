"""Integration: NVIDIA's Triton client (tritonclient, PyPI) against einsummabled's KServe v2
endpoint (docs/server.md "KServe v2"), on the shared real daemon (the ``daemon`` fixture).

Models are registered and their weights uploaded with the einsummable client; tritonclient then
checks liveness, readiness and metadata and calls ModelInfer, whose numbers are compared with
NumPy. Skipped with a message when tritonclient or the daemon binary is absent.
"""

import numpy as np
import pytest

import einsummable as es

grpcclient = pytest.importorskip(
    "tritonclient.grpc", reason="tritonclient[grpc] is not installed (scripts/requirements.txt)"
)
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.integration

D_MODEL = 16
D_FF = 32


def ffn_graph(dtype):
    """y = relu(x w1) w2 with x [tokens, D_MODEL] (tokens symbolic), w1 and w2 weights."""
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", D_MODEL)], dtype), name="x")
    w1 = g.insertTensor(es.tensorDesc([("d_model", D_MODEL), ("d_ff", D_FF)], dtype), name="w1")
    w2 = g.insertTensor(es.tensorDesc([("d_ff", D_FF), ("d_model", D_MODEL)], dtype), name="w2")
    h = g.unary(g.matmul(x, w1, name="h"), "relu", 0.0, name="a")
    g.save(g.matmul(h, w2, name="y"))
    return g


def reference(x, w1, w2):
    a = np.maximum(x.astype(np.float64) @ w1.astype(np.float64), 0.0)
    return a @ w2.astype(np.float64)


@pytest.fixture(scope="module")
def triton(daemon):
    client = grpcclient.InferenceServerClient(url=daemon.address)
    yield client
    client.close()


@pytest.fixture(scope="module")
def ffn_model(daemon):
    """Registers 'kserve-ffn' (f32) with its weights uploaded; yields (name, w1, w2)."""
    rng = np.random.default_rng(20261130)
    w1 = rng.standard_normal((D_MODEL, D_FF), dtype=np.float32) / 4
    w2 = rng.standard_normal((D_FF, D_MODEL), dtype=np.float32) / 4
    with es.Client(daemon.address, timeout=60) as client:
        client.register_model("kserve-ffn", ffn_graph("f32"), weights=["w1", "w2"])
        client.upload_tensor("kserve-ffn", "w1", w1)
        client.upload_tensor("kserve-ffn", "w2", w2)
        yield "kserve-ffn", w1, w2
        client.unregister("kserve-ffn")


def infer_x(triton, model, x, datatype="FP32", **kwargs):
    infer_input = grpcclient.InferInput("x", list(x.shape), datatype)
    infer_input.set_data_from_numpy(x)
    return triton.infer(model, [infer_input], **kwargs)


def test_server_live_ready_and_metadata(triton, daemon):
    assert triton.is_server_live()
    assert triton.is_server_ready()
    metadata = triton.get_server_metadata()
    assert metadata.name == "einsummable"
    with es.Client(daemon.address) as client:
        assert metadata.version == client.server_info().version


def test_model_metadata_marks_symbolic_dimensions(triton, ffn_model):
    name, _, _ = ffn_model
    metadata = triton.get_model_metadata(name)
    assert metadata.name == name
    assert list(metadata.versions) == ["1"]
    assert metadata.platform == "einsummable"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("x", "FP32", [-1, D_MODEL])
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [
        ("y", "FP32", [-1, D_MODEL])
    ]


def test_model_config_is_the_metadata_in_tritons_form(triton, ffn_model):
    """ModelConfig, Triton's extension, which perf_analyzer reads before its first request."""
    from tritonclient.grpc import model_config_pb2

    name, _, _ = ffn_model
    config = triton.get_model_config(name).config
    assert config.name == name
    assert config.platform == "einsummable"
    assert config.max_batch_size == 0  # no batch dimension: the shapes bind the symbols
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("x", model_config_pb2.TYPE_FP32, [-1, D_MODEL])
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("y", model_config_pb2.TYPE_FP32, [-1, D_MODEL])
    ]
    assert triton.get_model_config(name, model_version="1").config == config
    for model, version, message in (
        (name, "2", "no version '2'"),
        ("no-such-model", "", "model 'no-such-model' is not registered"),
    ):
        with pytest.raises(InferenceServerException) as info:
            triton.get_model_config(model, model_version=version)
        assert info.value.status() == "StatusCode.NOT_FOUND"
        assert message in info.value.message()


def test_model_ready_only_once_weights_are_uploaded(triton, daemon):
    with es.Client(daemon.address) as client:
        client.register_model("kserve-pending", ffn_graph("f32"), weights=["w1", "w2"])
        try:
            assert not triton.is_model_ready("kserve-pending")
            client.upload_tensor("kserve-pending", "w1", np.zeros((D_MODEL, D_FF), np.float32))
            client.upload_tensor("kserve-pending", "w2", np.zeros((D_FF, D_MODEL), np.float32))
            assert triton.is_model_ready("kserve-pending")
            assert triton.is_model_ready("kserve-pending", model_version="1")
            assert not triton.is_model_ready("kserve-pending", model_version="2")
        finally:
            client.unregister("kserve-pending")
    assert not triton.is_model_ready("kserve-pending")


def test_model_infer_matches_numpy_at_two_shapes(triton, ffn_model):
    name, w1, w2 = ffn_model
    rng = np.random.default_rng(7)
    for tokens in (5, 24):
        x = rng.standard_normal((tokens, D_MODEL), dtype=np.float32)
        result = infer_x(
            triton,
            name,
            x,
            outputs=[grpcclient.InferRequestedOutput("y")],
            request_id=f"req-{tokens}",
        )
        y = result.as_numpy("y")
        assert y.dtype == np.float32 and y.shape == (tokens, D_MODEL)
        np.testing.assert_allclose(y, reference(x, w1, w2), rtol=1e-4, atol=1e-4)
        response = result.get_response()
        assert response.id == f"req-{tokens}"
        assert response.model_version == "1"


def test_model_infer_takes_compile_options_as_parameters(triton, ffn_model, daemon):
    name, w1, w2 = ffn_model
    x = np.linspace(-1, 1, 12 * D_MODEL, dtype=np.float32).reshape(12, D_MODEL)
    for devices, schedule in ((2, "naive"), (4, "optimized")):
        result = infer_x(triton, name, x, parameters={"devices": devices, "schedule": schedule})
        np.testing.assert_allclose(result.as_numpy("y"), reference(x, w1, w2), rtol=1e-4, atol=1e-4)
    with es.Client(daemon.address) as client:
        models = {m.model: m for m in client.list_models()}
        assert models[name].plans >= 2  # one plan per device count
        before = models[name].plans
    # The bytes objective is another plan of the same shape than the default (time), computing
    # the same function.
    result = infer_x(
        triton, name, x, parameters={"devices": 4, "schedule": "optimized", "objective": "bytes"}
    )
    np.testing.assert_allclose(result.as_numpy("y"), reference(x, w1, w2), rtol=1e-4, atol=1e-4)
    with es.Client(daemon.address) as client:
        models = {m.model: m for m in client.list_models()}
        assert models[name].plans == before + 1
    with pytest.raises(InferenceServerException) as info:
        infer_x(triton, name, x, parameters={"objective": "fastest"})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert (
        "options.objective: 'fastest' is not an objective (bytes, time, search; cost means bytes)"
        in info.value.message()
    )


def test_model_infer_in_f16(triton, daemon):
    rng = np.random.default_rng(16)
    w1 = (rng.standard_normal((D_MODEL, D_FF)) / 4).astype(np.float16)
    w2 = (rng.standard_normal((D_FF, D_MODEL)) / 4).astype(np.float16)
    x = rng.standard_normal((8, D_MODEL)).astype(np.float16)
    with es.Client(daemon.address) as client:
        client.register_model("kserve-f16", ffn_graph("f16"), weights=["w1", "w2"])
        try:
            client.upload_tensor("kserve-f16", "w1", w1)
            client.upload_tensor("kserve-f16", "w2", w2)
            y = infer_x(triton, "kserve-f16", x, datatype="FP16").as_numpy("y")
        finally:
            client.unregister("kserve-f16")
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), reference(x, w1, w2), rtol=1e-2, atol=2e-2)


def test_bad_requests_get_precise_errors_and_the_next_request_succeeds(triton, ffn_model):
    name, w1, w2 = ffn_model
    x = np.ones((3, D_MODEL), np.float32)

    with pytest.raises(InferenceServerException) as info:
        infer_x(triton, "no-such-model", x)
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert "no-such-model" in info.value.message()

    with pytest.raises(InferenceServerException) as info:
        infer_x(triton, name, np.ones((3, D_MODEL + 1), np.float32))
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input 'x' dimension 1 ('d_model') is 16; got 17" in info.value.message()

    with pytest.raises(InferenceServerException) as info:
        infer_x(triton, name, x.astype(np.float64), datatype="FP64")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input 'x' is FP32; got FP64" in info.value.message()

    with pytest.raises(InferenceServerException) as info:
        infer_x(triton, name, x, parameters={"batch_size": 4})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "parameter 'batch_size'" in info.value.message()
    assert "(parameters: devices, planner, objective, schedule" in info.value.message()

    result = infer_x(triton, name, x)
    np.testing.assert_allclose(result.as_numpy("y"), reference(x, w1, w2), rtol=1e-4, atol=1e-4)


def test_tritons_reserved_parameters(triton, ffn_model):
    """Triton's C++ client (so perf_analyzer) puts ``triton_enable_empty_final_response`` on every
    request: a bool is accepted and changes nothing for ModelInfer; another type, or another
    name with Triton's prefix, is INVALID_ARGUMENT naming it, as in Triton."""
    name, w1, w2 = ffn_model
    x = np.linspace(-2, 2, 6 * D_MODEL, dtype=np.float32).reshape(6, D_MODEL)
    for flag in (False, True):
        result = infer_x(triton, name, x, parameters={"triton_enable_empty_final_response": flag})
        np.testing.assert_allclose(result.as_numpy("y"), reference(x, w1, w2), rtol=1e-4, atol=1e-4)
        assert not result.get_response().parameters  # one answer, no triton_final_response

    bad = (
        (
            {"triton_enable_empty_final_response": 1},
            "parameter 'triton_enable_empty_final_response' must be a bool (bool_param); "
            "got int64_param 1",
        ),
        (
            {"triton_enable_empty_final_response": "yes"},
            "got string_param 'yes'",
        ),
        (
            {"triton_final_response": True},
            "parameter 'triton_final_response': names starting with 'triton_' are reserved for "
            "Triton; einsummabled accepts only triton_enable_empty_final_response",
        ),
        # The daemon's own unknown names are still refused by name.
        (
            {"triton_enable_empty_final_response": False, "tokens": 6},
            "parameter 'tokens' is not supported by model 'kserve-ffn'",
        ),
    )
    for parameters, message in bad:
        with pytest.raises(InferenceServerException) as info:
            infer_x(triton, name, x, parameters=parameters)
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT", parameters
        assert message in info.value.message(), parameters


def test_timeout_parameter_negative_is_refused_and_huge_saturates(triton, ffn_model):
    """tritonclient sends ``timeout`` as the int64 request parameter, in microseconds."""
    name, w1, w2 = ffn_model
    x = np.full((3, D_MODEL), 0.5, np.float32)

    with pytest.raises(InferenceServerException) as info:
        infer_x(triton, name, x, timeout=-1)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "parameter 'timeout': -1 is negative" in info.value.message()

    # 2^60 µs once overflowed the clock into a deadline already passed; now it adds no
    # deadline of its own, like the largest int64.
    for timeout in (2**60, 2**63 - 1):
        result = infer_x(triton, name, x, timeout=timeout, client_timeout=60)
        np.testing.assert_allclose(result.as_numpy("y"), reference(x, w1, w2), rtol=1e-4, atol=1e-4)


def test_contents_together_with_raw_input_contents_is_refused(daemon, ffn_model):
    """tritonclient never sends both, so this goes through the raw stub tritonclient ships."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    name, w1, w2 = ffn_model
    x = np.arange(2 * D_MODEL, dtype=np.float32).reshape(2, D_MODEL) / 64
    request = service_pb2.ModelInferRequest(model_name=name)
    tensor = request.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    request.raw_input_contents.append(x.tobytes())
    with grpc.insecure_channel(daemon.address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        # Raw contents alone are fine.
        response = stub.ModelInfer(request, timeout=60)
        y = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(2, D_MODEL)
        np.testing.assert_allclose(y, reference(x, w1, w2), rtol=1e-4, atol=1e-4)

        tensor.contents.fp32_contents.extend(x.ravel().tolist())
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request, timeout=60)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (
            "input 'x': contents must not be given when the request uses raw_input_contents"
            in info.value.details()
        )

        # Contents alone are fine too.
        del request.raw_input_contents[:]
        response = stub.ModelInfer(request, timeout=60)
        y = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(2, D_MODEL)
        np.testing.assert_allclose(y, reference(x, w1, w2), rtol=1e-4, atol=1e-4)
