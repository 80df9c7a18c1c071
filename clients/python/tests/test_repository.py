"""The daemon started on a model repository (docs/server.md "Model repository"): the newest
numeric version of each model is served with no client, a model whose weights do not match its
graph is left out with an error naming the file and the tensor while the others serve, the
repository's metrics count both, and RegisterModel still works beside it; loads, reloads and
unloads at run time (RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload) over the
einsummable client and over tritonclient's KServe gRPC client."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import Daemon, free_port
from test_serving import metric

import einsummable as es

pytestmark = pytest.mark.integration

SEED = 20261206


def write_safetensors(path: Path, tensors: dict) -> None:
    """The format's layout (u64 header length, JSON header padded to 8 bytes, the f32 data)."""
    header, blobs, offset = {}, [], 0
    for name, value in tensors.items():
        data = np.ascontiguousarray(value, dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(value.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def matmul_graph() -> es.Graph:
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d", 8)]), name="x")
    w = g.insertTensor(es.tensorDesc([("d", 8), ("e", 8)]), name="w")
    g.save(g.matmul(x, w, name="y"))
    return g


def test_a_repository_is_served_at_start_without_a_client(daemon_binary):
    rng = np.random.default_rng(SEED)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    graph_text = str(matmul_graph().to_graphdef())
    with tempfile.TemporaryDirectory(prefix="einsummable-repository-") as workdir:
        workdir = Path(workdir)
        repo = workdir / "repo"
        # "mm" at versions 1 and 3 (3 is served, its weight 3·w); "01" is not a version;
        # "bad" has a weight of the wrong shape.
        layout = [("mm", "1", w), ("mm", "3", 3 * w), ("mm", "01", 5 * w)]
        layout.append(("bad", "1", np.zeros((8, 9), np.float32)))
        for model, version, weight in layout:
            directory = repo / model / version
            directory.mkdir(parents=True)
            (directory / "graph.pbtxt").write_text(graph_text)
            write_safetensors(directory / "model.safetensors", {"w": weight})
        port = free_port()
        daemon = Daemon(
            daemon_binary,
            workdir,
            [f"--model_repository={repo}", "--devices=2", f"--metrics_port={port}"],
        )
        daemon.start()
        try:
            with es.Client(daemon.address) as client:
                assert [m.model for m in client.list_models()] == ["mm"]
                x = rng.standard_normal((5, 8)).astype(np.float32)
                y = client.execute("mm", {"x": x}).outputs["y"]
                np.testing.assert_allclose(y, x @ (3 * w), rtol=1e-5, atol=1e-5)
                # Registering over gRPC works beside the repository.
                client.register_model("beside", matmul_graph(), weights=["w"])
                client.upload_tensor("beside", "w", w, progress=False)
                y = client.execute("beside", {"x": x}).outputs["y"]
                np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)
            assert metric(port, 'einsummable_repository_models{state="READY"}') == 1
            assert metric(port, 'einsummable_repository_models{state="UNAVAILABLE"}') == 1
        finally:
            daemon.stop()
        log = daemon.log_path.read_text()
        assert "model 'bad' version 1: UNAVAILABLE" in log
        assert "bad/1/model.safetensors: tensor 'w' has shape [8, 9], but the graph declares" in log


def write_version(repo: Path, model: str, version: str, weight: np.ndarray) -> None:
    directory = repo / model / version
    directory.mkdir(parents=True)
    (directory / "graph.pbtxt").write_text(str(matmul_graph().to_graphdef()))
    write_safetensors(directory / "model.safetensors", {"w": weight})


def test_repository_calls_load_reload_and_unload(daemon_binary):
    rng = np.random.default_rng(SEED + 1)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="einsummable-repository-") as workdir:
        workdir = Path(workdir)
        repo = workdir / "repo"
        write_version(repo, "mm", "1", w)
        daemon = Daemon(daemon_binary, workdir, [f"--model_repository={repo}", "--devices=2"])
        daemon.start()
        try:
            with es.Client(daemon.address) as client:
                assert client.repository_index() == [es.RepositoryModel("mm", 1, "READY")]

                # Version 2 swaps in.
                write_version(repo, "mm", "2", 2 * w)
                assert client.load_model("mm") == es.RepositoryModel("mm", 2, "READY")
                y = client.execute("mm", {"x": x}).outputs["y"]
                np.testing.assert_allclose(y, x @ (2 * w), rtol=1e-5, atol=1e-5)

                # A bad version 3 fails naming file and tensor; version 2 keeps serving.
                write_version(repo, "mm", "3", np.zeros((8, 9), np.float32))
                with pytest.raises(
                    es.InvalidArgumentError, match=r"3/model.safetensors: tensor 'w'"
                ):
                    client.load_model("mm")
                y = client.execute("mm", {"x": x}).outputs["y"]
                np.testing.assert_allclose(y, x @ (2 * w), rtol=1e-5, atol=1e-5)
                [state] = client.repository_index()
                assert (state.version, state.state) == (2, "READY")
                assert "loading version 3 failed" in state.reason

                # Unloaded: not served, UNAVAILABLE "unloaded", not in the ready index.
                client.unload_model("mm")
                assert client.repository_index() == [
                    es.RepositoryModel("mm", 2, "UNAVAILABLE", "unloaded")
                ]
                assert client.repository_index(ready_only=True) == []
                with pytest.raises(es.NotFoundError):
                    client.execute("mm", {"x": x})

                # One name space with RegisterModel.
                client.register_model("beside", matmul_graph(), weights=["w"])
                write_version(repo, "beside", "1", w)
                with pytest.raises(es.AlreadyExistsError, match="RegisterModel"):
                    client.load_model("beside")
                with pytest.raises(es.NotFoundError):
                    client.load_model("absent")
        finally:
            daemon.stop()


def test_repository_calls_over_tritonclient(daemon_binary):
    grpcclient = pytest.importorskip(
        "tritonclient.grpc", reason="tritonclient[grpc] is not installed (scripts/requirements.txt)"
    )
    from tritonclient.utils import InferenceServerException

    rng = np.random.default_rng(SEED + 2)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="einsummable-repository-") as workdir:
        workdir = Path(workdir)
        repo = workdir / "repo"
        write_version(repo, "mm", "1", w)
        daemon = Daemon(daemon_binary, workdir, [f"--model_repository={repo}", "--devices=2"])
        daemon.start()
        try:
            triton = grpcclient.InferenceServerClient(url=daemon.address)
            index = triton.get_model_repository_index(as_json=True)
            assert index["models"] == [{"name": "mm", "version": "1", "state": "READY"}]
            write_version(repo, "mm", "2", 2 * w)
            triton.load_model("mm")
            assert triton.is_model_ready("mm")
            x = rng.standard_normal((5, 8)).astype(np.float32)
            infer_input = grpcclient.InferInput("x", list(x.shape), "FP32")
            infer_input.set_data_from_numpy(x)
            y = triton.infer("mm", [infer_input]).as_numpy("y")
            np.testing.assert_allclose(y, x @ (2 * w), rtol=1e-5, atol=1e-5)
            write_version(repo, "mm", "3", np.zeros((8, 9), np.float32))
            with pytest.raises(InferenceServerException, match="tensor 'w' has shape"):
                triton.load_model("mm")
            triton.unload_model("mm")
            assert not triton.is_model_ready("mm")
            [model] = triton.get_model_repository_index(as_json=True)["models"]
            assert (model["state"], model["reason"]) == ("UNAVAILABLE", "unloaded")
            # tritonclient has no argument for the `ready` filter: its stub, with its messages.
            from tritonclient.grpc import service_pb2

            ready = triton._client_stub.RepositoryIndex(
                service_pb2.RepositoryIndexRequest(ready=True)
            )
            assert list(ready.models) == []
            with pytest.raises(InferenceServerException, match="not supported"):
                triton.load_model("mm", config='{"max_batch_size": 4}')
            triton.close()
        finally:
            daemon.stop()


def health(address: str) -> str:
    """grpc.health.v1.Health/Check for the whole server, without generated stubs (the request is
    empty, the answer's field 1 a varint)."""
    import grpc

    with grpc.insecure_channel(address) as channel:
        answer = channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
    status = answer[1] if len(answer) >= 2 and answer[0] == 0x08 else 0
    return {1: "SERVING", 2: "NOT_SERVING"}.get(status, f"UNKNOWN({status})")


def test_the_port_answers_while_the_repository_loads(daemon_binary):
    """Loading in the background: the port answers at once, every model LOADING and none
    listed, health NOT_SERVING and KServe ServerReady false until the start-up load ends (held
    by --repository_load_gate_for_testing until the test creates the gate file), then SERVING
    with every model ready; KServe knows a model by its directory's version; graph.json and a
    sharded checkpoint with its index load like graph.pbtxt and one file."""
    rng = np.random.default_rng(SEED + 3)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="einsummable-repository-") as workdir:
        workdir = Path(workdir)
        repo = workdir / "repo"
        write_version(repo, "mm", "3", w)
        # "json": graph.json, and its weight in a sharded checkpoint with an index.
        directory = repo / "json" / "1"
        directory.mkdir(parents=True)
        (directory / "graph.json").write_text(matmul_graph().to_json())
        write_safetensors(directory / "model-00001-of-00001.safetensors", {"w": 2 * w})
        (directory / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": {"w": "model-00001-of-00001.safetensors"}})
        )
        gate = workdir / "gate"
        daemon = Daemon(
            daemon_binary,
            workdir,
            [f"--model_repository={repo}", f"--repository_load_gate_for_testing={gate}"],
        )
        daemon.start(wait_loaded=False)
        try:
            with es.Client(daemon.address) as client:
                assert client.repository_index() == [
                    es.RepositoryModel("json", 0, "LOADING"),
                    es.RepositoryModel("mm", 0, "LOADING"),
                ]
                assert client.list_models() == []
                assert health(daemon.address) == "NOT_SERVING"
                triton = None
                try:
                    import tritonclient.grpc as grpcclient

                    triton = grpcclient.InferenceServerClient(url=daemon.address)
                except ImportError:
                    pass
                if triton is not None:
                    assert triton.is_server_live()
                    assert not triton.is_server_ready()
                    assert not triton.is_model_ready("mm")
                # Registering works while the repository loads.
                client.register_model("beside", matmul_graph(), weights=["w"])

                gate.touch()
                client.wait_ready(timeout=60)
                assert client.repository_index() == [
                    es.RepositoryModel("json", 1, "READY"),
                    es.RepositoryModel("mm", 3, "READY"),
                ]
                assert health(daemon.address) == "SERVING"
                y = client.execute("json", {"x": x}).outputs["y"]
                np.testing.assert_allclose(y, x @ (2 * w), rtol=1e-5, atol=1e-5)
                if triton is not None:
                    assert triton.is_server_ready()
                    assert triton.is_model_ready("mm")
                    assert triton.is_model_ready("mm", "3")
                    assert not triton.is_model_ready("mm", "1")
                    assert triton.get_model_metadata("mm", as_json=True)["versions"] == ["3"]
                    infer_input = grpcclient.InferInput("x", list(x.shape), "FP32")
                    infer_input.set_data_from_numpy(x)
                    result = triton.infer("mm", [infer_input], model_version="3")
                    assert result.get_response().model_version == "3"
                    np.testing.assert_allclose(result.as_numpy("y"), x @ w, rtol=1e-5, atol=1e-5)
                    triton.close()
        finally:
            daemon.stop()
        log = daemon.log_path.read_text()
        assert "model repository" in log and "2 of 2 models ready" in log


def test_repository_calls_without_a_repository(daemon_client):
    with pytest.raises(es.FailedPreconditionError, match="--model_repository"):
        daemon_client.repository_index()
    with pytest.raises(es.FailedPreconditionError, match="--model_repository"):
        daemon_client.load_model("mm")
