"""``compileGraph``: registers a graph with the daemon, compiles it, and runs it.

    cg = es.compileGraph(g, device=[0, 1, 2, 3], schedule_mode="naive", weights=[w1, w2],
                         dims={"tokens": 64})
    cg.load(w1, w1_array)   # a weight: uploaded now, once
    cg.load(x, x_array)     # any other input: kept here and sent with every execute
    cg.execute()
    y_array = cg.offload(y)
    print(cg.explain())

Symbols (``tokens``) are bound by ``dims`` or, at execute, by the shapes of the loaded arrays:
loading an input of another size and executing again runs the other shape (the server
compiles it once and caches the plan).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Mapping

import numpy as np

from .client import Client, CompileOptions, CompileResult, ExplainResult
from .errors import EinsummableError, GraphError, NotFoundError
from .graph import Graph, Tensor

_MODEL_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def _device_count(device) -> int | None:
    if device is None:
        return None
    if isinstance(device, bool):
        raise ValueError(f"device must be a count or a list of device ids, got {device!r}")
    if hasattr(device, "__index__"):
        count = int(device)
        if count < 0:
            raise ValueError(f"device count must be >= 0, got {count}")
        return count
    ids = [int(d) for d in device]
    if not ids:
        raise ValueError("device is an empty list; give the devices to use, e.g. [0, 1, 2, 3]")
    if sorted(ids) != list(range(len(ids))):
        raise ValueError(
            f"device={ids}: the server splits a plan across devices 0..n-1 and takes only their "
            f"count; pass device={len(ids)} or device=list(range({len(ids)}))"
        )
    return len(ids)


class CompiledGraph:
    """A graph registered with the daemon as ``model``: load inputs, execute, offload outputs."""

    def __init__(
        self,
        client: Client,
        graph: Graph,
        model: str,
        weights,
        dims: dict,
        options: CompileOptions,
        owns_client: bool,
    ):
        self.client = client
        self.graph = graph
        self.model = model
        self.options = options
        self.dims = dict(dims)
        self.weights = tuple(weights)
        self.compile_result: CompileResult | None = None
        self.last_execute = None
        self._owns_client = owns_client
        self._loaded_weights: set[str] = set()
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"CompiledGraph(model={self.model!r}, server={self.client.server!r}, dims={self.dims})"
        )

    def _input(self, tensor, what: str) -> Tensor:
        name = tensor.name if isinstance(tensor, Tensor) else tensor
        if isinstance(tensor, Tensor) and tensor.graph is not self.graph:
            raise GraphError(f"{what}: tensor '{name}' belongs to another graph")
        return self.graph.tensor(name)

    def compile(self, dims: Mapping | None = None) -> CompileResult:
        """Compiles the shape ``dims`` binds (default: the current ``dims``) on the server."""
        if dims is not None:
            self.dims = {**self.dims, **dims}
        missing = [s for s in self.graph.symbols() if s not in self.dims]
        if missing:
            raise ValueError(
                f"compile: symbols {missing} are not bound; pass dims={{{missing[0]!r}: size}}"
            )
        self.compile_result = self.client.compile(self.model, self.dims, self.options)
        return self.compile_result

    def load(self, tensor, array, *, progress: bool | None = None) -> None:
        """Gives input ``tensor`` (a Tensor or its name) the values of ``array``.

        A weight is uploaded now (in chunks; a progress bar for large uploads when stderr is a
        terminal, or when ``progress`` is true); any other input is kept here and sent with
        every ``execute``. The array is converted to the tensor's dtype.
        """
        t = self._input(tensor, "load")
        if not t.is_input:
            raise GraphError(
                f"load: '{t.name}' is computed by the graph ({t.producer}); only inputs can be "
                f"loaded (inputs: {', '.join(i.name for i in self.graph.inputs)})"
            )
        array = np.asarray(array)
        if array.ndim != t.rank:
            raise ValueError(
                f"load '{t.name}' {t.type_string()}: the array has rank {array.ndim} "
                f"(shape {array.shape}), the tensor {t.rank}"
            )
        for axis, (dim, size) in enumerate(zip(t.dims, array.shape)):
            if not dim.symbolic and dim.size != size:
                raise ValueError(
                    f"load '{t.name}' {t.type_string()}: dimension {axis} ('{dim.name}') is "
                    f"{dim.size}, the array has {size} (shape {array.shape})"
                )
        if array.dtype.kind not in "fiub":
            raise TypeError(f"load '{t.name}': cannot send an array of {array.dtype}")
        if t.name in self.weights:
            self.client.upload_tensor(self.model, t.name, array, t.dtype, progress=progress)
            self._loaded_weights.add(t.name)
        else:
            self._inputs[t.name] = array
        self._outputs = None

    def _bound_dims(self) -> dict:
        """``dims``, overridden by the sizes the loaded arrays give their symbols."""
        bound: dict[str, tuple[int, str]] = {}
        for name, array in self._inputs.items():
            for axis, dim in enumerate(self.graph.tensor(name).dims):
                if not dim.symbolic:
                    continue
                size = int(array.shape[axis])
                if dim.size in bound and bound[dim.size][0] != size:
                    other_size, other = bound[dim.size]
                    raise ValueError(
                        f"symbol '{dim.size}' is {other_size} in the array loaded for '{other}' "
                        f"but {size} in the one for '{name}' (dimension {axis})"
                    )
                bound[dim.size] = (size, name)
        return {**self.dims, **{symbol: size for symbol, (size, _) in bound.items()}}

    def execute(self, outputs=None) -> dict:
        """Runs the graph on the loaded inputs; returns {name: array} of the saved tensors
        (also kept for ``offload``). ``outputs`` limits which saved tensors come back."""
        missing = [
            t.name
            for t in self.graph.inputs
            if t.name not in self._inputs and t.name not in self.weights
        ]
        if missing:
            raise ValueError(
                f"execute: inputs {missing} are not loaded; call load(tensor, array) first"
            )
        unloaded = [w for w in self.weights if w not in self._loaded_weights]
        if unloaded:
            raise ValueError(
                f"execute: weights {unloaded} are not uploaded; call load(tensor, array) first"
            )
        dims = self._bound_dims()
        names = None
        if outputs is not None:
            items = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            names = [self._saved_name(o, "execute") for o in items]
        dtypes = {name: self.graph.tensor(name).dtype for name in self._inputs}
        result = self.client.execute(
            self.model, self._inputs, dims, self.options, names or (), dtypes
        )
        self.dims = dims
        self.last_execute = result
        self._outputs = dict(result.outputs)
        return dict(result.outputs)

    def _saved_name(self, tensor, what: str) -> str:
        t = self._input(tensor, what)
        if t.name not in {s.name for s in self.graph.saved}:
            raise GraphError(
                f"{what}: '{t.name}' is not saved; save it with g.save({t.name}) before "
                f"compileGraph (saved: {', '.join(s.name for s in self.graph.saved)})"
            )
        return t.name

    def offload(self, tensor) -> np.ndarray:
        """The value of saved ``tensor`` from the last ``execute`` (f32 -> float32, f16 ->
        float16, bf16 -> float32, f64 -> float64)."""
        name = self._saved_name(tensor, "offload")
        if self._outputs is None:
            raise RuntimeError(
                f"offload '{name}': nothing executed since the last load; call execute() first"
            )
        if name not in self._outputs:
            raise RuntimeError(f"offload '{name}': the last execute did not return it")
        return self._outputs[name]

    def explain(self, dims: Mapping | None = None) -> str:
        """The server's description of the plan for ``dims`` (default: the shape last compiled
        or executed): per operator the split of each index and its cost, the exchange programs
        with simulated times, bytes per device pair and peak memory."""
        return self.explain_result(dims).text

    def explain_result(self, dims: Mapping | None = None) -> ExplainResult:
        bound = {**self.dims, **(dims or {})}
        if not dims and self._inputs:
            bound = {**self._bound_dims(), **(dims or {})}
        missing = [s for s in self.graph.symbols() if s not in bound]
        if missing:
            raise ValueError(f"explain: symbols {missing} are not bound; pass dims=")
        return self.client.explain(self.model, bound, self.options)

    def unregister(self) -> None:
        """Removes the model from the server (its weights and plans); idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.client.unregister(self.model)
        except NotFoundError:
            pass
        finally:
            if self._owns_client:
                self.client.close()

    close = unregister

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.unregister()
        except EinsummableError:
            if exc[0] is None:
                raise


def compileGraph(
    graph: Graph,
    device=None,
    schedule_mode: str | None = None,
    *,
    server: str | None = None,
    planner: str | None = None,
    objective: str | None = None,
    dims=None,
    weights=(),
    token: str | None = None,
    seed: int | None = None,
    name: str = "graph",
    client: Client | None = None,
    timeout: float | None = None,
    tls: bool | None = None,
    root_certificates=None,
) -> CompiledGraph:
    """Registers ``graph`` with the daemon under a generated unique model name and compiles it.

    ``device``: the devices to split across, a list ``[0, 1, ..., n-1]`` or a count (default:
    all the server's). ``schedule_mode``: "optimized" (server default), "naive" or "ai".
    ``planner``: "dp" (default), "greedy", "random" or a hand-written baseline ("data-parallel",
    "megatron", "ulysses", "row-sharded"). ``objective``: what the dp planner minimises, "time"
    (the server's default: the dynamic programme over predicted time on the server's topology),
    "bytes" (the paper's cost in bytes; "cost" is its old name) or "search" (whole-plan
    simulated time, searched; slower to compile). ``dims``: sizes of the graph's symbols;
    without them a symbolic graph is compiled at its first execute, for the loaded shapes.
    ``weights``: inputs uploaded once by ``load`` rather than sent with every execute. ``server``
    (default ``$EINSUMMABLE_SERVER`` or 127.0.0.1:50051), ``token`` (bearer token), ``tls`` /
    ``root_certificates`` (see ``Client``), or an existing ``client``. ``name`` prefixes the
    model name. On an error after registering, the model is unregistered again.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"compileGraph takes a Graph, got {type(graph).__name__}")
    options = CompileOptions(
        devices=_device_count(device),
        planner=planner,
        schedule=schedule_mode,
        seed=seed,
        objective=objective,
    )
    graph_def = graph.to_graphdef()  # raises GraphError for a graph that saves nothing
    weight_names = []
    for w in weights:
        t = graph.tensor(w.name if isinstance(w, Tensor) else w)
        if not t.is_input:
            raise GraphError(f"weight '{t.name}' is computed by the graph; weights are inputs")
        if t.symbols:
            raise GraphError(
                f"weight '{t.name}' {t.type_string()} has symbolic dimensions; weights must have "
                "fixed sizes"
            )
        if t.name not in weight_names:
            weight_names.append(t.name)
    dims = dict(dims or {})
    unknown = [symbol for symbol in dims if symbol not in graph.symbols()]
    if unknown:  # the daemon rejects them too
        raise ValueError(
            f"dims: {unknown} are not symbols of the graph (symbols: "
            f"{', '.join(graph.symbols()) or 'none'})"
        )
    prefix = _MODEL_NAME.sub("_", name)[:80] or "graph"
    model = f"{prefix}-{uuid.uuid4().hex[:12]}"

    owns_client = client is None
    if client is None:
        client = Client(
            server, token=token, timeout=timeout, tls=tls, root_certificates=root_certificates
        )
    try:
        client.register_model(model, graph_def, weight_names)
    except BaseException:
        if owns_client:
            client.close()
        raise
    compiled = CompiledGraph(client, graph, model, weight_names, dims, options, owns_client)
    try:
        if all(s in dims for s in graph.symbols()):
            compiled.compile()
    except BaseException:
        with contextlib.suppress(EinsummableError):
            compiled.unregister()
        raise
    return compiled


compile_graph = compileGraph

__all__ = ["CompiledGraph", "compileGraph", "compile_graph"]
