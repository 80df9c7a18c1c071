"""Soak: good, bad and abandoned requests from 32 clients for a few minutes against one
einsummabled, then the daemon must be as it started (docs/server.md "Testing"). Run it as
``scripts/soak`` (``--seconds``, ``--seed``, ``--clients``); it is not part of scripts/test.

A daemon of its own (``$EINSUMMABLE_DAEMON``, default build/bin/einsummabled) on a free loopback
port, with a metrics port, a temporary plan cache directory and limits small enough to be reached
on a 2-core machine (16 work slots, 4 upload slots, a 16 MiB upload budget, a 3 s upload idle
timeout, 2 compile threads, 16 plans in memory, 4 CPU devices; MALLOC_ENV says why glibc's mmap
threshold is fixed). Setup registers the paper's FFN
(proto/examples/ffn.textproto; weights w1, w2 uploaded through the client) and a few helper
models, runs one good request per shape the clients use (so those plans are cached), and reads
the daemon's VmRSS as the start value.

Then every client thread picks, at random from its own seed (``[seed, client]``), one request
kind after another (KINDS: good ones checked against NumPy, bad ones of many sorts, each with its
expected status code, abandoned ones: short deadlines, cancels, idle and disconnected upload
streams, compiles of new expensive shapes nobody waits for). A RESOURCE_EXHAUSTED that names a
concurrency limit or the upload budget is allowed for any request except probes (counted as
``busy``); any other code outside a kind's expected set, and any wrong number, is a failure.

Afterwards, once abandoned work has drained: no request in flight, no compile running or queued,
no upload bytes held (metrics), health SERVING, every work and upload slot can be taken again,
good requests answer correctly (and the weight every bad upload aimed at is unchanged), no
INTERNAL answer, VmRSS within +10% of the start, and SIGTERM exits 0. Exit status 0 only when
every check passes. The seed is printed first; ``--seed N`` replays a run's mix (the timing, and
so which requests meet a limit, still differs).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import grpc
import numpy as np
from conftest import DEFAULT_DAEMON, REPO_ROOT, Daemon, free_port, load_example, matmul_graph
from google.protobuf import text_format

import einsummable as es

try:
    import tritonclient.grpc as tritongrpc
    from tritonclient.utils import InferenceServerException
except ImportError:  # the KServe kinds are then left out, and the table says so
    tritongrpc = None
    InferenceServerException = None

DEFAULT_SEED = 20261202
DEFAULT_SECONDS = 180.0
DEFAULT_CLIENTS = 32

# The daemon's limits: small enough that 32 clients reach every one of them.
DEVICES = 4
MAX_REQUESTS = 16
MAX_UPLOADS = 4
UPLOAD_IDLE_S = 3
UPLOAD_BUDGET = 16 << 20  # holds one FFN weight (16 MiB) or two store weights (8 MiB) at once
COMPILE_THREADS = 2

D_MODEL, D_FF = 1024, 4096  # proto/examples/ffn.textproto
FFN_KEYS = [(16, 4), (32, 4), (64, 4), (32, 2)]  # (tokens, devices) executed at
KSERVE_TOKENS = (16, 32)  # ModelInfer with the server's default options
INPUTS_PER_KEY = 4
STORE_ROWS, STORE_COLS = 2048, 1024  # the store model's weight: 8 MiB of f32
STORE_TOKENS, STORE_DEVICES = 8, 2
CHUNK = 1 << 20
# New shapes of ffn-abandon compiled with objective "search" (0.3-1.5 s each on a busy core, a
# deadline of 0.2-1 s): a plan that finishes anyway is cached and holds its devices' memory
# (~100 MiB at 2048 tokens) until evicted (PLAN_CACHE_ENTRIES) or ffn-abandon is unregistered.
ABANDON_TOKENS = (512, 2048)
PLAN_CACHE_ENTRIES = 16  # the 7 plans of the good requests and room for abandoned ones
# glibc's malloc raises its mmap threshold to the size of each mmapped block freed (up to 32 MiB):
# after the first 16 MiB weight upload, every tensor and message below that size comes from the
# per-thread arenas, which keep it. VmRSS then grows +40-65% under load and stays there, at the
# same level after 20 s as after 60 s, and malloc_trim gives it back with MALLOC_ARENA_MAX=2:
# retention, not a leak. A fixed threshold (glibc's default value; fixing it turns the dynamic
# raising off) returns large blocks to the system when freed, so VmRSS measures live memory.
# Hundreds of compiles still leave small free chunks spread over glibc's 16 arenas (2 cores):
# +14.5% after 180 s, +4% once malloc_trim(0) frees them; two arenas keep that within +10%.
# --glibc-defaults runs the daemon without either.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "2"}

GOOD_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 60.0
RSS_GROWTH_FRACTION = 0.10
MIB = 1 / (1 << 20)

BUSY_FLAGS = (
    "--max_concurrent_requests",
    "--max_concurrent_uploads",
    "--max_upload_bytes_in_flight",
)


# ---- the daemon from outside -------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metrics(port: int) -> dict:
    """The daemon's /metrics: {(name, ((label, value), ...)): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = tuple(sorted(_LABEL.findall(match.group(2) or "")))
            samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def proc_status(pid: int, field: str) -> int:
    """A number of /proc/PID/status (kB fields in bytes)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                parts = line.split()
                return int(parts[1]) * (1024 if parts[-1] == "kB" else 1)
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    return proc_status(pid, "VmRSS")


def health(channel: grpc.Channel, timeout: float = 10.0) -> str:
    """grpc.health.v1.Health/Check for the whole server, without generated stubs: the request
    is empty, the answer field 1 (status) a varint."""
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    answer = check(b"", timeout=timeout)
    status = answer[1] if len(answer) >= 2 and answer[0] == 0x08 else 0
    return {1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}.get(status, f"UNKNOWN({status})")


# ---- outcomes ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    code: str  # the status name, "OK" on success
    details: str = ""
    wrong: str | None = None  # an OK answer with wrong numbers or shape


class CheckFailed(Exception):
    """A probe's answer that is not what it must be."""


def outcome(call: Callable[[], object], check: Callable[[object], str | None] | None = None):
    """Runs one RPC; its status, and on success ``check``'s complaint about the answer."""
    try:
        result = call()
    except CheckFailed as error:
        return Outcome("OK", wrong=str(error))
    except grpc.RpcError as error:
        return Outcome(error.code().name, error.details() or "")
    except es.EinsummableError as error:
        return Outcome(error.code, error.details)
    except Exception as error:
        if InferenceServerException is not None and isinstance(error, InferenceServerException):
            status = (error.status() or "StatusCode.UNKNOWN").removeprefix("StatusCode.")
            return Outcome(status, error.message() or "")
        raise
    return Outcome("OK", wrong=check(result) if check else None)


def future_outcome(future: grpc.Future, timeout: float) -> Outcome:
    try:
        future.result(timeout=timeout)
    except grpc.FutureCancelledError:
        return Outcome("CANCELLED", "cancelled by this client")
    except grpc.FutureTimeoutError:
        future.cancel()
        return Outcome("CLIENT_TIMEOUT", f"no answer within {timeout:g} s")
    except grpc.RpcError as error:
        return Outcome(error.code().name, error.details() or "")
    return Outcome("OK")


# ---- the request kinds -------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    name: str
    weight: float
    expected: frozenset
    busy_allowed: bool = True  # RESOURCE_EXHAUSTED naming a concurrency limit is fine
    kserve: bool = False


def _kind(name, weight, *codes, busy_allowed=True, kserve=False):
    return Kind(name, weight, frozenset(codes), busy_allowed, kserve)


OK, IA, NF = "OK", "INVALID_ARGUMENT", "NOT_FOUND"
KINDS = [
    # good: each answer checked
    _kind("good.execute", 20, OK),
    _kind("good.kserve_infer", 8, OK, kserve=True),
    _kind("good.compile_hit", 3, OK),
    _kind("good.explain", 2, OK),
    _kind("good.upload", 3, OK),
    _kind("good.store_execute", 5, OK),
    _kind("good.lifecycle", 3, OK),  # register, upload, execute, unregister a model of its own
    _kind("good.probes", 5, OK, busy_allowed=False),  # never refused for load
    # bad: each with its status code
    _kind("bad.unknown_model", 2, NF),
    _kind("bad.wrong_shape", 2, IA),
    _kind("bad.wrong_dtype", 2, IA),
    _kind("bad.wrong_byte_count", 2, IA),
    _kind("bad.bad_option", 2, IA),
    _kind("bad.unknown_symbol", 2, IA),
    _kind("bad.unbound_symbol", 1, IA),
    _kind("bad.bad_size", 1, IA),  # 0, negative, over 2^40
    _kind("bad.huge_tensor", 2, "RESOURCE_EXHAUSTED"),
    _kind("bad.missing_weight", 2, "FAILED_PRECONDITION"),
    _kind("bad.graph_does_not_build", 2, IA),
    _kind("bad.register_long_name", 2, IA),
    _kind("bad.register_control_chars", 2, IA),
    _kind("bad.register_twice", 1, "ALREADY_EXISTS"),
    # a name no model can have: unknown (NOT_FOUND), or refused as a name (INVALID_ARGUMENT)
    _kind("bad.execute_bad_name", 2, NF, IA),
    _kind("bad.upload_wrong_offset", 2, IA),
    _kind("bad.upload_wrong_crc", 2, "DATA_LOSS"),
    _kind("bad.upload_too_many_bytes", 2, IA),
    _kind("bad.upload_too_few_bytes", 1, IA),
    _kind("bad.upload_not_a_weight", 1, IA),
    _kind("bad.upload_wrong_shape", 1, IA),
    _kind("bad.upload_unknown_model", 1, NF),
    _kind("bad.kserve_unknown_model", 1, NF, kserve=True),
    _kind("bad.kserve_bad_version", 1, NF, kserve=True),
    _kind("bad.kserve_wrong_datatype", 1, IA, kserve=True),
    _kind("bad.kserve_wrong_shape", 1, IA, kserve=True),
    _kind("bad.kserve_bad_parameter", 1, IA, kserve=True),
    _kind("bad.kserve_missing_weight", 1, "FAILED_PRECONDITION", kserve=True),
    # abandoned: the client leaves; the daemon must let go of everything the request held
    _kind("abandon.execute_deadline", 3, "DEADLINE_EXCEEDED", OK),
    _kind("abandon.execute_cancel", 3, "CANCELLED", OK),
    _kind("abandon.compile_new_shape", 3, "DEADLINE_EXCEEDED", OK),
    _kind("abandon.compile_cancel", 1, "CANCELLED", OK),
    _kind("abandon.kserve_deadline", 2, "DEADLINE_EXCEEDED", OK, kserve=True),
    _kind("abandon.upload_cancel", 2, "CANCELLED"),
    _kind("abandon.upload_idle", 1, "CANCELLED"),  # the daemon's idle timeout cancels it
    _kind("abandon.disconnect_execute", 2, "CANCELLED", OK),
    _kind("abandon.disconnect_upload", 2, "CANCELLED"),
]
KIND_BY_NAME = {kind.name: kind for kind in KINDS}


def ffn_graphdef(pb):
    """The paper's FFN exactly as proto/examples/ffn.textproto has it."""
    text = (REPO_ROOT / "proto" / "examples" / "ffn.textproto").read_text()
    return text_format.Parse(text, pb.graph_pb2.GraphDef())


def bad_graphs(pb) -> list:
    """Graphs that do not build: an unknown operator kind, an unknown tensor, shapes that do not
    fit, a dimension without a size."""
    graphs = []
    unknown_kind = ffn_graphdef(pb)
    unknown_kind.operators[1].kind = "frobnicate"
    graphs.append(unknown_kind)
    unknown_tensor = ffn_graphdef(pb)
    unknown_tensor.operators[2].inputs[0] = "nowhere"
    graphs.append(unknown_tensor)
    mismatch = ffn_graphdef(pb)
    mismatch.operators[0].inputs[1] = "w2"  # x [tokens, 1024] . w2 [4096, 1024]
    graphs.append(mismatch)
    no_size = ffn_graphdef(pb)
    no_size.inputs[1].dims[1].ClearField("fixed")
    graphs.append(no_size)
    return graphs


class Fixture:
    """What setup made and the clients share: models, weights, inputs with their results."""

    def __init__(self, seed: int, address: str):
        self.address = address
        self.ffn = load_example("ffn")
        rng = np.random.default_rng(seed)
        self.w1 = (rng.standard_normal((D_MODEL, D_FF)) / np.sqrt(D_MODEL)).astype(np.float32)
        self.w2 = (rng.standard_normal((D_FF, D_MODEL)) / np.sqrt(D_FF)).astype(np.float32)
        self.inputs = {}
        for tokens in sorted({t for t, _ in FFN_KEYS} | set(KSERVE_TOKENS)):
            xs = [rng.standard_normal((tokens, D_MODEL), dtype=np.float32) for _ in range(4)]
            self.inputs[tokens] = [(x, self.ffn.reference(x, self.w1, self.w2)) for x in xs]
        self.store_w = rng.standard_normal((STORE_ROWS, STORE_COLS), dtype=np.float32)
        self.store_w_bytes = self.store_w.tobytes()
        self.store_w_crc = zlib.crc32(self.store_w_bytes)
        self.store_x = rng.standard_normal((STORE_TOKENS, STORE_ROWS), dtype=np.float32)
        self.store_y = self.store_x.astype(np.float64) @ self.store_w.astype(np.float64)
        self.tiny_w = rng.standard_normal((8, 8), dtype=np.float32)

    def check_ffn(self, y, expected) -> str | None:
        if y is None:
            return "no output 'y'"
        if y.shape != expected.shape or y.dtype != np.float32:
            return f"y is {y.dtype}{list(y.shape)}, expected float32{list(expected.shape)}"
        error = self.ffn.max_error(y, expected)
        return None if error <= 1.0 else f"y off by {error:.3g} of the tolerance"

    def setup(self, client: es.Client, triton) -> None:
        pb = client._pb
        client.register_model("ffn", ffn_graphdef(pb), weights=["w1", "w2"])
        client.upload_tensor("ffn", "w1", self.w1, progress=False)
        client.upload_tensor("ffn", "w2", self.w2, progress=False)
        # ffn-abandon: the FFN without weights, for compiles of new shapes nobody waits for;
        # unregistered at the end, which drops the plans of those that finished anyway
        client.register_model("ffn-abandon", ffn_graphdef(pb))
        # store: y = x . w with an 8 MiB weight, re-uploaded (always the same bytes) by good
        # uploads and aimed at by every bad one: it must never change
        g = es.createGraph()
        x = g.insertTensor(es.tensorDesc(["tokens", ("k", STORE_ROWS)]), name="x")
        w = g.insertTensor(es.tensorDesc([("k", STORE_ROWS), ("n", STORE_COLS)]), name="w")
        g.save(g.matmul(x, w, name="y"))
        client.register_model("store", g, weights=["w"])
        client.upload_tensor("store", "w", self.store_w, progress=False)
        # pending: a weight never uploaded
        client.register_model("pending", matmul_graph(), weights=["w"])

        for tokens, devices in FFN_KEYS:
            x, expected = self.inputs[tokens][0]
            y = client.execute("ffn", {"x": x}, {"tokens": tokens}, {"devices": devices})
            wrong = self.check_ffn(y.outputs.get("y"), expected)
            if wrong:
                raise RuntimeError(f"setup: ffn at tokens={tokens} devices={devices}: {wrong}")
        for tokens in KSERVE_TOKENS:
            x, expected = self.inputs[tokens][0]
            if triton is not None:
                wrong = self.check_ffn(kserve_infer(triton, x).as_numpy("y"), expected)
            else:
                wrong = self.check_ffn(client.execute("ffn", {"x": x}).outputs.get("y"), expected)
            if wrong:
                raise RuntimeError(f"setup: ModelInfer at tokens={tokens}: {wrong}")
        y = client.execute(
            "store", {"x": self.store_x}, {"tokens": STORE_TOKENS}, {"devices": STORE_DEVICES}
        ).outputs["y"]
        if self.ffn.max_error(y, self.store_y) > 1.0:
            raise RuntimeError("setup: the store model's result is wrong")


def kserve_infer(triton, x, **kwargs):
    inp = tritongrpc.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return triton.infer("ffn", [inp], **kwargs)


class Worker:
    """One client: its own channel(s), its own random stream."""

    def __init__(self, index: int, seed: int, fix: Fixture, kinds: list[Kind]):
        self.index = index
        self.fix = fix
        self.rng = np.random.default_rng([seed, index])
        self.kinds = kinds
        self.weights = np.array([k.weight for k in kinds]) / sum(k.weight for k in kinds)
        self.client = es.Client(fix.address, timeout=GOOD_TIMEOUT_S)
        self.pb = self.client._pb.service_pb2
        self.gpb = self.client._pb.graph_pb2
        self.stub = self.client._stub
        self.triton = (
            tritongrpc.InferenceServerClient(url=fix.address) if tritongrpc is not None else None
        )
        self.serial = 0

    def close(self):
        self.client.close()
        if self.triton is not None:
            self.triton.close()

    def next_kind(self) -> Kind:
        return self.kinds[self.rng.choice(len(self.kinds), p=self.weights)]

    def run(self, kind: Kind) -> Outcome:
        self.serial += 1
        return getattr(self, "k_" + kind.name.split(".", 1)[1])()

    # -- helpers

    def pick(self, seq):
        return seq[self.rng.integers(len(seq))]

    def ffn_request(self, tokens, devices, x=None, dtype="F32", shape=None, data=None):
        x = x if x is not None else self.pick(self.fix.inputs[tokens])[0]
        request = self.pb.ExecuteRequest(
            model="ffn",
            dims={"tokens": tokens},
            options=self.pb.CompileOptions(devices=devices),
        )
        request.inputs.add(
            name="x",
            tensor=self.pb.Tensor(
                dtype=dtype,
                shape=list(shape if shape is not None else x.shape),
                data=data if data is not None else x.tobytes(),
            ),
        )
        return request

    def check_execute_response(self, expected):
        def check(response) -> str | None:
            for named in response.outputs:
                if named.name == "y":
                    y = np.frombuffer(named.tensor.data, dtype=np.float32).reshape(
                        tuple(named.tensor.shape)
                    )
                    return self.fix.check_ffn(y, expected)
            return "no output 'y'"

        return check

    def upload_chunks(
        self,
        model="store",
        name="w",
        data=None,
        *,
        shape=None,
        crc=None,
        offsets=None,
        hold: threading.Event | None = None,
        hold_s: float = 0,
    ):
        """UploadTensor chunks of ``data`` (default: the store weight), CHUNK bytes each, with
        ``offsets`` (default: the true ones); then, given ``hold``, waits on it before ending."""
        data = self.fix.store_w_bytes if data is None else data
        pieces = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        offsets = offsets if offsets is not None else [i * CHUNK for i in range(len(pieces))]
        first = self.pb.UploadTensorChunk(
            model=model,
            name=name,
            dtype="F32",
            shape=list(shape if shape is not None else (STORE_ROWS, STORE_COLS)),
            data=pieces[0],
            offset=offsets[0],
            crc32=crc if crc is not None else self.fix.store_w_crc,
        )

        def chunks():
            yield first
            for piece, offset in zip(pieces[1:], offsets[1:]):
                yield self.pb.UploadTensorChunk(data=piece, offset=offset)
            if hold is not None:
                hold.wait(hold_s)

        return chunks()

    def upload(self, chunks) -> Outcome:
        return outcome(lambda: self.stub.UploadTensor(chunks, timeout=GOOD_TIMEOUT_S))

    def held_upload(self, stub, sent_bytes: int, hold_s: float):
        """An upload stream of the store weight that sends the header and ``sent_bytes`` bytes,
        then waits (at most hold_s) until it is released or the call ends."""
        hold = threading.Event()
        chunks = self.upload_chunks(
            data=self.fix.store_w_bytes[:sent_bytes], hold=hold, hold_s=hold_s
        )
        future = stub.UploadTensor.future(chunks, timeout=GOOD_TIMEOUT_S)
        future.add_done_callback(lambda _: hold.set())
        return future, hold

    def retry_busy(self, attempt: Callable[[], Outcome], tries: int = 20) -> Outcome:
        """``attempt`` again while the server is full (a lifecycle's later steps matter more
        than its first answer)."""
        for _ in range(tries - 1):
            result = attempt()
            if result.code != "RESOURCE_EXHAUSTED" or not any(
                flag in result.details for flag in BUSY_FLAGS
            ):
                return result
            time.sleep(float(self.rng.uniform(0.01, 0.1)))
        return attempt()

    # -- good

    def k_execute(self) -> Outcome:
        tokens, devices = self.pick(FFN_KEYS)
        x, expected = self.pick(self.fix.inputs[tokens])
        return outcome(
            lambda: self.client.execute("ffn", {"x": x}, {"tokens": tokens}, {"devices": devices}),
            lambda r: self.fix.check_ffn(r.outputs.get("y"), expected),
        )

    def k_kserve_infer(self) -> Outcome:
        x, expected = self.pick(self.fix.inputs[self.pick(KSERVE_TOKENS)])
        return outcome(
            lambda: kserve_infer(self.triton, x, client_timeout=GOOD_TIMEOUT_S),
            lambda r: self.fix.check_ffn(r.as_numpy("y"), expected),
        )

    def k_compile_hit(self) -> Outcome:
        tokens, devices = self.pick(FFN_KEYS)
        return outcome(
            lambda: self.client.compile("ffn", {"tokens": tokens}, {"devices": devices}),
            lambda r: None if r.cache_hit else f"no cache hit: {r.plan_key}",
        )

    def k_explain(self) -> Outcome:
        tokens, devices = self.pick(FFN_KEYS)
        return outcome(
            lambda: self.client.explain("ffn", {"tokens": tokens}, {"devices": devices}),
            lambda r: None if r.text else "empty explanation",
        )

    def k_upload(self) -> Outcome:
        return outcome(
            lambda: self.client.upload_tensor("store", "w", self.fix.store_w, progress=False),
            lambda stored: None if stored == len(self.fix.store_w_bytes) else f"{stored} bytes",
        )

    def k_store_execute(self) -> Outcome:
        def check(r):
            y = r.outputs.get("y")
            if y is None or y.shape != self.fix.store_y.shape:
                return f"y is {None if y is None else y.shape}"
            error = self.fix.ffn.max_error(y, self.fix.store_y)
            return None if error <= 1.0 else f"store weight changed? y off by {error:.3g}"

        return outcome(
            lambda: self.client.execute(
                "store",
                {"x": self.fix.store_x},
                {"tokens": STORE_TOKENS},
                {"devices": STORE_DEVICES},
            ),
            check,
        )

    def k_lifecycle(self) -> Outcome:
        model = f"life-{self.index}-{self.serial}"
        x = self.rng.standard_normal((4, 8), dtype=np.float32)
        expected = x.astype(np.float64) @ self.fix.tiny_w.astype(np.float64)

        def check(r):
            y = r.outputs.get("y")
            if y is None or y.shape != expected.shape:
                return f"y is {None if y is None else y.shape}"
            bad = np.max(np.abs(y - expected)) > 1e-4 * (1 + np.abs(expected).max())
            return "the tiny model's result is wrong" if bad else None

        steps = [
            (lambda: self.client.register_model(model, matmul_graph(), weights=["w"]), None),
            (lambda: self.client.upload_tensor(model, "w", self.fix.tiny_w, progress=False), None),
            (lambda: self.client.execute(model, {"x": x}, {"tokens": 4}, {"devices": 1}), check),
        ]
        result = Outcome("OK")
        for number, (step, step_check) in enumerate(steps):
            result = self.retry_busy(lambda s=step, c=step_check: outcome(s, c))
            if result.code != "OK":
                result.details = f"step {number}: {result.details}"
                break
        if number > 0 or result.code == "OK":
            # Unregistered whatever happened, retried while the server is full, so no model is
            # left behind to hold memory.
            gone = self.retry_busy(lambda: outcome(lambda: self.client.unregister(model)), 400)
            if gone.code != "OK" and result.code == "OK":
                result = Outcome(gone.code, f"unregister: {gone.details}")
        return result

    def k_probes(self) -> Outcome:
        def probes():
            self.client.server_info()
            self.client.list_models()
            state = health(self.client._channel)
            if state not in ("SERVING", "NOT_SERVING"):
                raise CheckFailed(f"health {state}")
            if self.triton is not None:
                if not self.triton.is_server_live() or not self.triton.is_server_ready():
                    raise CheckFailed("KServe: not live or not ready")
                if not self.triton.is_model_ready("ffn"):
                    raise CheckFailed("KServe: ffn not ready")
                self.triton.get_model_metadata("ffn")
            return state

        return outcome(probes)

    # -- bad

    def k_unknown_model(self) -> Outcome:
        request = self.ffn_request(16, 4)
        request.model = f"no-such-model-{self.serial}"
        return outcome(lambda: self.stub.Execute(request, timeout=GOOD_TIMEOUT_S))

    def k_wrong_shape(self) -> Outcome:
        x = self.rng.standard_normal((16, D_MODEL - 24), dtype=np.float32)
        request = self.ffn_request(16, 4, x=x)
        return outcome(lambda: self.stub.Execute(request, timeout=GOOD_TIMEOUT_S))

    def k_wrong_dtype(self) -> Outcome:
        x = self.pick(self.fix.inputs[16])[0]
        dtype, data = self.pick(
            [("F64", x.astype(np.float64).tobytes()), ("F16", x.astype(np.float16).tobytes())]
        )
        request = self.ffn_request(16, 4, x=x, dtype=dtype, data=data)
        return outcome(lambda: self.stub.Execute(request, timeout=GOOD_TIMEOUT_S))

    def k_wrong_byte_count(self) -> Outcome:
        x = self.pick(self.fix.inputs[32])[0]
        data = x.tobytes()
        data = self.pick([data[:-4], data + b"\0\0\0\0", data[:-1], b""])
        request = self.ffn_request(32, 4, x=x, data=data)
        return outcome(lambda: self.stub.Execute(request, timeout=GOOD_TIMEOUT_S))

    def k_bad_option(self) -> Outcome:
        request = self.ffn_request(16, 4)
        field, value = self.pick(
            [
                ("planner", "nope"),
                ("schedule", "sideways"),
                ("objective", "x"),
                ("devices", DEVICES + 1),
                ("devices", -1),
            ]
        )
        setattr(request.options, field, value)
        return outcome(lambda: self.stub.Execute(request, timeout=GOOD_TIMEOUT_S))

    def k_unknown_symbol(self) -> Outcome:
        request = self.pb.CompileRequest(model="ffn", dims={"tokens": 16, "tokenz": 3})
        return outcome(lambda: self.stub.Compile(request, timeout=GOOD_TIMEOUT_S))

    def k_unbound_symbol(self) -> Outcome:
        request = self.pb.CompileRequest(model="ffn")
        return outcome(lambda: self.stub.Compile(request, timeout=GOOD_TIMEOUT_S))

    def k_bad_size(self) -> Outcome:
        tokens = self.pick([0, -16, (1 << 40) + 1, (1 << 62)])
        request = self.pb.CompileRequest(model="ffn", dims={"tokens": tokens})
        return outcome(lambda: self.stub.Compile(request, timeout=GOOD_TIMEOUT_S))

    def k_huge_tensor(self) -> Outcome:
        tokens = int(self.rng.integers(1 << 20, 1 << 30))  # h alone takes >= 16 GiB
        request = self.pb.CompileRequest(model="ffn", dims={"tokens": tokens})
        result = outcome(lambda: self.stub.Compile(request, timeout=GOOD_TIMEOUT_S))
        if (
            result.code == "RESOURCE_EXHAUSTED"
            and "--max_concurrent" not in result.details
            and "--max_tensor_bytes" not in result.details
        ):
            result.wrong = f"RESOURCE_EXHAUSTED without naming the flag: {result.details}"
        return result

    def k_missing_weight(self) -> Outcome:
        x = self.rng.standard_normal((4, 8), dtype=np.float32)
        return outcome(lambda: self.client.execute("pending", {"x": x}, {"tokens": 4}))

    def k_graph_does_not_build(self) -> Outcome:
        graph = self.pick(bad_graphs(self.client._pb))
        request = self.pb.RegisterModelRequest(model=f"bad-{self.index}-{self.serial}", graph=graph)
        return outcome(lambda: self.stub.RegisterModel(request, timeout=GOOD_TIMEOUT_S))

    def k_register_long_name(self) -> Outcome:
        name = "m" * int(self.rng.integers(129, 20000))
        request = self.pb.RegisterModelRequest(model=name, graph=matmul_graph().to_graphdef())
        return outcome(lambda: self.stub.RegisterModel(request, timeout=GOOD_TIMEOUT_S))

    def control_name(self) -> str:
        return self.pick(
            [
                "ffn\n[info] forged line",
                "a\x1b[31mred",
                "tab\there",
                "nul\x00x",
                "del\x7f",
                "cr\rlf",
                "sp ace",
                "é",
            ]
        )

    def k_register_control_chars(self) -> Outcome:
        request = self.pb.RegisterModelRequest(
            model=self.control_name(), graph=matmul_graph().to_graphdef()
        )
        return outcome(lambda: self.stub.RegisterModel(request, timeout=GOOD_TIMEOUT_S))

    def k_register_twice(self) -> Outcome:
        request = self.pb.RegisterModelRequest(
            model="ffn", graph=ffn_graphdef(self.client._pb), weights=["w1", "w2"]
        )
        return outcome(lambda: self.stub.RegisterModel(request, timeout=GOOD_TIMEOUT_S))

    def k_execute_bad_name(self) -> Outcome:
        request = self.ffn_request(16, 4)
        request.model = self.pick(["n" * int(self.rng.integers(129, 20000)), self.control_name()])
        return outcome(lambda: self.stub.Execute(request, timeout=GOOD_TIMEOUT_S))

    def k_upload_wrong_offset(self) -> Outcome:
        count = len(self.fix.store_w_bytes) // CHUNK
        offsets = [i * CHUNK for i in range(count)]
        at = int(self.rng.integers(1, count))
        offsets[at] += self.pick([-CHUNK, CHUNK, 1, -1])  # a chunk lost or repeated
        return self.upload(self.upload_chunks(offsets=offsets))

    def k_upload_wrong_crc(self) -> Outcome:
        if self.rng.random() < 0.5:  # a header with another checksum
            return self.upload(self.upload_chunks(crc=self.fix.store_w_crc ^ 0x00100000))
        corrupted = bytearray(self.fix.store_w_bytes)  # a flipped bit on the way
        corrupted[int(self.rng.integers(len(corrupted)))] ^= 1 << int(self.rng.integers(8))
        return self.upload(self.upload_chunks(data=bytes(corrupted)))

    def k_upload_too_many_bytes(self) -> Outcome:
        extra = self.pick([b"\0" * 4, b"\0" * CHUNK])
        return self.upload(self.upload_chunks(data=self.fix.store_w_bytes + extra))

    def k_upload_too_few_bytes(self) -> Outcome:
        cut = self.pick([4, CHUNK, len(self.fix.store_w_bytes) - CHUNK // 2])
        return self.upload(self.upload_chunks(data=self.fix.store_w_bytes[:-cut]))

    def k_upload_not_a_weight(self) -> Outcome:
        return self.upload(self.upload_chunks(name=self.pick(["x", "y", "nothing"])))

    def k_upload_wrong_shape(self) -> Outcome:
        return self.upload(self.upload_chunks(shape=(STORE_COLS, STORE_ROWS)))

    def k_upload_unknown_model(self) -> Outcome:
        return self.upload(self.upload_chunks(model=f"no-such-model-{self.serial}"))

    def kserve_bad(self, model="ffn", shape=None, datatype="FP32", **kwargs) -> Outcome:
        x = self.pick(self.fix.inputs[16])[0]
        array = x.astype(np.float64) if datatype == "FP64" else x
        if shape is not None:
            array = self.rng.standard_normal(shape).astype(np.float32)
        if model == "pending":
            array = self.rng.standard_normal((4, 8)).astype(np.float32)
        inp = tritongrpc.InferInput("x", list(array.shape), datatype)
        inp.set_data_from_numpy(array)
        return outcome(
            lambda: self.triton.infer(model, [inp], client_timeout=GOOD_TIMEOUT_S, **kwargs)
        )

    def k_kserve_unknown_model(self) -> Outcome:
        return self.kserve_bad(model=f"no-such-model-{self.serial}")

    def k_kserve_bad_version(self) -> Outcome:
        return self.kserve_bad(model_version=self.pick(["2", "0", "latest"]))

    def k_kserve_wrong_datatype(self) -> Outcome:
        return self.kserve_bad(datatype="FP64")

    def k_kserve_wrong_shape(self) -> Outcome:
        return self.kserve_bad(shape=(16, D_MODEL + 1))

    def k_kserve_bad_parameter(self) -> Outcome:
        if self.rng.random() < 0.5:
            return self.kserve_bad(sequence_id=7)
        return self.kserve_bad(parameters={"planner": "nope"})

    def k_kserve_missing_weight(self) -> Outcome:
        return self.kserve_bad(model="pending")

    # -- abandoned

    def k_execute_deadline(self) -> Outcome:
        tokens, devices = self.pick(FFN_KEYS)
        x, expected = self.pick(self.fix.inputs[tokens])
        request = self.ffn_request(tokens, devices, x=x)
        deadline = float(self.rng.uniform(0.001, 0.05))
        return outcome(
            lambda: self.stub.Execute(request, timeout=deadline),
            self.check_execute_response(expected),
        )

    def k_execute_cancel(self) -> Outcome:
        tokens, devices = self.pick(FFN_KEYS)
        request = self.ffn_request(tokens, devices)
        future = self.stub.Execute.future(request, timeout=GOOD_TIMEOUT_S)
        time.sleep(float(self.rng.uniform(0.0, 0.05)))
        future.cancel()
        return future_outcome(future, GOOD_TIMEOUT_S)

    def abandon_compile_request(self):
        tokens = int(self.rng.integers(*ABANDON_TOKENS))  # a new shape: a cache miss
        return self.pb.CompileRequest(
            model="ffn-abandon",
            dims={"tokens": tokens},
            options=self.pb.CompileOptions(devices=DEVICES, objective="search"),
        )

    def k_compile_new_shape(self) -> Outcome:
        request = self.abandon_compile_request()
        deadline = float(self.rng.uniform(0.2, 1.0))
        return outcome(lambda: self.stub.Compile(request, timeout=deadline))

    def k_compile_cancel(self) -> Outcome:
        future = self.stub.Compile.future(self.abandon_compile_request(), timeout=GOOD_TIMEOUT_S)
        time.sleep(float(self.rng.uniform(0.1, 0.8)))
        future.cancel()
        return future_outcome(future, GOOD_TIMEOUT_S)

    def k_kserve_deadline(self) -> Outcome:
        x, expected = self.pick(self.fix.inputs[self.pick(KSERVE_TOKENS)])
        if self.rng.random() < 0.5:
            kwargs = {"client_timeout": float(self.rng.uniform(0.001, 0.05))}
        else:  # the request's own timeout parameter, in microseconds
            kwargs = {"timeout": int(self.rng.integers(1, 20000)), "client_timeout": GOOD_TIMEOUT_S}
        return outcome(
            lambda: kserve_infer(self.triton, x, **kwargs),
            lambda r: self.fix.check_ffn(r.as_numpy("y"), expected),
        )

    def k_upload_cancel(self) -> Outcome:
        sent = int(self.rng.integers(0, 5)) * CHUNK  # the header's chunk and up to 4 more
        future, hold = self.held_upload(self.stub, sent, GOOD_TIMEOUT_S)
        time.sleep(float(self.rng.uniform(0.05, 0.5)))
        future.cancel()
        hold.set()
        return future_outcome(future, GOOD_TIMEOUT_S)

    def k_upload_idle(self) -> Outcome:
        sent = int(self.rng.integers(0, 5)) * CHUNK
        # Held well past the daemon's idle timeout: the daemon must cancel it first.
        future, hold = self.held_upload(self.stub, sent, UPLOAD_IDLE_S + 20)
        result = future_outcome(future, UPLOAD_IDLE_S + 30)
        hold.set()
        return result

    def k_disconnect_execute(self) -> Outcome:
        channel = grpc.insecure_channel(self.fix.address)
        stub = self.client._pb.service_pb2_grpc.EinsummableStub(channel)
        tokens, devices = self.pick(FFN_KEYS)
        future = stub.Execute.future(self.ffn_request(tokens, devices), timeout=GOOD_TIMEOUT_S)
        time.sleep(float(self.rng.uniform(0.0, 0.05)))
        channel.close()
        return future_outcome(future, GOOD_TIMEOUT_S)

    def k_disconnect_upload(self) -> Outcome:
        channel = grpc.insecure_channel(self.fix.address)
        stub = self.client._pb.service_pb2_grpc.EinsummableStub(channel)
        sent = int(self.rng.integers(0, 5)) * CHUNK
        future, hold = self.held_upload(stub, sent, GOOD_TIMEOUT_S)
        time.sleep(float(self.rng.uniform(0.05, 0.5)))
        channel.close()
        hold.set()
        return future_outcome(future, GOOD_TIMEOUT_S)


# ---- the run -----------------------------------------------------------------------------------


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.codes: dict[str, Counter] = defaultdict(Counter)
        self.failures = 0
        self.examples: list[str] = []  # the first failures, for the report
        self.crashed: list[str] = []  # a client thread that raised outside its requests

    def record(self, kind: Kind, result: Outcome, client: int) -> None:
        code = result.code
        problem = None
        if code in kind.expected:
            label = code
        elif (
            kind.busy_allowed
            and code == "RESOURCE_EXHAUSTED"
            and any(flag in result.details for flag in BUSY_FLAGS)
        ):
            label = "busy"
        else:
            label = code
            problem = f"{code}, expected {'/'.join(sorted(kind.expected))}: {result.details}"
        if result.wrong:
            problem = f"{code} but wrong: {result.wrong}"
        with self.lock:
            self.codes[kind.name][label] += 1
            if problem:
                self.codes[kind.name]["FAILED"] += 1
                self.failures += 1
                if len(self.examples) < 30:
                    self.examples.append(f"client {client} {kind.name}: {problem[:400]}")


def table(tally: Tally, kinds: list[Kind]) -> str:
    lines = [f"{'kind':34} {'requests':>8}  codes"]
    total = 0
    for kind in kinds:
        codes = tally.codes.get(kind.name, Counter())
        count = sum(n for label, n in codes.items() if label != "FAILED")
        total += count
        text = ", ".join(f"{label} {n}" for label, n in sorted(codes.items()))
        lines.append(f"{kind.name:34} {count:8d}  {text or '-'}")
    lines.append(f"{'total':34} {total:8d}")
    return "\n".join(lines)


def wait_drained(port: int, timeout: float) -> dict:
    """Polls /metrics until nothing is in flight, running, queued or held; returns the last."""
    deadline = time.monotonic() + timeout
    while True:
        samples = metrics(port)
        busy = {
            name: samples.get((name, ()), 0.0)
            for name in DRAIN_GAUGES
            if samples.get((name, ()), 0.0) != 0.0
        }
        if not busy or time.monotonic() > deadline:
            return samples
        time.sleep(0.25)


DRAIN_GAUGES = (
    "einsummable_inflight_requests",
    "einsummable_compiles_running",
    "einsummable_compile_queue_length",
    "einsummable_upload_bytes_in_flight",
)


class Checks:
    def __init__(self):
        self.results: list[tuple[bool, str]] = []

    def check(self, ok: bool, text: str) -> bool:
        self.results.append((bool(ok), text))
        print(f"  [{'ok' if ok else 'FAIL'}] {text}", flush=True)
        return bool(ok)

    @property
    def passed(self) -> bool:
        return all(ok for ok, _ in self.results)


def check_slots(address: str, port: int, fix: Fixture, checks: Checks) -> None:
    """Every work and upload slot can be taken again: MAX_REQUESTS compiles of new shapes and
    MAX_UPLOADS upload streams held at once are all admitted; one more of each is refused."""
    worker = Worker(10_000, 1, fix, KINDS)
    try:
        requests = [worker.abandon_compile_request() for _ in range(MAX_REQUESTS)]
        for number, request in enumerate(requests):
            request.dims["tokens"] = ABANDON_TOKENS[1] + 1 + number  # distinct, never seen
        futures = [worker.stub.Compile.future(r, timeout=30) for r in requests]
        time.sleep(1.0)
        early = [future_outcome(f, 0) for f in futures if f.done()]
        refused = [r for r in early if r.code not in ("OK", "DEADLINE_EXCEEDED")]
        pending = sum(not f.done() for f in futures)
        state = health(worker.client._channel)
        extra = outcome(lambda: worker.client.compile("ffn", {"tokens": 16}, {"devices": 4}))
        for future in futures:
            future.cancel()
        checks.check(
            not refused,
            f"{MAX_REQUESTS} work calls held at once were all admitted "
            f"({pending} still compiling after 1 s"
            + (f"; refused: {[r.code + ' ' + r.details for r in refused]}" if refused else "")
            + ")",
        )
        if pending == MAX_REQUESTS:
            checks.check(
                extra.code == "RESOURCE_EXHAUSTED" and state == "NOT_SERVING",
                f"with every work slot taken, one more call gets {extra.code} and health says "
                f"{state}",
            )

        holds = [worker.held_upload(worker.stub, 0, 30) for _ in range(MAX_UPLOADS)]
        time.sleep(0.5)
        refused = [future_outcome(f, 0) for f, _ in holds if f.done()]
        one_more, hold = worker.held_upload(worker.stub, 0, 30)
        extra = future_outcome(one_more, 10)
        hold.set()
        for future, hold in holds:
            future.cancel()
            hold.set()
        checks.check(
            not refused,
            f"{MAX_UPLOADS} upload streams held at once were all admitted"
            + (f" (refused: {[r.code + ' ' + r.details for r in refused]})" if refused else ""),
        )
        checks.check(
            extra.code == "RESOURCE_EXHAUSTED",
            f"with every upload slot taken, one more stream gets {extra.code}",
        )
    finally:
        worker.close()
    wait_drained(port, DRAIN_TIMEOUT_S)


def trim_probe(pid: int, rss_start: int) -> None:
    """A diagnosis, not a check: memory glibc keeps for reuse (free chunks in its arenas) is not
    a leak. malloc_trim(0), called in the daemon through gdb, returns it to the system; what
    VmRSS keeps after that is held by live objects."""
    import shutil
    import subprocess

    if shutil.which("gdb") is None:
        print("  [--] (no gdb: cannot ask the daemon's allocator to trim)")
        return
    before = rss_bytes(pid)
    probe = subprocess.run(
        ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "call (int) malloc_trim(0)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    after = rss_bytes(pid)
    if probe.returncode != 0:
        print(f"  [--] gdb malloc_trim failed: {probe.stderr.strip()[-300:]}")
        return
    print(
        f"  [--] diagnosis: malloc_trim(0) in the daemon: VmRSS {before * MIB:.1f} -> "
        f"{after * MIB:.1f} MiB ({(after - rss_start) / rss_start:+.1%} of the start): "
        + (
            "the growth was memory the allocator kept, not live objects"
            if after <= rss_start * (1 + RSS_GROWTH_FRACTION)
            else "live objects hold the growth: a leak, or caches that grew"
        )
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=DEFAULT_SECONDS,
        help=f"how long the clients run (default {DEFAULT_SECONDS:g})",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"the mix's seed (default {DEFAULT_SEED})"
    )
    parser.add_argument("--clients", type=int, default=DEFAULT_CLIENTS)
    parser.add_argument(
        "--daemon",
        default=os.environ.get("EINSUMMABLE_DAEMON", DEFAULT_DAEMON),
        help="the einsummabled binary (default $EINSUMMABLE_DAEMON or build/bin/einsummabled)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PREFIX",
        help="leave out the kinds whose name starts with PREFIX (repeatable; "
        "for narrowing a failure down, e.g. --exclude abandon.compile)",
    )
    parser.add_argument(
        "--glibc-defaults",
        action="store_true",
        help=f"run the daemon without {', '.join(MALLOC_ENV)} (see MALLOC_ENV)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the work directory (daemon log, plan cache) and say where",
    )
    args = parser.parse_args(argv)
    print(f"soak seed: {args.seed} (--seed {args.seed} replays the mix)", flush=True)

    binary = Path(args.daemon)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        print(
            f"soak: no einsummabled at {binary}: build it (ninja -C build einsummabled) or set "
            "EINSUMMABLE_DAEMON",
            file=sys.stderr,
        )
        return 2
    if not Path("/proc/self/status").exists():
        print("soak: needs Linux /proc for the daemon's VmRSS", file=sys.stderr)
        return 2
    kinds = [
        k
        for k in KINDS
        if (tritongrpc is not None or not k.kserve)
        and not any(k.name.startswith(prefix) for prefix in args.exclude)
    ]
    if args.exclude:
        print(f"soak: left out: {sorted(set(k.name for k in KINDS) - set(k.name for k in kinds))}")
    if tritongrpc is None:
        print("soak: tritonclient is not installed: the KServe kinds are left out")

    workdir = tempfile.mkdtemp(prefix="einsummable-soak-")
    metrics_port = free_port()
    flags = [
        f"--devices={DEVICES}",
        f"--metrics_port={metrics_port}",
        f"--max_concurrent_requests={MAX_REQUESTS}",
        f"--max_concurrent_uploads={MAX_UPLOADS}",
        f"--upload_idle_timeout_seconds={UPLOAD_IDLE_S}",
        f"--max_upload_bytes_in_flight={UPLOAD_BUDGET}",
        f"--compile_threads={COMPILE_THREADS}",
        f"--plan_cache_entries={PLAN_CACHE_ENTRIES}",
    ]
    if not args.glibc_defaults:
        for name, value in MALLOC_ENV.items():
            os.environ.setdefault(name, value)  # the daemon inherits the environment
    malloc_env = " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith("MALLOC_"))
    daemon = Daemon(binary, Path(workdir), flags)
    print(
        f"soak: {malloc_env + ' ' if malloc_env else ''}{binary} {' '.join(flags)}; work "
        f"directory {workdir}",
        flush=True,
    )
    checks = Checks()
    tally = Tally()
    try:
        daemon.start(timeout=60)
        pid = daemon.process.pid
        fix = Fixture(args.seed, daemon.address)
        triton = tritongrpc.InferenceServerClient(url=daemon.address) if tritongrpc else None
        with es.Client(daemon.address, timeout=GOOD_TIMEOUT_S) as client:
            fix.setup(client, triton)
        wait_drained(metrics_port, DRAIN_TIMEOUT_S)
        time.sleep(1.0)
        rss_start = rss_bytes(pid)
        threads_start = proc_status(pid, "Threads")
        print(
            f"soak: setup done, VmRSS {rss_start * MIB:.1f} MiB; {args.clients} clients for "
            f"{args.seconds:g} s",
            flush=True,
        )

        stop_at = time.monotonic() + args.seconds

        def client_loop(index: int):
            worker = None
            try:
                worker = Worker(index, args.seed, fix, kinds)
                while time.monotonic() < stop_at and daemon.process.poll() is None:
                    kind = worker.next_kind()
                    result = worker.run(kind)
                    tally.record(kind, result, index)
                    if result.code == "RESOURCE_EXHAUSTED":  # a full server: back off a little
                        time.sleep(float(worker.rng.uniform(0.005, 0.05)))
            except Exception as error:  # a bug of the soak, or a dead daemon
                with tally.lock:
                    tally.crashed.append(f"client {index}: {error!r}")
            finally:
                if worker is not None:
                    worker.close()

        threads = [
            threading.Thread(target=client_loop, args=(i,), name=f"soak-{i}", daemon=True)
            for i in range(args.clients)
        ]
        started = time.monotonic()
        for t in threads:
            t.start()
        rss_peak = rss_start
        last_report = started
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            if daemon.process.poll() is not None:
                break
            rss_peak = max(rss_peak, rss_bytes(pid))
            if time.monotonic() - last_report >= 30:
                last_report = time.monotonic()
                with tally.lock:
                    done = sum(sum(c.values()) for c in tally.codes.values())
                print(
                    f"soak: {last_report - started:.0f} s, {done} requests, "
                    f"{tally.failures} failures, VmRSS {rss_bytes(pid) * MIB:.1f} MiB",
                    flush=True,
                )
            if time.monotonic() > stop_at + GOOD_TIMEOUT_S + 30:
                break
        for t in threads:
            t.join(timeout=1)
        ran = time.monotonic() - started
        alive = daemon.process.poll() is None
        print(f"\nsoak: clients done after {ran:.1f} s\n")
        print(table(tally, kinds))
        print()
        if tally.examples:
            print("first failures:")
            for line in tally.examples:
                print(f"  {line}")
            print()

        checks.check(
            alive,
            "the daemon is alive after the run"
            + ("" if alive else f" (exit {daemon.process.returncode})"),
        )
        checks.check(not any(t.is_alive() for t in threads), "every client finished")
        checks.check(
            not tally.crashed,
            "no client raised outside its requests"
            + (f": {tally.crashed[:5]}" if tally.crashed else ""),
        )
        checks.check(tally.failures == 0, f"unexpected codes or wrong answers: {tally.failures}")
        if not alive:
            raise SystemExit(1)

        print("\nsoak: waiting for abandoned work to drain")
        time.sleep(UPLOAD_IDLE_S + 2)
        samples = wait_drained(metrics_port, DRAIN_TIMEOUT_S)
        for name in DRAIN_GAUGES:
            if (name, ()) in samples:
                checks.check(samples[(name, ())] == 0, f"{name} = {samples[(name, ())]:g}")
            else:
                print(f"  [--] {name}: not exported by this daemon")
        with es.Client(daemon.address, timeout=30) as client:
            state = health(client._channel)
        checks.check(state == "SERVING", f"health {state}")
        rss_drained = rss_bytes(pid)
        print(
            f"  [--] drained, abandoned plans still cached: VmRSS {rss_drained * MIB:.1f} MiB "
            f"({(rss_drained - rss_start) / rss_start:+.1%}), threads "
            f"{proc_status(pid, 'Threads')} (at the start {threads_start})"
        )

        final = Worker(10_001, args.seed, fix, kinds)
        try:
            for kind in ("good.execute", "good.kserve_infer", "good.store_execute"):
                if KIND_BY_NAME[kind] not in kinds:
                    continue
                result = final.run(KIND_BY_NAME[kind])
                checks.check(
                    result.code == "OK" and not result.wrong,
                    f"{kind} after the run: {result.code}"
                    + (f" {result.details}" if result.details else "")
                    + (f" WRONG: {result.wrong}" if result.wrong else " and correct"),
                )
        finally:
            final.close()

        check_slots(daemon.address, metrics_port, fix, checks)
        samples = wait_drained(metrics_port, DRAIN_TIMEOUT_S)
        inflight = samples.get(("einsummable_inflight_requests", ()), 0.0)
        checks.check(
            inflight == 0, f"after the slot checks: einsummable_inflight_requests = {inflight:g}"
        )
        internal = sum(
            value
            for (name, labels), value in samples.items()
            if name == "einsummable_requests_total" and dict(labels).get("code") == "INTERNAL"
        )
        checks.check(internal == 0, f"INTERNAL answers (einsummable_requests_total): {internal:g}")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as response:
            (Path(workdir) / "metrics.txt").write_bytes(response.read())
        stale = {
            dict(labels)["model"]
            for (name, labels), _ in samples.items()
            if dict(labels).get("model", "").startswith("life-")
        }
        print(f"  [--] /metrics: series labelled with {len(stale)} models unregistered since")
        cancelled = samples.get(("einsummable_compiles_cancelled_total", ()))
        compiles = samples.get(("einsummable_compile_duration_seconds_count", ()), 0.0)
        entries = samples.get(("einsummable_plan_cache_entries", ()), 0.0)
        stopped = "?" if cancelled is None else f"{cancelled:g}"
        print(
            f"  [--] compiles finished {compiles:g}, stopped because nobody waited {stopped}, "
            f"plans in memory {entries:g}"
        )

        with es.Client(daemon.address, timeout=30) as client:
            models = sorted(m.model for m in client.list_models())
            checks.check(
                models == ["ffn", "ffn-abandon", "pending", "store"], f"models left: {models}"
            )
            # The plans of abandoned compiles that finished anyway are legitimately cached (at
            # most --plan_cache_entries); they go with their model, so memory can be compared
            # with the start, when ffn-abandon had none.
            abandoned_plans = next(
                m.plans for m in client.list_models() if m.model == "ffn-abandon"
            )
            rss_before_unregister = rss_bytes(pid)
            client.unregister("ffn-abandon")
        time.sleep(2.0)
        rss_end = rss_bytes(pid)
        growth = (rss_end - rss_start) / rss_start
        checks.check(
            growth <= RSS_GROWTH_FRACTION,
            f"VmRSS start {rss_start * MIB:.1f} MiB, peak {rss_peak * MIB:.1f} MiB, before "
            f"dropping ffn-abandon's {abandoned_plans} plans "
            f"{rss_before_unregister * MIB:.1f} MiB, end {rss_end * MIB:.1f} MiB "
            f"({growth:+.1%}; at most {RSS_GROWTH_FRACTION:+.0%})",
        )
        if growth > RSS_GROWTH_FRACTION:
            trim_probe(pid, rss_start)
        log = daemon.log_path.read_text(errors="replace")
        errors = [line for line in log.splitlines() if "[error]" in line or "[critical]" in line]
        checks.check(
            not errors,
            f"daemon log error lines: {len(errors)}"
            + (f", the first: {errors[0][:300]}" if errors else ""),
        )

        daemon.process.send_signal(signal.SIGTERM)
        try:
            code = daemon.process.wait(timeout=60)
        except Exception:
            code = None
        checks.check(code == 0, f"SIGTERM: exit status {code}")
    except SystemExit:
        pass
    except Exception as error:
        checks.check(False, f"the soak itself failed: {error!r}")
    finally:
        daemon.stop()
        if not checks.passed:
            print(f"\n--- daemon log (tail) ---\n{daemon.log_tail(60)}")
        if args.keep or not checks.passed:
            print(f"soak: work directory kept: {workdir}")
        else:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"\nsoak {'PASSED' if checks.passed else 'FAILED'} (seed {args.seed}, "
        f"{args.seconds:g} s, {args.clients} clients)"
    )
    return 0 if checks.passed else 1


if __name__ == "__main__":
    sys.exit(main())
