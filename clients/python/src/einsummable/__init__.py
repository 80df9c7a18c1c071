"""Einsummable's Python client: build a computation graph, let the daemon split it across GPUs.

    import einsummable as es

    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", 1024)], "f32"), name="x")
    w1 = g.insertTensor(es.tensorDesc([("d_model", 1024), ("d_ff", 4096)], "f32"), name="w1")
    w2 = g.insertTensor(es.tensorDesc([("d_ff", 4096), ("d_model", 1024)], "f32"), name="w2")
    y = g.matmul(g.unary(g.matmul(x, w1), "relu", 0.0), w2)
    g.save(y)

    cg = es.compileGraph(g, device=[0, 1, 2, 3], schedule_mode="naive", weights=[w1, w2],
                         dims={"tokens": 64})
    cg.load(w1, ...); cg.load(w2, ...); cg.load(x, ...)
    cg.execute()
    result = cg.offload(y)
    print(cg.explain())

See clients/python/README.md.
"""

from . import errors
from .client import (
    DEFAULT_SERVER,
    Batching,
    Client,
    CompileOptions,
    CompileResult,
    ExecuteResult,
    ExplainResult,
    GeneratedToken,
    ModelInfo,
    RegisteredModel,
    RepositoryModel,
    ServerInfo,
    TokenBuckets,
    WarmUp,
)
from .compiled import CompiledGraph, compile_graph, compileGraph
from .errors import *  # noqa: F403 (the exception classes, one per status code)
from .errors import EinsummableError, GraphError
from .graph import (
    Dim,
    Graph,
    Tensor,
    TensorDesc,
    create_graph,
    createGraph,
    tensor_desc,
    tensorDesc,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SERVER",
    "Batching",
    "Client",
    "CompileOptions",
    "CompileResult",
    "CompiledGraph",
    "Dim",
    "EinsummableError",
    "ExecuteResult",
    "ExplainResult",
    "GeneratedToken",
    "Graph",
    "GraphError",
    "ModelInfo",
    "RegisteredModel",
    "RepositoryModel",
    "ServerInfo",
    "Tensor",
    "TensorDesc",
    "TokenBuckets",
    "WarmUp",
    "compileGraph",
    "compile_graph",
    "createGraph",
    "create_graph",
    "errors",
    "tensorDesc",
    "tensor_desc",
]
