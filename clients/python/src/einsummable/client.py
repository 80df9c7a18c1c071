"""``Client``: the daemon's gRPC service (proto/einsummable/v1/service.proto), one method per RPC.

Every failed call raises the ``EinsummableError`` subclass of its status code, carrying the
server's message. Arrays go in as NumPy arrays and come back as NumPy arrays (``dtypes``).
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import grpc
import numpy as np

from . import _stubs
from . import dtypes as _dtypes
from .errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    UnavailableError,
    UnimplementedError,
    from_rpc_error,
)

DEFAULT_SERVER = "127.0.0.1:50051"
# Upload stream chunks: well under gRPC's default 4 MiB message limit.
DEFAULT_CHUNK_BYTES = 1 << 20
# Uploads at least this large show a progress bar when stderr is a terminal.
PROGRESS_MIN_BYTES = 8 << 20
SCHEDULE_MODES = ("optimized", "naive", "ai")
PLANNERS = ("dp", "greedy", "random", "data-parallel", "megatron", "ulysses", "row-sharded")
# What the dp planner minimises; "cost" is the old name of "bytes", which the server still accepts.
OBJECTIVES = ("bytes", "time", "search", "cost")


def resolve_server(server: str | None = None) -> str:
    """``server``, else ``$EINSUMMABLE_SERVER``, else 127.0.0.1:50051."""
    return server or os.environ.get("EINSUMMABLE_SERVER") or DEFAULT_SERVER


@dataclass(frozen=True)
class ServerInfo:
    version: str
    backend: str
    devices: int
    topology: str
    # Device memory the daemon holds per device: plans' arenas and resident weights (once).
    device_memory_bytes: tuple = ()
    # Bytes each device may hold; empty where the daemon knows no capacity.
    device_memory_capacity_bytes: tuple = ()
    # What runs the kernels: on the CPU backend the gemm library and its kernel family.
    kernels: str = ""
    # Bucket plans every model's warm-up still has to compile.
    warm_up_pending: int = 0
    # Generate's key/value caches: generations at once per model pool (0: Generate recomputes),
    # tokens per generation, and slots holding a generation now over every pool.
    generation_slots: int = 0
    generation_capacity: int = 0
    generation_slots_in_use: int = 0
    # Their pages: tokens per page, pages per pool, and pages reserved now over every pool.
    generation_page_size: int = 0
    generation_pages: int = 0
    generation_pages_in_use: int = 0


@dataclass(frozen=True)
class TokenBuckets:
    """Token buckets of a model with batching (docs/server.md, "Token buckets"): an execute of
    t tokens runs padded to the smallest bucket of at least t, its padding a sequence of its own,
    and its outputs are cut back, so one plan per bucket serves every length.

    ``sizes``: the buckets, strictly increasing; or, when empty, ``min_tokens`` (0 = 16) times
    ``growth`` (0 = 1.25) again and again, rounded up, up to ``max_tokens`` (0 = 4096).
    ``TokenBuckets()`` is the default 16, 20, 25, 32, 40, ..., 4096 (26 buckets).
    ``warm_up``: the server compiles every bucket's plan in the background after registration,
    smallest first (``ModelInfo.warm_up``, ``Client.wait_for_warm_up``); False leaves each to
    the first request that needs it.
    """

    sizes: tuple = ()
    min_tokens: int = 0
    max_tokens: int = 0
    growth: float = 0.0
    warm_up: bool = True

    def to_proto(self, pb):
        return pb.TokenBuckets(
            sizes=list(self.sizes),
            min_tokens=self.min_tokens,
            max_tokens=self.max_tokens,
            growth=self.growth,
            skip_warm_up=not self.warm_up,
        )

    @classmethod
    def from_proto(cls, buckets) -> TokenBuckets:
        return cls(
            tuple(buckets.sizes),
            buckets.min_tokens,
            buckets.max_tokens,
            buckets.growth,
            not buckets.skip_warm_up,
        )


@dataclass(frozen=True)
class WarmUp:
    """The background compiles of a model's bucket plans (``TokenBuckets.warm_up``).

    ``state``: "none" (no warm-up), "running", "done" (every bucket compiled or failed) or
    "stopped" (``message`` says why; the rest compile when a request needs them). ``ready``,
    ``pending`` (the one compiling first) and ``failed`` are bucket sizes.
    """

    state: str = "none"
    ready: tuple = ()
    pending: tuple = ()
    failed: tuple = ()
    message: str = ""

    @classmethod
    def from_proto(cls, warm_up) -> WarmUp:
        states = {0: "none", 1: "running", 2: "done", 3: "stopped"}
        return cls(
            states.get(warm_up.state, str(warm_up.state)),
            tuple(warm_up.ready),
            tuple(warm_up.pending),
            tuple(warm_up.failed),
            warm_up.message,
        )


@dataclass(frozen=True)
class Batching:
    """Dynamic batching for ``register_model`` (docs/server.md, "Dynamic batching").

    ``dimension``: the symbol requests are packed along (e.g. "tokens"): the first dimension of
    every input and saved tensor. ``preferred_batch_sizes``: requests per execution a shorter
    batch is completed to with idle requests, bounding the plans compiled. ``max_batch_size``:
    the most requests per execution (0 = the largest preferred size, or 8). ``max_queue_delay_us``:
    how long a batch's first request waits for others (None = the server's
    ``--max_queue_delay_us``). ``buckets``: token buckets (``TokenBuckets``; None = none, every
    length its own plan); ListModels gives the sizes the server resolved.
    """

    dimension: str
    preferred_batch_sizes: tuple = ()
    max_batch_size: int = 0
    max_queue_delay_us: int | None = None
    buckets: TokenBuckets | None = None

    def to_proto(self, pb):
        batching = pb.Batching(
            dimension=self.dimension,
            preferred_batch_size=list(self.preferred_batch_sizes),
            max_batch_size=self.max_batch_size,
        )
        if self.max_queue_delay_us is not None:
            batching.max_queue_delay_us = self.max_queue_delay_us
        if self.buckets is not None:
            batching.buckets.CopyFrom(self.buckets.to_proto(pb))
        return batching

    @classmethod
    def from_proto(cls, batching) -> Batching:
        return cls(
            batching.dimension,
            tuple(batching.preferred_batch_size),
            batching.max_batch_size,
            batching.max_queue_delay_us if batching.HasField("max_queue_delay_us") else None,
            TokenBuckets.from_proto(batching.buckets) if batching.HasField("buckets") else None,
        )


@dataclass(frozen=True)
class ModelInfo:
    model: str
    symbols: tuple
    inputs: tuple
    weights: tuple
    weights_loaded: tuple
    saved: tuple
    plans: int
    # As the server resolved it; None for a model without batching.
    batching: Batching | None = None
    # Its token buckets' background compiles.
    warm_up: WarmUp = WarmUp()


@dataclass(frozen=True)
class RepositoryModel:
    """A model of the daemon's ``--model_repository`` (docs/server.md "Model repository")."""

    model: str
    # The version served (READY), or the one that failed or was unloaded; 0 if none was chosen.
    version: int
    # "LOADING", "READY" or "UNAVAILABLE".
    state: str
    # Why it is UNAVAILABLE ("unloaded", "not loaded", or the file and tensor at fault), or why
    # the last load of a READY model failed.
    reason: str = ""

    @classmethod
    def from_proto(cls, pb) -> RepositoryModel:
        return cls(pb.model, pb.version, pb.state, pb.reason)


@dataclass(frozen=True)
class RegisteredModel:
    model: str
    symbols: tuple
    inputs: tuple


@dataclass(frozen=True)
class CompileResult:
    plan_key: str
    cache_hit: bool
    compile_seconds: float
    strategy: str
    simulated_exchange_seconds: float


@dataclass(frozen=True)
class ExecuteResult:
    outputs: dict = field(repr=False)
    cache_hit: bool
    execute_seconds: float
    # A model with batching: requests its execution answered (this one included), the idle
    # requests that completed it to a preferred size, and the time this one waited for it.
    batch_size: int = 0
    batch_padding: int = 0
    queue_seconds: float = 0.0


@dataclass(frozen=True)
class GeneratedToken:
    """One token of a generation, as the server streams it: its id, its place (0 = the first new
    token), why the generation ended ("length" or "stop", on the last token only) and the seconds
    from the request's start (the first token's: time to first token)."""

    token_id: int
    index: int
    finish_reason: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class ExplainResult:
    text: str
    predicted_cost_bytes: float
    simulated_exchange_seconds: float

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class CompileOptions:
    """How to compile a shape; fields left ``None`` take the server's defaults.

    ``devices``: how many devices to split every operator across (0 or None = all).
    ``planner``: "dp" (default), "greedy", "random" or a hand-written baseline ("data-parallel",
    "megatron", "ulysses", "row-sharded"). ``schedule``: "optimized" (default), "naive" or "ai"
    (= optimized). ``seed``: for the random planner and the synthesis search. ``objective``:
    what the dp planner minimises, "time" (the server's default, sent as "": the dynamic
    programme over predicted time on the server's topology), "bytes" (the paper's cost in bytes;
    "cost" is its old name) or "search" (whole-plan simulated time, searched; slower to
    compile). Other planners give their own plan whatever it is. Plans of the objectives are
    cached apart.
    """

    devices: int | None = None
    planner: str | None = None
    schedule: str | None = None
    seed: int | None = None
    objective: str | None = None

    def __post_init__(self):
        if self.devices is not None and (isinstance(self.devices, bool) or self.devices < 0):
            raise ValueError(f"devices must be a non-negative count, got {self.devices!r}")
        if self.planner is not None and self.planner not in PLANNERS:
            raise ValueError(f"planner {self.planner!r}: expected one of {', '.join(PLANNERS)}")
        if self.objective is not None and self.objective not in OBJECTIVES:
            raise ValueError(
                f"objective {self.objective!r}: expected one of {', '.join(OBJECTIVES)}"
            )
        if self.schedule is not None and self.schedule not in SCHEDULE_MODES:
            raise ValueError(
                f"schedule_mode {self.schedule!r}: expected one of {', '.join(SCHEDULE_MODES)}"
            )
        if self.seed is not None and self.seed < 0:
            raise ValueError(f"seed must be non-negative, got {self.seed}")

    def to_proto(self):
        pb = _stubs.modules().service_pb2
        return pb.CompileOptions(
            devices=self.devices or 0,
            planner=self.planner or "",
            schedule=self.schedule or "",
            seed=self.seed or 0,
            objective=self.objective or "",
        )


def _options(options) -> CompileOptions:
    if options is None:
        return CompileOptions()
    if isinstance(options, CompileOptions):
        return options
    if isinstance(options, Mapping):
        return CompileOptions(**options)
    raise TypeError(f"options must be CompileOptions or a dict, got {type(options).__name__}")


def _dims(dims) -> dict:
    out = {}
    for symbol, size in (dims or {}).items():
        if isinstance(size, bool) or not hasattr(size, "__index__"):
            raise ValueError(f"dims[{symbol!r}] must be an integer, got {size!r}")
        out[str(symbol)] = int(size)
    return out


def _wants_progress(progress, nbytes: int) -> bool:
    if progress is not None:
        return bool(progress)
    try:
        return nbytes >= PROGRESS_MIN_BYTES and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Client:
    """A connection to an einsummabled daemon.

    ``server`` is ``host:port`` (default ``$EINSUMMABLE_SERVER`` or 127.0.0.1:50051); ``token``
    (default ``$EINSUMMABLE_TOKEN``) is sent as ``authorization: Bearer <token>`` on every call;
    ``timeout`` (seconds) bounds every call, none by default. ``tls=True`` connects with TLS
    against the system's roots, ``root_certificates`` (PEM bytes or a file path) against those.
    """

    def __init__(
        self,
        server: str | None = None,
        *,
        token: str | None = None,
        timeout: float | None = None,
        tls: bool | None = None,
        root_certificates=None,
        channel_options: Iterable = (),
    ):
        self.server = resolve_server(server)
        self.timeout = timeout
        token = token if token is not None else os.environ.get("EINSUMMABLE_TOKEN")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        options = [
            # Outputs can be larger than gRPC's 4 MiB default; the server bounds what it sends
            # (--max_message_bytes).
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
            *channel_options,
        ]
        self._pb = _stubs.modules()
        if tls or root_certificates is not None:
            if isinstance(root_certificates, (str, os.PathLike)):
                with open(root_certificates, "rb") as f:
                    root_certificates = f.read()
            credentials = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self._channel = grpc.secure_channel(self.server, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(self.server, options=options)
        self._stub = self._pb.service_pb2_grpc.EinsummableStub(self._channel)

    # ---- plumbing ----------------------------------------------------------------------------

    def _call(self, method: str, request, timeout=None):
        rpc = getattr(self._stub, method)
        try:
            return rpc(
                request,
                timeout=timeout if timeout is not None else self.timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as error:
            raise from_rpc_error(error, method) from None

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.server!r})"

    def wait_ready(self, timeout: float = 10.0, repository: bool = True) -> Client:
        """Waits until the server answers GetServerInfo and, with ``repository``, until the
        models of its ``--model_repository`` have loaded: the daemon answers while they load
        in the background, each model LOADING until it is READY or UNAVAILABLE (docs/server.md
        "Model repository"); a daemon without a repository has nothing to wait for. Raises
        ``UnavailableError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last = None
        answered = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not answered:
                raise UnavailableError(
                    f"no answer from {self.server} within {timeout:g} s"
                    + (f" (last error: {last.details})" if last else ""),
                    method="GetServerInfo",
                )
            if remaining <= 0:
                raise UnavailableError(
                    f"{self.server}: its model repository is still loading after {timeout:g} s "
                    f"({last})",
                    method="RepositoryIndex",
                )
            try:
                if not answered:
                    self._call(
                        "GetServerInfo",
                        self._pb.service_pb2.GetServerInfoRequest(),
                        timeout=min(remaining, 2.0),
                    )
                    answered = True
                if not repository:
                    return self
                try:
                    r = self._call(
                        "RepositoryIndex",
                        self._pb.service_pb2.RepositoryIndexRequest(),
                        timeout=min(remaining, 2.0),
                    )
                except (FailedPreconditionError, UnimplementedError):
                    return self  # no repository (or a daemon older than repositories)
                loading = [m.model for m in r.models if m.state == "LOADING"]
                if not loading:
                    return self
                last = f"LOADING: {', '.join(loading)}"
                time.sleep(min(0.05, max(remaining, 0)))
            except (UnavailableError, DeadlineExceededError) as error:
                last = error if not answered else str(error)
                time.sleep(min(0.05, max(remaining, 0)))

    # ---- the service -------------------------------------------------------------------------

    def server_info(self) -> ServerInfo:
        r = self._call("GetServerInfo", self._pb.service_pb2.GetServerInfoRequest())
        return ServerInfo(
            r.version,
            r.backend,
            r.devices,
            r.topology,
            tuple(r.device_memory_bytes),
            tuple(r.device_memory_capacity_bytes),
            r.kernels,
            r.warm_up_pending,
            r.generation_slots,
            r.generation_capacity,
            r.generation_slots_in_use,
            r.generation_page_size,
            r.generation_pages,
            r.generation_pages_in_use,
        )

    def list_models(self) -> list[ModelInfo]:
        r = self._call("ListModels", self._pb.service_pb2.ListModelsRequest())
        return [
            ModelInfo(
                m.model,
                tuple(m.symbols),
                tuple(m.inputs),
                tuple(m.weights),
                tuple(m.weights_loaded),
                tuple(m.saved),
                m.plans,
                Batching.from_proto(m.batching) if m.HasField("batching") else None,
                WarmUp.from_proto(m.warm_up),
            )
            for m in r.models
        ]

    def wait_for_warm_up(
        self, model: str, timeout_s: float = 600.0, poll_s: float = 0.05
    ) -> WarmUp:
        """Polls ``list_models`` until ``model``'s warm-up is no longer running and returns its
        state; raises ``TimeoutError`` after ``timeout_s`` seconds, ``KeyError`` when the model is
        not registered."""
        deadline = time.monotonic() + timeout_s
        while True:
            infos = {m.model: m for m in self.list_models()}
            if model not in infos:
                raise KeyError(f"model '{model}' is not registered")
            warm_up = infos[model].warm_up
            if warm_up.state != "running":
                return warm_up
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"model '{model}': warm-up still running after {timeout_s} s "
                    f"(ready {warm_up.ready}, pending {warm_up.pending})"
                )
            time.sleep(poll_s)

    def register_model(
        self,
        model: str,
        graph,
        weights: Iterable[str] = (),
        batching: Batching | None = None,
        options=None,
    ) -> RegisteredModel:
        """Registers ``graph`` (a ``Graph`` or a ``GraphDef``) as ``model``; ``weights`` are the
        inputs uploaded once with ``upload_tensor`` rather than sent with every execute;
        ``batching`` (a ``Batching``) lets concurrent executes run as one; ``options`` (a
        ``CompileOptions`` or a dict of its fields) are the model's compile options, which each
        field a request leaves unset takes."""
        graph_def = graph.to_graphdef() if hasattr(graph, "to_graphdef") else graph
        pb = self._pb.service_pb2
        request = pb.RegisterModelRequest(model=model, graph=graph_def, weights=list(weights))
        if batching is not None:
            request.batching.CopyFrom(batching.to_proto(pb))
        if options is not None:
            request.options.CopyFrom(_options(options).to_proto())
        r = self._call("RegisterModel", request)
        return RegisteredModel(r.model, tuple(r.symbols), tuple(r.inputs))

    def unregister(self, model: str) -> None:
        self._call("UnregisterModel", self._pb.service_pb2.UnregisterModelRequest(model=model))

    unregister_model = unregister

    def repository_index(self, ready_only: bool = False) -> list[RepositoryModel]:
        """Every model of the daemon's ``--model_repository`` with its version, state and
        reason, by name; only the READY ones with ``ready_only``. Raises
        ``FailedPreconditionError`` when the daemon runs without a repository."""
        r = self._call(
            "RepositoryIndex", self._pb.service_pb2.RepositoryIndexRequest(ready_only=ready_only)
        )
        return [RepositoryModel.from_proto(m) for m in r.models]

    def load_model(self, model: str) -> RepositoryModel:
        """Loads or reloads ``model`` from the repository, its newest version checked whole
        first: on success it serves in place of the old version; on failure the old version
        keeps serving and the error names the file and tensor. ``AlreadyExistsError`` when a
        model registered with ``register_model`` holds the name."""
        r = self._call(
            "RepositoryModelLoad", self._pb.service_pb2.RepositoryModelLoadRequest(model=model)
        )
        return RepositoryModel.from_proto(r.model)

    def unload_model(self, model: str) -> None:
        """Unregisters a repository model: UNAVAILABLE with reason "unloaded"."""
        self._call(
            "RepositoryModelUnload", self._pb.service_pb2.RepositoryModelUnloadRequest(model=model)
        )

    def upload_tensor(
        self,
        model: str,
        name: str,
        array,
        dtype=None,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        progress: bool | None = None,
    ) -> int:
        """Streams weight ``name`` of ``model`` in chunks; returns the bytes the server stored.

        ``dtype`` defaults to the array's ("f32" for float32, ...). A progress bar (tqdm) shows
        when ``progress`` is true, or by default for large uploads when stderr is a terminal.
        """
        array = np.asarray(array)
        dtype = _dtypes.normalize(dtype if dtype is not None else array.dtype)
        data = memoryview(_dtypes.to_bytes(array, dtype))
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
        pb = self._pb.service_pb2
        bar = None
        if _wants_progress(progress, len(data)):
            from tqdm.auto import tqdm

            bar = tqdm(
                total=len(data),
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=f"upload {name}",
                leave=False,
            )

        # Every chunk says where it starts and the first gives the CRC-32 of the whole tensor,
        # so the server refuses a lost, repeated or corrupted chunk (UploadTensorChunk).
        checksum = zlib.crc32(data)

        def chunks():
            yield pb.UploadTensorChunk(
                model=model,
                name=name,
                dtype=_dtypes.enum_name(dtype),
                shape=list(array.shape),
                data=bytes(data[:chunk_bytes]),
                offset=0,
                crc32=checksum,
            )
            if bar is not None:
                bar.update(min(chunk_bytes, len(data)))
            for start in range(chunk_bytes, len(data), chunk_bytes):
                piece = data[start : start + chunk_bytes]
                yield pb.UploadTensorChunk(data=bytes(piece), offset=start)
                if bar is not None:
                    bar.update(len(piece))

        try:
            r = self._call("UploadTensor", chunks())
        finally:
            if bar is not None:
                bar.close()
        return r.bytes

    def compile(
        self, model: str, dims=None, options=None, sequence_ends: Iterable[int] = ()
    ) -> CompileResult:
        r = self._call(
            "Compile",
            self._pb.service_pb2.CompileRequest(
                model=model,
                dims=_dims(dims),
                options=_options(options).to_proto(),
                sequence_ends=list(sequence_ends),
            ),
        )
        return CompileResult(
            r.plan_key, r.cache_hit, r.compile_seconds, r.strategy, r.simulated_exchange_seconds
        )

    def execute(
        self,
        model: str,
        inputs: Mapping,
        dims=None,
        options=None,
        outputs: Iterable[str] = (),
        dtypes: Mapping | None = None,
        sequence_ends: Iterable[int] = (),
    ) -> ExecuteResult:
        """Runs ``model`` on ``inputs`` (name -> array) and returns its saved tensors.

        Each input is sent as ``dtypes[name]`` if given, else as its array's dtype. For a model
        with batching, ``sequence_ends`` says where the request's sequences end along the batch
        dimension (default: one sequence)."""
        pb = self._pb.service_pb2
        request = pb.ExecuteRequest(
            model=model,
            dims=_dims(dims),
            options=_options(options).to_proto(),
            outputs=list(outputs),
            sequence_ends=list(sequence_ends),
        )
        for name, array in inputs.items():
            array = np.asarray(array)
            dtype = _dtypes.normalize((dtypes or {}).get(name, array.dtype))
            request.inputs.add(
                name=name,
                tensor=pb.Tensor(
                    dtype=_dtypes.enum_name(dtype),
                    shape=list(array.shape),
                    data=_dtypes.to_bytes(array, dtype),
                ),
            )
        r = self._call("Execute", request)
        outputs = {}
        for named in r.outputs:
            dtype = _dtypes.from_enum_name(self._pb.graph_pb2.DType.Name(named.tensor.dtype))
            outputs[named.name] = _dtypes.from_bytes(named.tensor.data, dtype, named.tensor.shape)
        return ExecuteResult(
            outputs,
            r.cache_hit,
            r.execute_seconds,
            r.batch_size,
            r.batch_padding,
            r.queue_seconds,
        )

    def generate(
        self,
        model: str,
        prompt_ids: Iterable[int],
        max_tokens: int = 0,
        stop_ids: Iterable[int] = (),
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 0.0,
        seed: int = 0,
        options=None,
    ) -> Iterator[GeneratedToken]:
        """Generates tokens after ``prompt_ids`` with ``model`` (a model whose input is token ids
        and whose output is logits, e.g. a converted LLaMA: docs/generation.md), yielding each
        token as the server streams it.

        ``temperature`` 0 (default) is greedy; otherwise tokens are drawn from the tempered
        softmax cut to ``top_k`` (0: all) and ``top_p`` (0: all), seeded by ``seed``.
        ``max_tokens`` 0 is the server's maximum (4096); generation ends after a token in
        ``stop_ids``. Leaving the loop early cancels the generation on the server."""
        pb = self._pb.service_pb2
        request = pb.GenerateRequest(
            model=model,
            prompt_ids=[int(i) for i in prompt_ids],
            max_tokens=max_tokens,
            stop_ids=[int(i) for i in stop_ids],
            sampling=pb.Sampling(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed),
            options=_options(options).to_proto(),
        )
        stream = self._stub.Generate(request, timeout=self.timeout, metadata=self._metadata)
        try:
            for r in stream:
                yield GeneratedToken(r.token_id, r.index, r.finish_reason, r.seconds)
        except grpc.RpcError as error:
            raise from_rpc_error(error, "Generate") from None
        finally:
            stream.cancel()

    def explain(
        self, model: str, dims=None, options=None, sequence_ends: Iterable[int] = ()
    ) -> ExplainResult:
        r = self._call(
            "Explain",
            self._pb.service_pb2.ExplainRequest(
                model=model,
                dims=_dims(dims),
                options=_options(options).to_proto(),
                sequence_ends=list(sequence_ends),
            ),
        )
        return ExplainResult(r.text, r.predicted_cost_bytes, r.simulated_exchange_seconds)
