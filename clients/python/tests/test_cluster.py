"""One einsummabled over two MPI processes (docs/cluster.md): ``mpirun -np 2 einsummabled
--devices=4`` — rank 0 serves, both ranks run their devices' parts of every plan — against the
session's daemon of one process with 8 devices. Every planner x schedule on an FFN, the LLaMA-style
block of serving_block.py and a matmul chain gives bitwise the single process's outputs, weights
uploaded once (resident, spread over both ranks) included. Skipped with a message when mpirun or
the daemon binary is absent.

The ranks take ``$EINSUMMABLE_RANK_ARGS`` after everything else: scripts/gpu-check runs this file
with the single process on 8 virtual devices of GPU 0 (``$EINSUMMABLE_DAEMON_ARGS``) and each rank
on 4 of the same GPU (``--backend=cuda --devices=0,0,0,0 --cuda_rank_transport=mpi``)."""

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import Daemon
from serving_block import BlockSizes, block, random_weights

import einsummable as es

MPIRUN = shutil.which("mpirun")
# As tests/mpi/CMakeLists.txt launches: loopback only, as root in CI, 2 ranks on any machine.
MPIRUN_ARGS = [
    "--oversubscribe",
    "--allow-run-as-root",
    "--mca",
    "btl",
    "self,vader,tcp",
    "--mca",
    "btl_tcp_if_include",
    "lo",
    "-np",
    "2",
]


def launcher_env() -> dict:
    """The ranks' environment: leak detection off where the daemon is sanitized. Open MPI's
    plugins leak at MPI_Finalize and are unloaded before LeakSanitizer reports, so the leaks
    show without names and cannot be suppressed; ASan's other checks stay on, and the in-process
    cluster tests (cluster_test) check the cluster code for leaks."""
    options = [o for o in os.environ.get("ASAN_OPTIONS", "").split(":") if o]
    options = [o for o in options if not o.startswith("detect_leaks=")] + ["detect_leaks=0"]
    return {"ASAN_OPTIONS": ":".join(options)}


def rank_flags() -> list:
    """The ranks' last flags: 4 devices each, then $EINSUMMABLE_RANK_ARGS."""
    return ["--devices=4", *os.environ.get("EINSUMMABLE_RANK_ARGS", "").split()]


def cluster_of(binary, workdir: Path, flags=()) -> Daemon:
    """A daemon over two MPI ranks, each with rank_flags()."""
    return Daemon(
        binary,
        workdir,
        flags,
        launcher=[MPIRUN, *MPIRUN_ARGS],
        env=launcher_env(),
        last_flags=rank_flags(),
    )


@pytest.fixture(scope="module")
def cluster_daemon(daemon_binary):
    if MPIRUN is None:
        pytest.skip("mpirun not found: scripts/setup installs Open MPI (openmpi-bin)")
    with tempfile.TemporaryDirectory(prefix="einsummable-cluster-") as workdir:
        d = cluster_of(daemon_binary, Path(workdir))
        d.start()
        try:
            yield d
        finally:
            d.stop()


def ffn():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([("tokens", 48), ("d", 16)]), name="x")
    w1 = g.insertTensor(es.tensorDesc([("d", 16), ("f", 40)]), name="w1")
    w2 = g.insertTensor(es.tensorDesc([("f", 40), ("e", 16)]), name="w2")
    h = g.unary(g.matmul(x, w1, name="h1"), "relu", 0.0, name="h")
    g.save(g.matmul(h, w2, name="y"))
    return g


def chain():
    g = es.createGraph()
    sizes = [32, 48, 24, 40, 16]
    mats = [
        g.insertTensor(
            es.tensorDesc([(f"n{i}", sizes[i]), (f"n{i + 1}", sizes[i + 1])]), name=f"m{i}"
        )
        for i in range(len(sizes) - 1)
    ]
    out = mats[0]
    for i, m in enumerate(mats[1:]):
        out = g.matmul(out, m, name=f"p{i}")
    g.save(out)
    return g


def run(client, graph, inputs, planner, schedule, weights=()):
    with es.compileGraph(
        graph,
        planner=planner,
        schedule_mode=schedule,
        seed=7,
        weights=weights,
        client=client,
    ) as cg:
        for name, values in inputs.items():
            cg.load(graph.tensor(name), values)
        return cg.execute()


def graphs():
    rng = np.random.default_rng(20261207)
    sizes = BlockSizes(d_model=32, heads_q=4, heads_kv=2, d_ff=48)
    block_inputs = {"x": rng.standard_normal((24, 32)).astype(np.float32)}
    block_inputs.update({k: v.astype(np.float32) for k, v in random_weights(sizes, rng).items()})
    ffn_inputs = {
        "x": rng.standard_normal((48, 16)).astype(np.float32),
        "w1": rng.standard_normal((16, 40)).astype(np.float32),
        "w2": rng.standard_normal((40, 16)).astype(np.float32),
    }
    chain_inputs = {
        f"m{i}": rng.standard_normal(shape).astype(np.float32)
        for i, shape in enumerate([(32, 48), (48, 24), (24, 40), (40, 16)])
    }
    return {
        "ffn": (ffn(), ffn_inputs),
        "block": (block(sizes), block_inputs),
        "chain": (chain(), chain_inputs),
    }


@pytest.mark.integration
@pytest.mark.parametrize("planner", ["dp", "greedy", "random"])
@pytest.mark.parametrize("schedule", ["naive", "optimized"])
def test_two_ranks_of_four_give_bitwise_what_one_process_of_eight_gives(
    cluster_daemon, daemon, planner, schedule
):
    with (
        es.Client(cluster_daemon.address, timeout=120) as split,
        es.Client(daemon.address, timeout=120) as single,
    ):
        assert split.server_info().devices == 8
        for name, (graph, inputs) in graphs().items():
            expected = run(single, graph, inputs, planner, schedule)
            got = run(split, graph, inputs, planner, schedule)
            assert expected.keys() == got.keys()
            for tensor, values in expected.items():
                np.testing.assert_array_equal(got[tensor], values, err_msg=f"{name} {tensor}")


@pytest.mark.integration
def test_weights_uploaded_once_live_on_the_ranks_of_their_devices(cluster_daemon, daemon):
    graph, inputs = graphs()["block"]
    weights = [graph.tensor(name) for name in inputs if name != "x"]
    with (
        es.Client(cluster_daemon.address, timeout=120) as split,
        es.Client(daemon.address, timeout=120) as single,
    ):
        expected = run(single, graph, inputs, "dp", "optimized", weights)
        got = run(split, graph, inputs, "dp", "optimized", weights)
        for tensor, values in expected.items():
            np.testing.assert_array_equal(got[tensor], values, err_msg=tensor)


@pytest.mark.integration
def test_requests_for_two_models_run_at_once_over_the_ranks(cluster_daemon, daemon):
    """Two models' requests from two threads at once: each plan holds message tags of its own,
    so the runs overlap over MPI without meeting each other's messages; every answer is bitwise
    the single process's."""
    import concurrent.futures

    models = {name: graphs()[name] for name in ("ffn", "chain")}
    expected = {}
    with es.Client(daemon.address, timeout=120) as single:
        for name, (graph, inputs) in models.items():
            single.register_model(f"concurrent-{name}", graph)
            expected[name] = single.execute(f"concurrent-{name}", inputs).outputs
    with es.Client(cluster_daemon.address, timeout=120) as split:
        for name, (graph, _) in models.items():
            split.register_model(f"concurrent-{name}", graph)

        def serve(name):
            return [split.execute(f"concurrent-{name}", models[name][1]).outputs for _ in range(5)]

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            answers = dict(zip(models, pool.map(serve, models)))
    for name, runs in answers.items():
        for outputs in runs:
            for tensor, values in expected[name].items():
                np.testing.assert_array_equal(outputs[tensor], values, err_msg=f"{name} {tensor}")


def rank_pids(launcher_pid: int) -> dict:
    """{rank: pid} of the launcher's child processes, from their OMPI_COMM_WORLD_RANK."""
    ranks = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for entry in environ:
            if entry.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(entry.split(b"=", 1)[1])] = int(proc.name)
    return ranks


def wait_exit(process, timeout: float) -> int | None:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["hang", "kill"])
def test_a_rank_that_hangs_or_dies_stops_the_daemon_and_a_restart_recovers(daemon_binary, fault):
    """A rank that stops (SIGSTOP: hung) or dies (SIGKILL) while a request runs: the request
    fails with UNAVAILABLE within seconds instead of hanging, the daemon logs which rank, stops
    serving and exits non-zero for its supervisor; the job started again finds its plan in the
    plan store and answers as before."""
    if MPIRUN is None:
        pytest.skip("mpirun not found: scripts/setup installs Open MPI (openmpi-bin)")
    import signal
    import time

    graph, inputs = graphs()["ffn"]
    flags = ["--rank_timeout_seconds=2", "--shutdown_grace_seconds=2"]
    with tempfile.TemporaryDirectory(prefix="einsummable-cluster-fault-") as workdir:
        d = cluster_of(daemon_binary, Path(workdir), flags).start()
        ranks = {}
        try:
            with es.Client(d.address, timeout=120) as client:
                client.register_model("kept", graph)
                first = client.execute("kept", inputs)
                assert first.cache_hit is False
                ranks = rank_pids(d.process.pid)
                assert sorted(ranks) == [0, 1], ranks
                os.kill(ranks[1], signal.SIGSTOP if fault == "hang" else signal.SIGKILL)
                start = time.monotonic()
                with pytest.raises((es.UnavailableError, es.CancelledError)):
                    client.execute("kept", inputs)
                assert time.monotonic() - start < 60, "the request hung"
            status = wait_exit(d.process, 60)
            assert status not in (None, 0), (status, d.log_tail())
            log = d.log_path.read_text(errors="replace")
            if fault == "hang":
                assert "rank 1 did not answer a heartbeat within 2 s" in log, d.log_tail()
                assert "NOT_SERVING" in log, d.log_tail()
        finally:
            for pid in rank_pids(d.process.pid).values() if d.process.poll() is None else ():
                os.kill(pid, signal.SIGKILL)
            d.stop()
            if fault == "hang" and ranks.get(1):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(ranks[1], signal.SIGKILL)

        again = cluster_of(daemon_binary, Path(workdir), flags)
        again.start()
        try:
            with es.Client(again.address, timeout=120) as client:
                client.register_model("kept", graph)
                second = client.execute("kept", inputs)
                assert second.cache_hit is True, again.log_tail()
                for name, values in first.outputs.items():
                    np.testing.assert_array_equal(second.outputs[name], values, err_msg=name)
        finally:
            again.stop()
