"""Serving benchmark: Triton's perf_analyzer against einsummabled's KServe v2 endpoint on a small
LLaMA block (clients/python/tests/serving_block.py, the block test_batching.py batches), and the
device memory of one model served at four shapes (bench/README.md, "serving").

    .venv/bin/python bench/serving/run.py [--quick] [--daemon build/bin/einsummabled]

Throughput: two daemons run side by side, --instances_per_plan=1 and 4; each serves the block
registered as each of VARIANTS: without batching and with it (preferred batch sizes PREFERRED,
no queue delay). Every plan a run can use is compiled first. The measurements take
turns, round by round: in each round every (concurrency, instances, variant) runs once, so slow
phases of a shared machine fall on every configuration alike; the table gives the median over
the rounds of perf_analyzer's throughput and p50/p99 latency, and the daemon's own count of
executions, their mean time and batch size (its Prometheus metrics), and where the machine's CPU
went meanwhile.

Waiting: what the daemon spends while requests only wait. A third daemon, one instance per plan,
holds every execute for WAIT_HOLD_MS (--execute_delay_ms_for_testing, a sleep); for each variant
one request takes the instance and WAITERS more queue behind it, each with a deadline of
WAIT_DEADLINE_S. Over WAIT_WINDOW_S while they all wait, the daemon's CPU (cores) and its threads'
wake-ups per second (voluntary context switches) should be about nothing: waiting requests sleep
until their turn, looking at their own cancellation every 50 ms (20 ms in the batcher). Then
their deadlines pass while the instance is still held: how long after it the daemon still held
them (its einsummable_inflight_requests) says whether a waiting request honours its deadline.

Memory: one model (no batching, one instance per plan) compiled at MEMORY_TOKENS, with
--share_weights=true and false; GetServerInfo's device memory summed over the devices after each
shape, against what serving the largest shape alone takes (its weights plus one instance's
activations). Measured for two models: a layer of LLaMA-7B's sizes (MEMORY_SIZES; compiled, never
executed, so its weights need no upload), where weights outweigh a few hundred tokens'
activations as in real serving, and the small block the throughput runs serve, whose
activations at 128 tokens are as large as its weights.

Writes the raw numbers to bench/results/serving-<date>.json (--quick: bench/results/quick/,
which git ignores) and prints markdown tables.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
# The installed client (scripts/setup) and the client tests' helpers: conftest (the Daemon),
# perf_analyzer_tool (where perf_analyzer is, its libraries), serving_block (the block),
# test_serving (Explain's byte lists).
sys.path.insert(0, str(REPO_ROOT / "clients" / "python" / "tests"))

from conftest import Daemon, free_port  # noqa: E402
from perf_analyzer_tool import perf_analyzer_binary, perf_analyzer_env  # noqa: E402
from serving_block import BlockSizes, block, random_weights  # noqa: E402
from test_serving import explained_bytes  # noqa: E402

import einsummable as es  # noqa: E402

SIZES = BlockSizes(d_model=256, heads_q=8, heads_kv=2, d_ff=512)
DEFAULT_TOKENS = 16  # per request: one short sequence
CONCURRENCY = (1, 8, 32)
INSTANCES = (1, 4)
# With 1 among them a lone request runs alone rather than completed to 4 with idle requests.
PREFERRED = (1, 2, 4, 8, 16, 32)
MEMORY_TOKENS = (16, 32, 64, 128)
# One LLaMA-7B layer's sizes (4096 wide, 32 query heads over 8 kv heads, an 11008-wide ffn):
# 528 MB (504 MiB) of f32 weights.
MEMORY_SIZES = BlockSizes(d_model=4096, heads_q=32, heads_kv=8, d_ff=11008)
DEFAULT_SEED = 20261203
# The waiting measurement (measure_waiting): requests queued behind one that holds the only
# instance, asleep in --execute_delay_ms_for_testing. The holder's sleep outlasts the waiters'
# deadline, which outlasts the window. 31 waiters and the holder: concurrency 32's requests, one
# fewer waiting than the batched model's largest batch (PREFERRED's 32), which would run at once
# on its own plan rather than wait.
WAITERS = 31
WAIT_HOLD_MS = 9000
WAIT_DEADLINE_S = 6.0
WAIT_WINDOW_S = 3.0


@dataclass(frozen=True)
class Variant:
    """One registration of the block, and where it is measured."""

    key: str
    model: str
    batching: es.Batching | None
    label: str
    concurrency: tuple = CONCURRENCY
    instances: tuple = INSTANCES


VARIANTS = (
    Variant("off", "block", None, "off"),
    Variant("on", "block-batched", es.Batching("tokens", PREFERRED, max_queue_delay_us=0), "on"),
)


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def daemon_flags(devices: int, *extra: str) -> list:
    return [f"--devices={devices}", "--synthesis_iterations=50", *extra]


def start_daemon(stack: ExitStack, binary: Path, name: str, flags: list, metrics: bool = False):
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"serving-{name}-")))
    if metrics:
        port = free_port()
        flags = [*flags, f"--metrics_port={port}"]
    daemon = Daemon(binary, workdir, flags)
    daemon.name = name
    daemon.metrics_port = port if metrics else 0
    try:
        daemon.start(timeout=120)
    except RuntimeError:
        daemon.stop()
        raise
    stack.callback(daemon.stop)
    log(f"{name}: einsummabled {' '.join(flags)} at {daemon.address}")
    return daemon


def upload(client: es.Client, model: str, weights: dict):
    for name, value in weights.items():
        client.upload_tensor(model, name, value)


def prepare_serving(daemon: Daemon, variants: list, weights: dict, tokens: int):
    """Registers each variant of the block, uploads its weights and compiles every plan
    perf_analyzer's requests can run: tokens=``tokens``, or each preferred batch size of
    requests of ``tokens``."""
    with es.Client(daemon.address, timeout=600) as client:
        started = time.monotonic()
        plans = 0
        for variant in variants:
            client.register_model(
                variant.model, block(SIZES), weights=list(weights), batching=variant.batching
            )
            upload(client, variant.model, weights)
            if variant.batching is None:
                client.compile(variant.model, dims={"tokens": tokens})
                plans += 1
                continue
            for size in variant.batching.preferred_batch_sizes:
                ends = [tokens * (i + 1) for i in range(size)]
                client.compile(variant.model, dims={"tokens": tokens * size}, sequence_ends=ends)
                plans += 1
        seconds = time.monotonic() - started
        log(f"{daemon.name}: {plans} plans compiled in {seconds:.1f} s")


def scrape(port: int) -> dict:
    """(metric name, model) -> value for the series this benchmark reads."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    wanted = (
        "einsummable_batch_size_sum",
        "einsummable_batch_size_count",
        "einsummable_execute_duration_seconds_sum",
        "einsummable_execute_duration_seconds_count",
    )
    values = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted and 'model="' in line:
            model = line.split('model="', 1)[1].split('"', 1)[0]
            values[(name, model)] = float(line.rsplit(" ", 1)[1])
    return values


def server_side(before: dict, after: dict, model: str) -> dict:
    """Executions, their mean time and mean batch size between two scrapes."""

    def delta(name):
        return after.get((name, model), 0.0) - before.get((name, model), 0.0)

    executions = delta("einsummable_execute_duration_seconds_count")
    batches = delta("einsummable_batch_size_count")
    return {
        "executions": int(executions),
        "mean_execute_ms": 1e3 * delta("einsummable_execute_duration_seconds_sum") / executions
        if executions
        else None,
        "mean_batch_size": delta("einsummable_batch_size_sum") / batches if batches else None,
    }


def cpu_times() -> tuple:
    """(busy, total) seconds of every core since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class CpuShares:
    """Where the machine's CPU went between construction and stop(), in cores: the daemon,
    perf_analyzer (this process's children that ended meanwhile), and everything else (other
    builds on a shared machine). /proc, so Linux only."""

    def __init__(self, daemon_pid: int):
        self.daemon_pid = daemon_pid
        self.start = (
            time.monotonic(),
            cpu_times()[0],
            process_cpu_seconds(daemon_pid),
            self._children(),
            self._self(),
        )

    @staticmethod
    def _children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    @staticmethod
    def _self() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def stop(self) -> dict:
        now = (
            time.monotonic(),
            cpu_times()[0],
            process_cpu_seconds(self.daemon_pid),
            self._children(),
            self._self(),
        )
        wall, busy, daemon, client, me = (b - a for a, b in zip(self.start, now))
        return {
            "daemon_cores": daemon / wall,
            "perf_analyzer_cores": client / wall,
            "other_cores": max(0.0, busy - daemon - client - me) / wall,
        }


def wait_idle(limit_s: float, busy_below: float = 0.2) -> float:
    """Waits (up to limit_s) until the machine's cores are busy less than ``busy_below`` cores
    over one second; returns the last second's busy cores."""
    deadline = time.monotonic() + limit_s
    while True:
        busy0, total0 = cpu_times()
        time.sleep(1.0)
        busy1, total1 = cpu_times()
        cores = (busy1 - busy0) / (total1 - total0) * os.cpu_count()
        if cores < busy_below or time.monotonic() >= deadline:
            return cores


def write_input_data(folder: Path, tokens: int, seed: int) -> Path:
    """perf_analyzer's --input-data folder: the raw row-major bytes of one request's x, named as
    the input. Activations of order one, as a model sees: perf_analyzer's default random data
    are random bit patterns, whose NaNs, infinities and subnormals make every kernel several
    times slower than on real values (measured: a request alone 0.97 ms against 0.38 ms)."""
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((tokens, SIZES.d_model)).astype("<f4")
    (folder / "x").write_bytes(x.tobytes())
    return folder


def perf_analyzer(
    binary, daemon, model, tokens, concurrency, interval_ms, stability, trials, report, retries=2
):
    """One perf_analyzer run at one concurrency: throughput, p50 and p99 latency from its CSV
    report, and what the daemon's metrics say about the executions meanwhile."""
    command = [
        str(binary),
        "-i", "grpc",
        "-u", daemon.address,
        "-m", model,
        "--shape", f"x:{tokens},{SIZES.d_model}",
        "--input-data", str(report.parent / "input"),
        "--concurrency-range", str(concurrency),
        "--measurement-interval", str(interval_ms),
        "--stability-percentage", str(stability),
        "--max-trials", str(trials),
        "-f", str(report),
    ]  # fmt: skip
    before = scrape(daemon.metrics_port)
    cpu = CpuShares(daemon.process.pid)
    started = time.monotonic()
    result = subprocess.run(
        command, env=perf_analyzer_env(), capture_output=True, text=True, timeout=300
    )
    wall = time.monotonic() - started
    shares = cpu.stop()
    output = f"{result.stdout}\n{result.stderr}".strip()
    if result.returncode != 0 and retries > 0:
        # perf_analyzer writes no report then. Measure again, accepting any spread or with
        # longer windows, and say so.
        again = None
        if "Failed to obtain stable measurement" in output:
            again = (interval_ms, 1e6, 3)
        elif "No valid requests recorded within time interval" in output:
            again = (2 * interval_ms, stability, trials)
        if again is not None:
            run = perf_analyzer(
                binary, daemon, model, tokens, concurrency, *again, report, retries - 1
            )
            run["stable"] = False
            run.setdefault("retried_after", []).insert(0, output.splitlines()[-1])
            return run
    if result.returncode != 0:
        raise RuntimeError(
            f"perf_analyzer exited {result.returncode} on {model} at {daemon.name}, concurrency "
            f"{concurrency}:\n$ {' '.join(command)}\n{output}\ndaemon log:\n{daemon.log_tail()}"
        )
    with open(report, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 1:
        raise RuntimeError(f"perf_analyzer's report has {len(rows)} rows:\n{rows}\n{output}")
    row = rows[0]
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1e3,
        "p99_ms": float(row["p99 latency"]) / 1e3,
        "stable": True,
        "wall_s": wall,
        "cpu": shares,
        "server": server_side(before, scrape(daemon.metrics_port), model),
        "csv": row,
    }


def measure_serving(args, binary, weights) -> list:
    runs = []
    with ExitStack() as stack:
        daemons = {
            k: start_daemon(
                stack,
                args.daemon,
                f"instances{k}",
                daemon_flags(args.devices, f"--instances_per_plan={k}", "--max_queue_delay_us=0"),
                metrics=True,
            )
            for k in INSTANCES
        }
        for k, daemon in daemons.items():
            prepare_serving(daemon, [v for v in VARIANTS if k in v.instances], weights, args.tokens)
        with tempfile.TemporaryDirectory(prefix="serving-perf-") as reports:
            (Path(reports) / "input").mkdir()
            write_input_data(Path(reports) / "input", args.tokens, args.seed)
            # One short run per configuration at its highest concurrency first: the instances
            # and every batch size's buffers exist before anything is measured.
            for variant in VARIANTS:
                for k in variant.instances:
                    perf_analyzer(
                        binary, daemons[k], variant.model, args.tokens, max(variant.concurrency),
                        1000, 100, 5, Path(reports) / "warmup.csv",
                    )  # fmt: skip
            for round_idx in range(args.rounds):
                for concurrency in CONCURRENCY:
                    for variant in VARIANTS:
                        if concurrency not in variant.concurrency:
                            continue
                        for k in variant.instances:
                            report = (
                                Path(reports)
                                / f"r{round_idx}-c{concurrency}-k{k}-{variant.key}.csv"
                            )
                            busy_before = wait_idle(args.wait_idle)
                            run = perf_analyzer(
                                binary, daemons[k], variant.model, args.tokens, concurrency,
                                args.interval_ms, args.stability, args.trials, report,
                            )  # fmt: skip
                            run.update(
                                round=round_idx, concurrency=concurrency, instances=k,
                                variant=variant.key, busy_cores_before=busy_before,
                            )  # fmt: skip
                            runs.append(run)
                            log(describe(run))
    return runs


def describe(run: dict) -> str:
    server, cpu = run["server"], run["cpu"]
    batch = server["mean_batch_size"]
    return (
        f"round {run['round']} c={run['concurrency']:>2} instances={run['instances']} "
        f"batching={run['variant']:<6}: {run['throughput']:7.1f} infer/s, "
        f"p50 {run['p50_ms']:7.2f} ms, p99 {run['p99_ms']:7.2f} ms; "
        f"{server['executions']} executions of {server['mean_execute_ms'] or 0:.2f} ms"
        + (f", batch {batch:.1f}" if batch else "")
        + f"; cores: daemon {cpu['daemon_cores']:.2f}, perf_analyzer "
        f"{cpu['perf_analyzer_cores']:.2f}, other {cpu['other_cores']:.2f} "
        f"(before {run['busy_cores_before']:.2f})" + ("" if run["stable"] else " (unstable)")
    )


def summarize_serving(runs: list) -> list:
    rows = []
    order = [v.key for v in VARIANTS]
    keys = sorted(
        {(r["instances"], r["variant"], r["concurrency"]) for r in runs},
        key=lambda key: (key[0], order.index(key[1]), key[2]),
    )
    for k, variant, concurrency in keys:
        same = [
            r for r in runs
            if (r["instances"], r["variant"], r["concurrency"]) == (k, variant, concurrency)
        ]  # fmt: skip
        batch_sizes = [
            r["server"]["mean_batch_size"] for r in same if r["server"]["mean_batch_size"]
        ]
        execute_ms = [
            r["server"]["mean_execute_ms"] for r in same if r["server"]["mean_execute_ms"]
        ]
        rows.append(
            {
                "variant": variant,
                "instances": k,
                "concurrency": concurrency,
                "rounds": len(same),
                "throughput": statistics.median(r["throughput"] for r in same),
                "p50_ms": statistics.median(r["p50_ms"] for r in same),
                "p99_ms": statistics.median(r["p99_ms"] for r in same),
                "mean_batch_size": statistics.median(batch_sizes) if batch_sizes else None,
                "mean_execute_ms": statistics.median(execute_ms) if execute_ms else None,
                "all_stable": all(r["stable"] for r in same),
                "other_cores": statistics.median(r["cpu"]["other_cores"] for r in same),
                "daemon_cores": statistics.median(r["cpu"]["daemon_cores"] for r in same),
                # The daemon's CPU per request: less noisy than throughput on a shared machine.
                "daemon_ms_per_request": statistics.median(
                    1e3 * r["cpu"]["daemon_cores"] / r["throughput"] for r in same
                ),
            }
        )
    return rows


def batching_ratios(rows: list) -> dict:
    """Median throughput of each batching variant / without batching, per (instances,
    concurrency)."""
    by_key = {(r["variant"], r["instances"], r["concurrency"]): r["throughput"] for r in rows}
    return {
        f"{variant} / off, instances={k}, concurrency={c}": value / by_key[("off", k, c)]
        for (variant, k, c), value in by_key.items()
        if variant != "off" and ("off", k, c) in by_key
    }


def metric_total(port: int, name: str) -> float:
    """The sum of a metric's series on the daemon's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and line[len(name)] in " {"
    )


def wait_until(predicate, limit_s: float, step_s: float = 0.02) -> bool:
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step_s)
    return True


def thread_wakeups(pid: int) -> int:
    """Voluntary context switches of the process's threads now (each is a wake-up after a
    sleep)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


def execute_once(address: str, model: str, x, tokens: int, outcomes: list, timeout: float):
    """One Execute with a deadline of ``timeout`` seconds; appends how it ended to
    ``outcomes``."""
    try:
        with es.Client(address, timeout=timeout) as client:
            client.execute(model, {"x": x}, dims={"tokens": tokens})
        outcomes.append("OK")
    except es.DeadlineExceededError:
        outcomes.append("DEADLINE_EXCEEDED")
    except es.EinsummableError as error:  # recorded: the benchmark goes on
        outcomes.append(f"{type(error).__name__}: {error}")


def measure_waiting(args, weights) -> list:
    """Per variant: the daemon's CPU and wake-ups while WAITERS requests wait behind one that
    holds the only instance, and how soon after their deadline the daemon let them go. A daemon
    per variant, so that requests a daemon failed to let go cannot weigh on the next."""
    results = []
    x = np.random.default_rng(args.seed + 1).standard_normal((args.tokens, SIZES.d_model))
    x = x.astype(np.float32)
    for variant in VARIANTS:
        with ExitStack() as stack:
            daemon = start_daemon(
                stack,
                args.daemon,
                f"waiting-{variant.key}",
                daemon_flags(
                    args.devices,
                    "--instances_per_plan=1",
                    "--max_queue_delay_us=0",
                    f"--execute_delay_ms_for_testing={WAIT_HOLD_MS}",
                    f"--max_concurrent_requests={WAITERS + 8}",
                ),
                metrics=True,
            )
            prepare_serving(daemon, [variant], weights, args.tokens)
            results.append(wait_behind_one(daemon, variant, x, args.tokens))
            log(f"waiting, batching={variant.key}: {json.dumps(results[-1])}")
    return results


def wait_behind_one(daemon, variant: Variant, x, tokens: int) -> dict:
    port, pid = daemon.metrics_port, daemon.process.pid

    def inflight() -> float:
        return metric_total(port, "einsummable_inflight_requests")

    def running() -> float:
        return metric_total(port, "einsummable_executions_running")

    outcomes = []
    request = (daemon.address, variant.model, x, tokens, outcomes)
    holder = threading.Thread(target=execute_once, args=(*request, WAIT_HOLD_MS / 1e3 + 60))
    holder.start()
    holding = wait_until(lambda: running() >= 1, 30)
    waiters = [
        threading.Thread(target=execute_once, args=(*request, WAIT_DEADLINE_S))
        for _ in range(WAITERS)
    ]
    sent = time.monotonic()
    for waiter in waiters:
        waiter.start()
    queued = wait_until(lambda: inflight() >= WAITERS + 1, WAIT_DEADLINE_S / 2)
    cpu0, wake0, t0 = process_cpu_seconds(pid), thread_wakeups(pid), time.monotonic()
    time.sleep(WAIT_WINDOW_S)
    cpu1, wake1, t1 = process_cpu_seconds(pid), thread_wakeups(pid), time.monotonic()
    # Valid only if every request was in the daemon throughout the window, and only the holder
    # held an instance (the others waited rather than ran).
    valid = (
        holding
        and queued
        and inflight() >= WAITERS + 1
        and running() == 1
        and t1 < sent + WAIT_DEADLINE_S
    )
    # The waiters' deadlines pass (the last sent at `sent` or a little later) while the holder
    # still sleeps: the daemon should let them go at once.
    left = wait_until(lambda: inflight() <= 1, WAIT_HOLD_MS / 1e3 + 30, step_s=0.005)
    left_after_s = time.monotonic() - (sent + WAIT_DEADLINE_S) if left else None
    for thread in (*waiters, holder):
        thread.join()
    return {
        "variant": variant.key,
        "waiters": WAITERS,
        "window_s": t1 - t0,
        "valid": valid,
        "daemon_cores": (cpu1 - cpu0) / (t1 - t0),
        "wakeups_per_s": (wake1 - wake0) / (t1 - t0),
        "waiters_left_after_deadline_s": left_after_s,
        "outcomes": {o: outcomes.count(o) for o in sorted(set(outcomes))},
    }


def load_ratios(rows: list) -> dict:
    """Median throughput at each concurrency / at the one below it, per (instances, variant):
    below 1, throughput falls as load rises."""
    by_key = {(r["variant"], r["instances"], r["concurrency"]): r["throughput"] for r in rows}
    ratios = {}
    for (variant, k, c), value in sorted(by_key.items()):
        lower = [c2 for (v2, k2, c2) in by_key if (v2, k2) == (variant, k) and c2 < c]
        if lower:
            below = max(lower)
            ratios[f"{variant}, instances={k}: concurrency {c} / {below}"] = (
                value / by_key[(variant, k, below)]
            )
    return ratios


def explain_bytes(text: str, label: str) -> int | None:
    """The sum over devices of Explain's byte list labelled ``label``; None where Explain has no
    such line (a plan with weights of its own, --share_weights=false, lists no resident memory)."""
    try:
        return explained_bytes(text, label)
    except AssertionError:
        return None


def measure_memory(args, sizes: BlockSizes, weights: dict | None) -> dict:
    """Device memory of ``sizes``' block compiled at each of MEMORY_TOKENS, weights shared and
    not; ``weights`` are uploaded first where given (memory does not depend on them)."""
    result = {
        "block": str(sizes),
        "weight_bytes": sizes.weight_bytes(),
        "tokens": list(MEMORY_TOKENS),
    }
    for share in (True, False):
        with ExitStack() as stack:
            daemon = start_daemon(
                stack,
                args.daemon,
                f"memory-d{sizes.d_model}-share{share}",
                daemon_flags(
                    args.devices, "--instances_per_plan=1", f"--share_weights={str(share).lower()}"
                ),
            )
            with es.Client(daemon.address, timeout=600) as client:
                client.register_model("block", block(sizes), weights=sizes.weight_shapes())
                if weights is not None:
                    upload(client, "block", weights)
                per_device = []  # GetServerInfo's device memory after each compile
                for tokens in MEMORY_TOKENS:
                    client.compile("block", dims={"tokens": tokens})
                    per_device.append(list(client.server_info().device_memory_bytes))
                explains = {
                    t: client.explain("block", dims={"tokens": t}).text for t in MEMORY_TOKENS
                }
        result["share" if share else "no_share"] = {
            "device_memory_after_each_shape": [sum(d) for d in per_device],
            "per_device_after_each_shape": per_device,
            "arenas": {t: explain_bytes(e, "peak memory per device") for t, e in explains.items()},
            "resident": {
                t: explain_bytes(e, "resident memory per device") for t, e in explains.items()
            },
        }
    share, no_share = result["share"], result["no_share"]
    # Serving the largest shape alone: the weights once plus its instance's activations.
    largest_alone = result["weight_bytes"] + share["arenas"][MEMORY_TOKENS[-1]]
    result["largest_shape_alone"] = largest_alone
    result["four_shapes_shared"] = share["device_memory_after_each_shape"][-1]
    result["four_shapes_not_shared"] = no_share["device_memory_after_each_shape"][-1]
    result["ratio_shared"] = result["four_shapes_shared"] / largest_alone
    result["ratio_not_shared"] = result["four_shapes_not_shared"] / largest_alone
    return result


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def markdown(rows, ratios, load, waiting, memory) -> str:
    labels = {v.key: v.label for v in VARIANTS}
    lines = [
        "| instances | batching | concurrency | throughput (infer/s) | p50 (ms) | p99 (ms) "
        "| mean batch | mean execute (ms) | daemon cores | daemon CPU per request (ms) "
        "| other cores |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        batch = f"{r['mean_batch_size']:.1f}" if r["mean_batch_size"] else "—"
        execute = f"{r['mean_execute_ms']:.2f}" if r["mean_execute_ms"] else "—"
        lines.append(
            f"| {r['instances']} | {labels[r['variant']]} | {r['concurrency']} "
            f"| {r['throughput']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {batch} "
            f"| {execute} | {r['daemon_cores']:.2f} | {r['daemon_ms_per_request']:.2f} "
            f"| {r['other_cores']:.2f} |" + ("" if r["all_stable"] else " (unstable)")
        )
    lines += ["", "| throughput with / without batching | ratio |", "|---|---|"]
    lines += [f"| {key} | {value:.2f}× |" for key, value in ratios.items()]  # noqa: RUF001
    lines += ["", "| throughput as load rises | ratio |", "|---|---|"]
    lines += [f"| {key} | {value:.2f}× |" for key, value in load.items()]  # noqa: RUF001
    if waiting:
        lines += [
            "",
            f"while {WAITERS} requests wait behind one holding the only instance "
            f"({WAIT_WINDOW_S:g} s window; deadline {WAIT_DEADLINE_S:g} s):",
            "",
            "| batching | daemon cores | daemon wake-ups/s | waiters released after their "
            "deadline (s) | outcomes |",
            "|---|---|---|---|---|",
        ]
        for w in waiting:
            after = w["waiters_left_after_deadline_s"]
            lines.append(
                f"| {labels[w['variant']]} | {w['daemon_cores']:.3f} | {w['wakeups_per_s']:.0f} "
                f"| {'—' if after is None else f'{after:.2f}'} "
                f"| {', '.join(f'{k} {v}' for k, v in w['outcomes'].items())} |"
                + ("" if w["valid"] else " (invalid: not every request waited the whole window)")
            )
    for model in memory:
        share, no_share = model["share"], model["no_share"]
        lines += [
            "",
            f"block {model['block']}, weights {mib(model['weight_bytes'])} (f32):",
            "",
            "| device memory (summed over devices) | "
            + " | ".join(f"after tokens={t}" for t in model["tokens"])
            + " | four shapes / largest alone |",
            "|---|" + "---|" * (len(model["tokens"]) + 1),
        ]
        for label, part, ratio in (
            ("weights shared", share, model["ratio_shared"]),
            ("not shared (`--share_weights=false`)", no_share, model["ratio_not_shared"]),
        ):
            lines.append(
                f"| {label} | "
                + " | ".join(mib(b) for b in part["device_memory_after_each_shape"])
                + f" | {ratio:.2f}× |"  # noqa: RUF001
            )
        lines += [
            "",
            f"largest shape alone (weights + its activations): {mib(model['largest_shape_alone'])}"
            "; one instance's activations per shape: "
            + ", ".join(f"tokens={t} {mib(b)}" for t, b in share["arenas"].items()),
        ]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemon", type=Path, default=REPO_ROOT / "build" / "bin" / "einsummabled")
    parser.add_argument("--quick", action="store_true", help="one round of short windows")
    parser.add_argument("--devices", type=int, default=2, help="CPU virtual devices")
    parser.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="tokens per request")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--rounds", type=int, help="default 3, --quick 1")
    parser.add_argument(
        "--interval_ms", type=int, help="perf_analyzer window; default 2000, --quick 1000"
    )
    parser.add_argument(
        "--wait_idle",
        type=float,
        help="before each run, wait up to this many seconds for the machine to be idle "
        "(other processes below 0.2 cores); default 30, --quick 5",
    )
    parser.add_argument("--skip_memory", action="store_true")
    parser.add_argument("--skip_serving", action="store_true")
    parser.add_argument("--skip_waiting", action="store_true")
    parser.add_argument("--out", type=Path, help="JSON of the raw numbers")
    args = parser.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.interval_ms = args.interval_ms or (1000 if args.quick else 2000)
    if args.wait_idle is None:
        args.wait_idle = 5 if args.quick else 30
    # perf_analyzer repeats a window until three in a row are within --stability-percentage of
    # each other in throughput and average latency; this benchmark takes its own median over the
    # rounds, so the check only rejects wild windows.
    args.stability, args.trials = (100, 5) if args.quick else (50, 8)
    today = datetime.date.today().isoformat()
    if args.out is None:
        folder = REPO_ROOT / "bench" / "results" / ("quick" if args.quick else "")
        args.out = folder / f"serving-{today}.json"

    args.daemon = args.daemon.resolve()  # the daemons run in temporary folders
    if not (args.daemon.is_file() and os.access(args.daemon, os.X_OK)):
        sys.exit(f"run.py: no einsummabled at {args.daemon} (ninja -C build einsummabled)")
    binary = perf_analyzer_binary()
    if binary is None and not args.skip_serving:
        sys.exit("run.py: perf_analyzer not found (tritonclient's wheel puts it in .venv/bin)")

    print(f"seed {args.seed}", flush=True)
    weights = random_weights(SIZES, np.random.default_rng(args.seed))
    started = time.monotonic()
    runs = [] if args.skip_serving else measure_serving(args, binary, weights)
    rows = summarize_serving(runs)
    ratios = batching_ratios(rows)
    load = load_ratios(rows)
    waiting = [] if args.skip_waiting else measure_waiting(args, weights)
    memory = (
        []
        if args.skip_memory
        else [measure_memory(args, MEMORY_SIZES, None), measure_memory(args, SIZES, weights)]
    )

    report = {
        "date": today,
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "load_average_at_end": os.getloadavg(),
        },
        "backend": "cpu",
        "devices": args.devices,
        "block": str(SIZES),
        "tokens_per_request": args.tokens,
        "variants": {
            v.key: {
                "model": v.model,
                "label": v.label,
                "batching": None if v.batching is None else vars(v.batching),
                "concurrency": list(v.concurrency),
                "instances": list(v.instances),
            }
            for v in VARIANTS
        },
        "seed": args.seed,
        "rounds": args.rounds,
        "interval_ms": args.interval_ms,
        "stability_percentage": args.stability,
        "max_trials": args.trials,
        "quick": args.quick,
        "summary": rows,
        "batching_throughput_ratios": ratios,
        "load_throughput_ratios": load,
        "waiting": waiting,
        "memory": memory,
        "runs": runs,
        "wall_s": time.monotonic() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(markdown(rows, ratios, load, waiting, memory))
    print(f"\nraw numbers: {args.out}; {report['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
