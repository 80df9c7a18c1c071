"""The daemon started on a model repository (docs/server.md "Model repository"): the newest
numeric version of each model is served with no client, a model whose weights do not match its
graph is left out with an error naming the file and the tensor while the others serve, the
repository's metrics count both, and RegisterModel still works beside it."""

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
