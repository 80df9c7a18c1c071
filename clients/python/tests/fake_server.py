"""An in-process stand-in for einsummabled, for the client's tests that need no daemon.

It speaks service.proto with the real generated stubs over real gRPC on a loopback port and
evaluates graphs with NumPy in float64 — enough to test the client end to end (registration,
chunked uploads, symbol binding, execute, status codes) without the C++ server. It is no
model of the server's planner: ``Explain`` answers a fixed text. The status codes and the
shape of the messages follow service.proto's contract.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
import zlib
from concurrent import futures

import grpc
import numpy as np
from graph_numpy import BINARY, UNARY
from graph_numpy import attention as numpy_attention
from graph_numpy import rope as numpy_rope
from graph_numpy import write_rows as numpy_write_rows

from einsummable import _stubs
from einsummable import dtypes as _dtypes

_pb = _stubs.modules()
graph_pb2, service_pb2, service_pb2_grpc = _pb.graph_pb2, _pb.service_pb2, _pb.service_pb2_grpc

_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


class Abort(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


_AGG = {"sum": np.sum, "max": np.max, "min": np.min}


def _attr(op, name, default=None):
    if name not in op.attributes:
        return default
    value = op.attributes[name]
    which = value.WhichOneof("value")
    if which == "int_list":
        return list(value.int_list.values)
    return getattr(value, which)


def _einsum(op, xs):
    equation = _attr(op, "equation")
    lhs, out = equation.split("->")
    terms = lhs.split(",")
    order = out + "".join(dict.fromkeys(c for c in "".join(terms) if c not in out))
    sizes = {}
    for term, x in zip(terms, xs):
        sizes.update(zip(term, x.shape))
    full = []
    for term, x in zip(terms, xs):
        present = [c for c in order if c in term]
        y = np.transpose(x, [term.index(c) for c in present])
        full.append(y.reshape([sizes[c] if c in term else 1 for c in order]))
    join = _attr(op, "join", "identity" if len(xs) == 1 else "mul")
    constant = _attr(op, "constant", 0.0)
    if join in UNARY:
        joined = UNARY[join](full[0], constant)
    else:
        joined = full[0]
        for y in full[1:]:
            joined = BINARY[join](joined, y)
    joined = np.broadcast_to(joined, [sizes[c] for c in order])
    reduced = tuple(range(len(out), len(order)))
    if reduced:
        joined = _AGG[_attr(op, "agg", "sum")](joined, axis=reduced)
    return np.array(joined)


def _softmax(op, xs):
    x, axis = xs[0], _attr(op, "axis", -1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _rmsnorm(op, xs):
    x, eps = xs[0], _attr(op, "eps", 1e-5)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * xs[1]


def _layernorm(op, xs):
    x, eps = xs[0], _attr(op, "eps", 1e-5)
    centred = x - x.mean(axis=-1, keepdims=True)
    y = centred / np.sqrt(np.mean(centred**2, axis=-1, keepdims=True) + eps) * xs[1]
    return y + xs[2] if len(xs) > 2 else y


def _rope(op, xs, request_ends=None):
    x = xs[0]
    ends = _attr(op, "sequence_ends", request_ends or [x.shape[0]])
    # The frequencies with rope's scaling attributes (linear, llama3): graph_numpy's statement.
    attributes = {key: _attr(op, key) for key in op.attributes}
    return numpy_rope(x, attributes, ends, xs[1] if len(xs) > 1 else None)


def _split_heads(op, xs):
    x, heads = xs[0], _attr(op, "heads")
    return x.reshape((*x.shape[:-1], heads, x.shape[-1] // heads))


def _merge_heads(op, xs):
    x = xs[0]
    return x.reshape((*x.shape[:-2], x.shape[-2] * x.shape[-1]))


def _attention(op, xs, request_ends=None):
    q = xs[0]
    return numpy_attention(
        *xs[:3],
        _attr(op, "sequence_ends", request_ends or [q.shape[0]]),
        _attr(op, "causal", False),
        _attr(op, "scale", 1.0 / math.sqrt(q.shape[2])),
        _attr(op, "key_ends", None),
        xs[3] if len(xs) > 3 else None,
    )


def _embedding(op, xs):
    table, ids = xs
    ids = ids.astype(np.int64)
    bad = np.flatnonzero((ids < 0) | (ids >= table.shape[0]))
    if bad.size:
        raise Abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"node '{op.name}': id {ids[bad[0]]} at position {bad[0]} is outside the table's "
            f"{table.shape[0]} rows",
        )
    return table[ids]


# NumPy numerics per operator kind (docs/operators.md), the one place the fake knows a kind:
# registering and compiling take any kind, and executing a graph needs its kinds here (a new
# kind's tests that execute add a function and a line).
_NUMERICS = {
    "einsum": _einsum,
    "softmax": _softmax,
    "rmsnorm": _rmsnorm,
    "layernorm": _layernorm,
    "rope": _rope,
    "split_heads": _split_heads,
    "merge_heads": _merge_heads,
    "attention": _attention,
    "embedding": _embedding,
    "write_rows": lambda op, xs: numpy_write_rows(*xs),
}
# The kinds that take a request's sequence ends (a model with batching) when they have none.
_TAKES_SEQUENCE_ENDS = ("rope", "attention")


def _evaluate_op(op, xs, sequence_ends=None):
    numerics = _NUMERICS.get(op.kind)
    if numerics is None:
        raise Abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"node '{op.name}': unknown operator kind '{op.kind}'",
        )
    if op.kind in _TAKES_SEQUENCE_ENDS:
        return numerics(op, xs, sequence_ends)
    return numerics(op, xs)


def evaluate(graph_def, arrays: dict, sequence_ends=None) -> dict:
    """{saved name: float64 array} of ``graph_def`` on float64 ``arrays`` of every input (integer
    inputs as they are); ``sequence_ends``: the request's, for rope and attention without their
    own."""
    values = dict(arrays)
    pending = list(graph_def.operators)
    while pending:
        progressed = False
        for op in list(pending):
            if all(name in values for name in op.inputs):
                values[op.name] = _evaluate_op(
                    op, [values[name] for name in op.inputs], sequence_ends
                )
                pending.remove(op)
                progressed = True
        if not progressed:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "graph has a cycle or a missing input")
    return {name: values[name] for name in graph_def.saved}


def _input_shape(desc, dims, model):
    shape = []
    for dim_idx, dim in enumerate(desc.dims):
        if dim.WhichOneof("size") == "fixed":
            shape.append(dim.fixed)
        elif dim.symbol in dims:
            shape.append(dims[dim.symbol])
        else:
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"input tensor '{desc.name}' dimension {dim_idx} ('{dim.name or dim.symbol}'): "
                f"symbol '{dim.symbol}' is not bound (bound: "
                f"{', '.join(f'{k}={v}' for k, v in sorted(dims.items())) or 'none'})",
            )
    return tuple(shape)


class FakeEinsummable(service_pb2_grpc.EinsummableServicer):
    def __init__(self, devices=8, max_upload_bytes=1 << 30):
        self.devices = devices
        self.max_upload_bytes = max_upload_bytes
        self.models = {}
        self.plans = {}
        self.upload_chunks = []  # sizes of the data of every chunk received, for the tests
        self.upload_offsets = []  # the offset of every chunk received (None where it had none)
        self.upload_crc32s = []  # the crc32 of every upload's first chunk (None where none)
        self.lock = threading.Lock()

    # Every handler runs through _guard so that Abort turns into a status.
    def _guard(self, context, fn):
        try:
            return fn()
        except Abort as error:
            context.abort(error.code, str(error))

    def _model(self, name):
        if name not in self.models:
            raise Abort(grpc.StatusCode.NOT_FOUND, f"model '{name}' is not registered")
        return self.models[name]

    def RegisterModel(self, request, context):
        def handle():
            if not _MODEL_NAME.match(request.model):
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad model name '{request.model}'")
            if request.model in self.models:
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, f"model '{request.model}' exists")
            inputs = {t.name: t for t in request.graph.inputs}
            symbols = list(
                dict.fromkeys(
                    d.symbol
                    for t in request.graph.inputs
                    for d in t.dims
                    if d.WhichOneof("size") == "symbol"
                )
            )
            for weight in request.weights:
                if weight not in inputs:
                    raise Abort(
                        grpc.StatusCode.INVALID_ARGUMENT, f"weight '{weight}' is not a graph input"
                    )
            self.models[request.model] = {
                "graph": request.graph,
                "inputs": inputs,
                "weights": list(request.weights),
                "data": {},
                "symbols": symbols,
            }
            return service_pb2.RegisterModelResponse(
                model=request.model,
                symbols=symbols,
                inputs=[n for n in inputs if n not in request.weights],
            )

        return self._guard(context, handle)

    def UploadTensor(self, request_iterator, context):
        def handle():
            first = next(request_iterator)
            model = self._model(first.model)
            if first.name not in model["weights"]:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"'{first.name}' is not a weight")
            desc = model["inputs"][first.name]
            shape = _input_shape(desc, {}, first.model)
            if tuple(first.shape) != shape or first.dtype != desc.dtype:
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"weight '{first.name}': got {list(first.shape)}, expected {list(shape)}",
                )
            # Offsets and the checksum as service.proto's UploadTensorChunk says (the messages
            # are not the server's).
            with_offsets = first.HasField("offset")
            self.upload_crc32s.append(first.crc32 if first.HasField("crc32") else None)
            data = bytearray()
            for chunk_idx, chunk in enumerate(itertools.chain([first], request_iterator)):
                offset = chunk.offset if chunk.HasField("offset") else None
                self.upload_offsets.append(offset)
                if chunk.HasField("offset") != with_offsets:
                    raise Abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"chunk {chunk_idx}: an offset on every chunk or on none",
                    )
                if offset is not None and offset != len(data):
                    raise Abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"chunk {chunk_idx} starts at byte {offset}; expected {len(data)}",
                    )
                if chunk_idx > 0 and chunk.HasField("crc32"):
                    raise Abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"chunk {chunk_idx} carries a crc32; only the first does",
                    )
                data += chunk.data
                self.upload_chunks.append(len(chunk.data))
                if len(data) > self.max_upload_bytes:
                    raise Abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "upload too large")
            if first.HasField("crc32") and zlib.crc32(data) != first.crc32:
                raise Abort(
                    grpc.StatusCode.DATA_LOSS,
                    f"CRC-32 0x{zlib.crc32(data):08x}; the header gave 0x{first.crc32:08x}",
                )
            dtype = _dtypes.from_enum_name(graph_pb2.DType.Name(desc.dtype))
            array = _dtypes.from_bytes(bytes(data), dtype, shape)
            model["data"][first.name] = array.astype(np.float64)
            return service_pb2.UploadTensorResponse(
                model=first.model, name=first.name, bytes=len(data)
            )

        return self._guard(context, handle)

    def _plan(self, request):
        model = self._model(request.model)
        dims = dict(request.dims)
        for symbol in dims:
            if symbol not in model["symbols"]:
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"dims: '{symbol}' is not a symbol of model '{request.model}'",
                )
        for desc in model["inputs"].values():
            _input_shape(desc, dims, request.model)
        key = (
            request.model,
            tuple(sorted((s, dims[s]) for s in model["symbols"])),
            request.options.SerializeToString(deterministic=True),
        )
        hit = key in self.plans
        self.plans[key] = True
        return model, dims, str(key), hit

    def Compile(self, request, context):
        def handle():
            _, _, key, hit = self._plan(request)
            return service_pb2.CompileResponse(plan_key=key, cache_hit=hit, strategy="fake")

        return self._guard(context, handle)

    def Execute(self, request, context):
        def handle():
            model, dims, _, hit = self._plan(request)
            arrays = {}
            given = {t.name: t.tensor for t in request.inputs}
            for name, desc in model["inputs"].items():
                if name in model["weights"]:
                    if name not in model["data"]:
                        raise Abort(
                            grpc.StatusCode.FAILED_PRECONDITION, f"weight '{name}' is not uploaded"
                        )
                    arrays[name] = model["data"][name]
                    continue
                if name not in given:
                    raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"input '{name}' is missing")
                shape = _input_shape(desc, dims, request.model)
                tensor = given[name]
                if tuple(tensor.shape) != shape:
                    raise Abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"input '{name}' has shape {list(tensor.shape)}, expected {list(shape)}",
                    )
                dtype = _dtypes.from_enum_name(graph_pb2.DType.Name(tensor.dtype))
                array = _dtypes.from_bytes(tensor.data, dtype, shape)
                arrays[name] = array if _dtypes.is_integer(dtype) else array.astype(np.float64)
            results = evaluate(model["graph"], arrays, list(request.sequence_ends) or None)
            dtype_enum = model["graph"].inputs[0].dtype
            dtype = _dtypes.from_enum_name(graph_pb2.DType.Name(dtype_enum))
            wanted = list(request.outputs) or list(model["graph"].saved)
            response = service_pb2.ExecuteResponse(cache_hit=hit, execute_seconds=0.001)
            for name in wanted:
                value = results[name]
                response.outputs.add(
                    name=name,
                    tensor=service_pb2.Tensor(
                        dtype=dtype_enum,
                        shape=list(value.shape),
                        data=_dtypes.to_bytes(value, dtype),
                    ),
                )
            return response

        return self._guard(context, handle)

    def Explain(self, request, context):
        def handle():
            model, dims, key, _ = self._plan(request)
            lines = [f"fake plan for {request.model} {dims} on {request.options.devices} devices"]
            lines += [f"  {op.name}: {op.kind}" for op in model["graph"].operators]
            return service_pb2.ExplainResponse(text="\n".join(lines), predicted_cost_bytes=1.0)

        return self._guard(context, handle)

    def ListModels(self, request, context):
        response = service_pb2.ListModelsResponse()
        for name, model in self.models.items():
            response.models.add(
                model=name,
                symbols=model["symbols"],
                inputs=[n for n in model["inputs"] if n not in model["weights"]],
                weights=model["weights"],
                weights_loaded=list(model["data"]),
                saved=list(model["graph"].saved),
                plans=sum(1 for key in self.plans if key[0] == name),
            )
        return response

    def UnregisterModel(self, request, context):
        def handle():
            self._model(request.model)
            del self.models[request.model]
            return service_pb2.UnregisterModelResponse()

        return self._guard(context, handle)

    def GetServerInfo(self, request, context):
        return service_pb2.GetServerInfoResponse(
            version="fake", backend="cpu", devices=self.devices, topology="fake"
        )


class FakeServer:
    """Starts FakeEinsummable on a free loopback port; ``address`` is host:port."""

    def __init__(self, devices=8):
        self.servicer = FakeEinsummable(devices)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        service_pb2_grpc.add_EinsummableServicer_to_server(self.servicer, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self.server.start()

    def stop(self):
        self.server.stop(grace=None)
