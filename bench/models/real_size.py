"""Real-size check of the converter and the model repository's loader (issue 36 item 6,
bench/README.md "models/real_size"): a LLaMA-7B-shaped Hugging Face checkpoint of random bf16
weights, written on the fly, converted by ``einsummable-convert`` and loaded by ``einsummabled
--model_repository`` on the CPU backend.

    .venv/bin/python bench/models/real_size.py [--layers 32] [--workdir DIR] [--warm-loads 1]

1. Writes HF_DIR: config.json (LlamaForCausalLM: hidden 4096, 32 heads, 32 key-value heads,
   intermediate 11008, vocabulary 32000, ``--layers`` layers), the weights as bf16 in shards of
   at most ``--shard-bytes`` (transformers' ``save_pretrained`` default, 5 GB) named
   ``model-0000k-of-0000n.safetensors``, each file's tensors sorted by name as the safetensors
   package writes them, and ``model.safetensors.index.json`` (``total_size``, ``weight_map``).
   Streamed tensor by tensor in 64 MiB pieces of random bits (the exponent fixed so that every
   value is finite, |w| in [2^-7, 2^-6)): the script never holds a tensor, let alone the model.
2. Runs ``einsummable-convert HF_DIR REPO`` in its own process: wall time and its peak RSS
   (``ru_maxrss`` of the child). HF_DIR is then removed (``--keep`` keeps it).
3. Starts the daemon on an empty repository (the baseline), then on REPO once after dropping
   REPO's files from the page cache (``posix_fadvise(DONTNEED)``, "cold") and ``--warm-loads``
   times more without ("warm": from the page cache, as far as it holds them; the share of the
   files' pages cached before each start is measured with ``mincore`` and printed). For each
   start: the wall time until the daemon answers (models load before it listens, docs/server.md
   "Readiness"), the loader's own time (its log line ``READY (N weight bytes in S s)``), the
   daemon's peak RSS (the kernel's ``VmHWM``) and the peaks of ``RssAnon`` and ``RssFile``
   sampled every 10 ms, each beside the baseline's.

Targets (issue 36): peak RSS ≤ baseline + 1.1 x the largest single tensor; load ≥ 1 GB/s from
the page cache (file bytes over the loader's time, warm). The table gives medians over the warm
loads. Everything written goes under ``--workdir`` (default: a new temporary directory) and is
removed at the end unless ``--keep``. About 13.5 GB of disk for the
checkpoint and as much for the converted copy at 32 layers.

The functions (``llama_config``, ``write_checkpoint``, ``MemorySampler``, ``start_daemon``) are
also what clients/python/tests/test_real_size.py runs on a one-layer slice.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
# The installed client (scripts/setup) and the client tests' Daemon.
sys.path.insert(0, str(REPO_ROOT / "clients" / "python" / "tests"))

from conftest import Daemon  # noqa: E402

from einsummable.models import safetensors_io  # noqa: E402

DEFAULT_DAEMON = REPO_ROOT / "build" / "bin" / "einsummabled"
SHARD_BYTES = 5_000_000_000  # transformers' save_pretrained default max_shard_size, "5GB"
PIECE_BYTES = 64 << 20
SEED = 20261206
MODEL = "llama-7b-shape"
READY_LINE = re.compile(r"model '([^']+)' version \d+: READY \((\d+) weight bytes in ([0-9.]+) s\)")

LLAMA_7B = dict(
    hidden_size=4096,
    intermediate_size=11008,
    num_attention_heads=32,
    num_key_value_heads=32,
    vocab_size=32000,
)


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


def llama_config(layers: int = 32, **sizes) -> dict:
    """config.json of a LLaMA-2-7B-shaped LlamaForCausalLM (``sizes`` override hidden_size and
    the rest), bf16, untied lm_head."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "max_position_embeddings": 4096,
        "mlp_bias": False,
        "num_hidden_layers": layers,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.0",
        "use_cache": True,
        **LLAMA_7B,
    }
    config.update(sizes)
    return config


def hf_shapes(config: dict) -> dict:
    """{tensor name: shape} in the order of transformers' LlamaForCausalLM.state_dict()."""
    d, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head = d // config["num_attention_heads"]
    kv = head * config["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (v, d)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (d, d)
        shapes[p + "self_attn.k_proj.weight"] = (kv, d)
        shapes[p + "self_attn.v_proj.weight"] = (kv, d)
        shapes[p + "self_attn.o_proj.weight"] = (d, d)
        shapes[p + "mlp.gate_proj.weight"] = (f, d)
        shapes[p + "mlp.up_proj.weight"] = (f, d)
        shapes[p + "mlp.down_proj.weight"] = (d, f)
        shapes[p + "input_layernorm.weight"] = (d,)
        shapes[p + "post_attention_layernorm.weight"] = (d,)
    shapes["model.norm.weight"] = (d,)
    shapes["lm_head.weight"] = (v, d)
    return shapes


def _bf16_bytes(shape) -> int:
    return 2 * int(np.prod(shape, dtype=np.int64))


@dataclass
class Checkpoint:
    directory: Path
    files: list
    bytes: int  # every tensor's bytes (the index's total_size)
    largest: tuple  # (name, bytes) of the largest tensor
    seconds: float


def write_checkpoint(
    directory: Path, config: dict, shard_bytes: int = SHARD_BYTES, seed: int = SEED
) -> Checkpoint:
    """A Hugging Face checkpoint of random bf16 weights, sharded as save_pretrained shards it
    (a tensor starts a new shard when the current one would pass ``shard_bytes``), one
    ``PIECE_BYTES`` piece of random bits at a time."""
    started = time.monotonic()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    shapes = hf_shapes(config)
    shards, current, size = [], [], 0
    for name, shape in shapes.items():
        nbytes = _bf16_bytes(shape)
        if current and size + nbytes > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += nbytes
    shards.append(current)
    if len(shards) == 1:
        names = ["model.safetensors"]
    else:
        names = [
            f"model-{k:05d}-of-{len(shards):05d}.safetensors" for k in range(1, len(shards) + 1)
        ]
    rng = np.random.default_rng(seed)
    weight_map = {}
    for file_name, shard in zip(names, shards):
        writer = safetensors_io.StreamingWriter(directory / file_name, metadata={"format": "pt"})
        for name in sorted(shard):  # the safetensors package writes a file's tensors by name
            writer.add(name, "BF16", shapes[name])
            weight_map[name] = file_name
        try:
            for name in sorted(shard):
                remaining = _bf16_bytes(shapes[name])
                while remaining:
                    count = min(remaining, PIECE_BYTES)
                    words = rng.bit_generator.random_raw((count + 7) // 8)
                    bits = words.view(np.uint16)[: count // 2]
                    bits &= 0x807F  # sign and mantissa random,
                    bits |= 0x3C00  # exponent 120: |w| in [2^-7, 2^-6), never inf or nan
                    writer.write(bits)
                    remaining -= count
            writer.close()
        except BaseException:
            writer.abort()
            raise
    total = sum(_bf16_bytes(shape) for shape in shapes.values())
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    largest = max(shapes, key=lambda name: _bf16_bytes(shapes[name]))
    return Checkpoint(
        directory,
        [directory / n for n in names],
        total,
        (largest, _bf16_bytes(shapes[largest])),
        time.monotonic() - started,
    )


# ---- the page cache --------------------------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def cached_fraction(paths) -> float:
    """Share of the files' pages in the page cache: mincore on a read-only map, which touches
    no page."""
    page = mmap.PAGESIZE
    cached = total = 0
    for path in paths:
        size = os.path.getsize(path)
        if size == 0:
            continue
        pages = (size + page - 1) // page
        fd = os.open(path, os.O_RDONLY)
        try:
            address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if address in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap {path}")
            try:
                vector = (ctypes.c_ubyte * pages)()
                if _libc.mincore(address, size, vector) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore {path}")
                cached += int(np.count_nonzero(np.frombuffer(vector, np.uint8) & 1))
                total += pages
            finally:
                _libc.munmap(address, size)
        finally:
            os.close(fd)
    return cached / total if total else 1.0


def drop_from_page_cache(paths) -> None:
    """Evicts the files' clean pages (their own only: the rest of the machine's cache stays)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ---- a process's memory ----------------------------------------------------------------------


def proc_status(pid: int) -> dict:
    """The byte counts of /proc/PID/status (VmHWM, VmRSS, RssAnon, RssFile, RssShmem)."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                values[key] = int(rest.split()[0]) * 1024
    return values


class MemorySampler:
    """Samples a process's RssAnon and RssFile every ``period`` seconds, keeping their peaks
    (VmHWM, the kernel's own peak of their sum, is read at the end instead: exact)."""

    def __init__(self, pid_of, period: float = 0.01):
        self.pid_of = pid_of  # a callable: the pid once the process exists, else None
        self.period = period
        self.peak = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pid = self.pid_of()
            if pid is not None:
                try:
                    status = proc_status(pid)
                except (OSError, ValueError):
                    status = {}
                for key in self.peak:
                    self.peak[key] = max(self.peak[key], status.get(key, 0))
            self._stop.wait(self.period)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return dict(self.peak)


# ---- the daemon ------------------------------------------------------------------------------


@dataclass
class Start:
    """One start of the daemon on a repository, measured."""

    seconds: float  # from the start of the process until it answers
    status: dict  # /proc/PID/status once it answers (VmHWM is the peak so far)
    peaks: dict  # sampled peaks of RssAnon, RssFile, VmRSS
    load_seconds: float | None = None  # the loader's own time (its READY line)
    load_bytes: int | None = None
    cached_before: float | None = None  # share of the files' pages cached at the start
    extra: dict = field(default_factory=dict)


def start_daemon(
    binary: Path, workdir: Path, repository: Path, devices: int, timeout: float, keep_running=False
):
    """Starts the daemon on ``repository``, measures it once it answers; stops it unless
    ``keep_running`` (then returns (Start, Daemon) and the caller stops it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    daemon = Daemon(binary, workdir, [f"--model_repository={repository}", f"--devices={devices}"])
    sampler = MemorySampler(lambda: daemon.process.pid if daemon.process is not None else None)
    started = time.monotonic()
    try:
        daemon.start(timeout=timeout)
        seconds = time.monotonic() - started
        status = proc_status(daemon.process.pid)
    except BaseException:
        sampler.stop()
        daemon.stop()
        raise
    peaks = sampler.stop()
    result = Start(seconds, status, peaks)
    ready = READY_LINE.findall(daemon.log_path.read_text(errors="replace"))
    if ready:
        _, nbytes, load_seconds = ready[-1]
        result.load_bytes, result.load_seconds = int(nbytes), float(load_seconds)
    if keep_running:
        return result, daemon
    daemon.stop()
    return result


# ---- the benchmark ---------------------------------------------------------------------------


def convert(hf_dir: Path, repository: Path, name: str) -> tuple:
    """Runs einsummable-convert in its own process: (wall seconds, its peak RSS in bytes)."""
    script = Path(sys.executable).with_name("einsummable-convert")
    command = (
        [str(script)] if script.exists() else [sys.executable, "-m", "einsummable.models.converter"]
    )
    command += [str(hf_dir), str(repository), "--name", name, "--no-progress"]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.stdout.read(), process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    if process.returncode != 0:
        raise RuntimeError(f"einsummable-convert failed ({process.returncode}): {err.decode()}")
    log(out.decode().strip())
    return seconds, usage.ru_maxrss * 1024


def gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.2f} GB"


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f} MiB"


def run(args) -> dict:
    config = llama_config(args.layers)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="real-size-"))
    # A --workdir that exists keeps whatever else it holds: only what this run writes goes.
    created = args.workdir is None or not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    hf_dir, repository, empty = workdir / "hf", workdir / "repo", workdir / "empty-repo"
    runs = range(1 + args.warm_loads)
    written = [hf_dir, repository, empty]
    written += [workdir / f"{kind}-{k}" for kind in ("baseline", "load") for k in runs]
    for path in written:
        if path.exists():
            raise SystemExit(f"{path} exists: give a --workdir without it (nothing is overwritten)")
    results: dict = {"layers": args.layers, "config": config, "daemon": str(args.daemon)}
    try:
        log(f"writing a {args.layers}-layer LLaMA-7B-shaped bf16 checkpoint to {hf_dir}")
        checkpoint = write_checkpoint(hf_dir, config, args.shard_bytes)
        log(
            f"  {gb(checkpoint.bytes)} in {len(checkpoint.files)} files, "
            f"{checkpoint.seconds:.1f} s; largest tensor {checkpoint.largest[0]} "
            f"{mib(checkpoint.largest[1])}"
        )
        results["checkpoint"] = {
            "bytes": checkpoint.bytes,
            "files": len(checkpoint.files),
            "file_bytes": sum(p.stat().st_size for p in checkpoint.files),
            "largest_tensor": checkpoint.largest[0],
            "largest_tensor_bytes": checkpoint.largest[1],
            "write_seconds": checkpoint.seconds,
        }
        log("converting")
        seconds, peak = convert(hf_dir, repository, MODEL)
        files = sorted((repository / MODEL / "1").glob("*.safetensors"))
        file_bytes = sum(p.stat().st_size for p in files)
        results["convert"] = {"seconds": seconds, "peak_rss": peak, "file_bytes": file_bytes}
        log(f"  {seconds:.1f} s, peak RSS {mib(peak)}, {gb(file_bytes)} in {len(files)} files")
        if not args.keep:
            shutil.rmtree(hf_dir)

        empty.mkdir(exist_ok=True)
        baselines = []
        for k in runs:
            baselines.append(
                start_daemon(args.daemon, workdir / f"baseline-{k}", empty, args.devices, 60)
            )
        results["baseline"] = [vars(b) for b in baselines]
        base_hwm = statistics.median(b.status["VmHWM"] for b in baselines)
        base_seconds = statistics.median(b.seconds for b in baselines)
        log(f"baseline: answers in {base_seconds:.2f} s, VmHWM {mib(base_hwm)}")

        loads = []
        for k in runs:
            if k == 0:
                drop_from_page_cache(files)
            cached = cached_fraction(files)
            start = start_daemon(
                args.daemon, workdir / f"load-{k}", repository, args.devices, args.timeout
            )
            start.cached_before = cached
            if start.load_bytes is None:
                raise RuntimeError(f"load {k}: no READY line in the daemon's log")
            loads.append(start)
            rate = start.load_bytes / start.load_seconds / 1e9
            log(
                f"{'cold' if k == 0 else 'warm'} load: {cached:.0%} of the files cached before; "
                f"loader {start.load_seconds:.2f} s ({rate:.2f} GB/s), answers in "
                f"{start.seconds:.2f} s, VmHWM {mib(start.status['VmHWM'])}, peak RssAnon "
                f"{mib(start.peaks['RssAnon'])}, RssFile {mib(start.peaks['RssFile'])}"
            )
        results["loads"] = [vars(s) for s in loads]
        results["summary"] = summarize(results, loads, baselines, checkpoint, file_bytes)
        return results
    finally:
        if not args.keep:
            for path in [workdir] if created else written:
                shutil.rmtree(path, ignore_errors=True)


def summarize(results, loads, baselines, checkpoint, file_bytes) -> dict:
    largest = checkpoint.largest[1]

    def med(values):
        return statistics.median(values)

    base = {key: med(b.status[key] for b in baselines) for key in ("VmHWM", "RssAnon", "RssFile")}
    rows = []
    for label, group in (("cold", loads[:1]), ("warm", loads[1:])):
        if not group:
            continue
        hwm = med(s.status["VmHWM"] for s in group)
        rows.append(
            {
                "load": label,
                "runs": len(group),
                "cached_before": med(s.cached_before for s in group),
                "loader_seconds": med(s.load_seconds for s in group),
                "gb_per_s": med(s.load_bytes / s.load_seconds / 1e9 for s in group),
                "answers_seconds": med(s.seconds for s in group),
                "answers_minus_baseline": med(s.seconds for s in group)
                - med(b.seconds for b in baselines),
                "vmhwm": hwm,
                "growth": hwm - base["VmHWM"],
                "growth_over_largest": (hwm - base["VmHWM"]) / largest,
                "growth_over_file": (hwm - base["VmHWM"]) / file_bytes,
                "peak_rss_anon_growth": med(s.peaks["RssAnon"] for s in group) - base["RssAnon"],
                "peak_rss_file_growth": med(s.peaks["RssFile"] for s in group) - base["RssFile"],
                "rss_anon_after": med(s.status["RssAnon"] for s in group),
                "rss_file_after": med(s.status["RssFile"] for s in group),
            }
        )
    return {
        "file_bytes": file_bytes,
        "largest_tensor_bytes": largest,
        "rss_target": 1.1 * largest,
        "baseline": base,
        "rows": rows,
    }


def print_table(results: dict) -> None:
    s = results["summary"]
    c = results["convert"]
    print(
        f"\nLLaMA-7B shape, {results['layers']} layers, bf16: {gb(s['file_bytes'])} in "
        f"{results['checkpoint']['files']} files; largest tensor "
        f"{results['checkpoint']['largest_tensor']} {mib(s['largest_tensor_bytes'])}"
    )
    print(
        f"converter: {c['seconds']:.1f} s ({s['file_bytes'] / c['seconds'] / 1e9:.2f} GB/s), "
        f"peak RSS {mib(c['peak_rss'])}"
    )
    b = s["baseline"]
    print(
        f"daemon baseline (empty repository): VmHWM {mib(b['VmHWM'])} (RssAnon "
        f"{mib(b['RssAnon'])}, RssFile {mib(b['RssFile'])})\n"
    )
    print(
        "| load | runs | file pages cached before | loader s | GB/s (target ≥ 1) | "
        "answers s (- baseline) | peak RSS growth (VmHWM) | / largest tensor (target ≤ 1.1) | "
        "/ file | peak RssAnon growth | peak RssFile growth |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in s["rows"]:
        cells = [
            r["load"],
            str(r["runs"]),
            f"{r['cached_before']:.0%}",
            f"{r['loader_seconds']:.2f}",
            f"{r['gb_per_s']:.2f}",
            f"{r['answers_seconds']:.2f} ({r['answers_minus_baseline']:.2f})",
            mib(r["growth"]),
            f"{r['growth_over_largest']:.1f}x",
            f"{r['growth_over_file']:.2f}x",
            mib(r["peak_rss_anon_growth"]),
            mib(r["peak_rss_file_growth"]),
        ]
        print("| " + " | ".join(cells) + " |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and repository")
    parser.add_argument("--warm-loads", type=int, default=1, help="loads after the cold one")
    parser.add_argument("--devices", type=int, default=8, help="the CPU backend's devices")
    parser.add_argument("--shard-bytes", type=int, default=SHARD_BYTES)
    parser.add_argument("--timeout", type=float, default=900, help="seconds a load may take")
    parser.add_argument(
        "--daemon",
        type=Path,
        default=Path(os.environ.get("EINSUMMABLE_DAEMON", DEFAULT_DAEMON)),
        help="einsummabled (default $EINSUMMABLE_DAEMON, else build/bin/einsummabled)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    args = parser.parse_args(argv)
    results = run(args)
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
