"""Integration: NVIDIA's perf_analyzer against einsummabled's KServe v2 endpoint, unchanged
(docs/server.md "KServe v2"), on the shared real daemon (the ``daemon`` fixture).

perf_analyzer is the C++ binary in tritonclient's wheel, found and given its libraries by
perf_analyzer_tool.py (shared with bench/serving/run.py). It reads ModelMetadata and Triton's
ModelConfig, then sends ModelInfer requests from 1 and 4 concurrent threads, each carrying
Triton's ``triton_enable_empty_final_response`` parameter; the test reads its CSV report and its
stdout.
Skipped with a message only when the binary is absent.
"""

import csv
import subprocess

import numpy as np
import pytest
from conftest import DAEMON_DEVICES
from perf_analyzer_tool import perf_analyzer_binary, perf_analyzer_env

import einsummable as es

pytestmark = pytest.mark.integration

MODEL = "perf-ffn"
D_MODEL = 16
D_FF = 32
TOKENS = 8
CONCURRENCY = (1, 4)  # --concurrency-range 1:4:3


def ffn_graph():
    """y = relu(x w1) w2 with x [tokens, D_MODEL] (tokens symbolic), w1 and w2 weights."""
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc(["tokens", ("d_model", D_MODEL)]), name="x")
    w1 = g.insertTensor(es.tensorDesc([("d_model", D_MODEL), ("d_ff", D_FF)]), name="w1")
    w2 = g.insertTensor(es.tensorDesc([("d_ff", D_FF), ("d_model", D_MODEL)]), name="w2")
    h = g.unary(g.matmul(x, w1, name="h"), "relu", 0.0, name="a")
    g.save(g.matmul(h, w2, name="y"))
    return g


@pytest.fixture(scope="module")
def perf_analyzer():
    binary = perf_analyzer_binary()
    if binary is None:
        pytest.skip(
            "perf_analyzer not found (tritonclient's wheel puts it in .venv/bin: run scripts/setup)"
        )
    return binary


@pytest.fixture(scope="module")
def perf_model(daemon):
    """Registers MODEL with its weights uploaded and its plan for [TOKENS, D_MODEL] compiled
    (so that perf_analyzer's first measurement window is not the compile)."""
    rng = np.random.default_rng(20261202)
    w1 = rng.standard_normal((D_MODEL, D_FF), dtype=np.float32) / 4
    w2 = rng.standard_normal((D_FF, D_MODEL), dtype=np.float32) / 4
    with es.Client(daemon.address, timeout=60) as client:
        client.register_model(MODEL, ffn_graph(), weights=["w1", "w2"])
        client.upload_tensor(MODEL, "w1", w1)
        client.upload_tensor(MODEL, "w2", w2)
        grpcclient = pytest.importorskip("tritonclient.grpc")
        triton = grpcclient.InferenceServerClient(url=daemon.address)
        try:
            x = grpcclient.InferInput("x", [TOKENS, D_MODEL], "FP32")
            x.set_data_from_numpy(np.zeros((TOKENS, D_MODEL), np.float32))
            triton.infer(MODEL, [x], client_timeout=60)
        finally:
            triton.close()
        yield MODEL
        client.unregister(MODEL)


def run_perf_analyzer(binary, address, model, *extra):
    """perf_analyzer at concurrency 1 then 4 on [TOKENS, D_MODEL] inputs, 500 ms windows."""
    command = [
        str(binary),
        "-i", "grpc",
        "-u", address,
        "-m", model,
        "--shape", f"x:{TOKENS},{D_MODEL}",
        "--concurrency-range", "1:4:3",
        "--measurement-interval", "500",
        # Three windows within 50% of each other: a loaded 2-core machine is noisy, and the
        # test asks for a working client, not a benchmark.
        "--stability-percentage", "50",
        "--max-trials", "8",
        *extra,
    ]  # fmt: skip
    try:
        return subprocess.run(
            command, env=perf_analyzer_env(), capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"perf_analyzer ran past 120 s:\n{error.stdout}\n{error.stderr}")


def test_perf_analyzer_runs_at_concurrency_1_and_4(perf_analyzer, perf_model, daemon, tmp_path):
    report = tmp_path / "perf.csv"
    result = run_perf_analyzer(perf_analyzer, daemon.address, perf_model, "-f", str(report))
    output = f"{result.stdout}\n{result.stderr}"
    # One failed request ends perf_analyzer with "Thread [0] had error: <the status message>"
    # and exit code 99 (test_perf_analyzer_reports_the_daemons_refusal).
    assert result.returncode == 0, (
        f"perf_analyzer exited {result.returncode}:\n{output}\ndaemon log:\n{daemon.log_tail()}"
    )
    assert "error" not in output.lower(), output

    counts = [
        int(line.split(":")[1])
        for line in result.stdout.splitlines()
        if line.strip().startswith("Request count:")
    ]
    assert len(counts) == len(CONCURRENCY) and all(n > 0 for n in counts), output
    with open(report, newline="") as f:
        rows = list(csv.DictReader(f))
    # perf_analyzer writes the CSV in order of increasing throughput, not of concurrency (with
    # CPU-bound requests, concurrency 4 can come out slower than 1), so rows are keyed here.
    by_concurrency = {int(row["Concurrency"]): row for row in rows}
    assert len(rows) == len(CONCURRENCY) and sorted(by_concurrency) == sorted(CONCURRENCY), (
        rows,
        output,
    )
    for row in rows:
        assert float(row["Inferences/Second"]) > 0, (row, output)
        assert float(row["p50 latency"]) > 0, (row, output)  # microseconds
    # The summary on stdout agrees: one positive throughput per concurrency.
    summary = [line for line in result.stdout.splitlines() if line.startswith("Concurrency: ")]
    assert len(summary) == len(CONCURRENCY), output
    for line in summary:
        concurrency = int(line.split("Concurrency: ")[1].split(",")[0])
        throughput = float(line.split("throughput: ")[1].split()[0])
        row = by_concurrency[concurrency]
        assert throughput == pytest.approx(float(row["Inferences/Second"])), (line, row)


def test_perf_analyzer_reports_the_daemons_refusal(perf_analyzer, perf_model, daemon):
    """What the test above relies on: a refused request fails perf_analyzer, with the daemon's
    message. perf_analyzer sends --request-parameter as a request parameter, so this also shows
    the daemon's own parameters reach it."""
    result = run_perf_analyzer(
        perf_analyzer, daemon.address, perf_model, "--request-parameter", "devices:99:int"
    )
    assert result.returncode != 0, result.stdout
    assert (
        "Thread [0] had error: options.devices: 99 is not between 1 and the server's "
        f"{DAEMON_DEVICES} devices" in result.stdout + result.stderr
    ), result.stdout + result.stderr
