"""Integration: a real Prometheus server scrapes einsummabled's /metrics (docs/server.md "Metrics").

Needs the daemon binary (conftest.py) and Debian's ``prometheus`` package (``/usr/bin/prometheus``
and ``/usr/bin/promtool``; ``scripts/setup`` installs it with its system service disabled); skipped,
saying which is missing, otherwise. The daemon serves metrics on a free port; Prometheus, on
another free port with a temporary TSDB, scrapes it every second. About 10 s (a daemon serving
metrics takes 2 s to stop).
"""

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import Daemon, free_port, matmul_graph

import einsummable as es

pytestmark = pytest.mark.integration

SCRAPE_TIMEOUT_S = 30.0

PROMETHEUS_YML = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: einsummabled
    static_configs:
      - targets: ["127.0.0.1:{metrics_port}"]
"""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(
            f"{name} not found on PATH: install Debian's prometheus package (scripts/setup does)"
        )
    return path


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def _query(prometheus_port: int, query: str) -> list:
    url = f"http://127.0.0.1:{prometheus_port}/api/v1/query?" + urllib.parse.urlencode(
        {"query": query}
    )
    answer = json.loads(_get(url))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# Every metric family of docs/server.md: after _make_requests each has at least one series.
METRIC_FAMILIES = (
    "einsummable_requests_total",
    "einsummable_request_duration_seconds",
    "einsummable_inflight_requests",
    "einsummable_compile_duration_seconds",
    "einsummable_plan_cache_hits_total",
    "einsummable_plan_cache_misses_total",
    "einsummable_plan_cache_entries",
    "einsummable_execute_duration_seconds",
    "einsummable_predicted_exchange_seconds",
    "einsummable_bytes_moved_total",
    "einsummable_device_memory_bytes",
)


def _make_requests(address: str) -> dict:
    """Calls the daemon: registers a tiny model (y = x·w, tokens symbolic), uploads w, executes
    it twice on 2 devices by the bytes objective (a compile, then a cache hit) checking the
    result, calls GetServerInfo 3 times and ListModels twice, and Compile of a model that does
    not exist (NOT_FOUND).
    Returns the successful calls made, by method."""
    g = matmul_graph(d=8, e=8)
    rng = np.random.default_rng(0)
    w_value = rng.standard_normal((8, 8), dtype=np.float32)
    with es.Client(address, timeout=60) as client:
        client.register_model("tiny", g, weights=["w"])
        client.upload_tensor("tiny", "w", w_value)
        for _ in range(2):
            x_value = rng.standard_normal((4, 8), dtype=np.float32)
            # The bytes objective splits the contraction, so the partial sums move between the
            # devices and the bytes-moved series exist (a plan that moves nothing, as the time
            # objective's does here, leaves them absent).
            result = client.execute(
                "tiny", {"x": x_value}, {"tokens": 4}, {"devices": 2, "objective": "bytes"}
            )
            np.testing.assert_allclose(result.outputs["y"], x_value @ w_value, rtol=1e-5, atol=1e-5)
        for _ in range(3):
            client.server_info()
        for _ in range(2):
            client.list_models()
        with pytest.raises(es.NotFoundError):
            client.compile("no-such-model", {"tokens": 8})
    return {
        "RegisterModel": 1,
        "UploadTensor": 1,
        "Execute": 2,
        "GetServerInfo": 3,
        "ListModels": 2,
    }


def test_promtool_accepts_metrics(daemon_binary):
    """``promtool check metrics`` (the text format parser and Prometheus's naming lint) passes
    on the daemon's /metrics once every metric family has series, failed calls included."""
    promtool = _tool("promtool")
    metrics_port = free_port()
    with tempfile.TemporaryDirectory(prefix="einsummable-promtool-") as workdir:
        d = Daemon(daemon_binary, Path(workdir), [f"--metrics_port={metrics_port}", "--devices=2"])
        try:
            d.start()
            _make_requests(d.address)
            text = _get(f"http://127.0.0.1:{metrics_port}/metrics")
        finally:
            d.stop()
    # What is linted has a sample of every family, the failed call's series among them.
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    for family in METRIC_FAMILIES:
        assert any(line.startswith(family) for line in samples), f"{family} missing:\n{text}"
    assert any(
        line.startswith("einsummable_requests_total{")
        and 'code="NOT_FOUND"' in line
        and 'method="Compile"' in line
        for line in samples
    ), text
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, (
        f"promtool check metrics exited {check.returncode}:\n{check.stdout}{check.stderr}"
        f"\n--- the metrics ---\n{text}"
    )


def test_prometheus_scrapes_daemon(daemon_binary):
    prometheus = _tool("prometheus")
    metrics_port = free_port()
    with tempfile.TemporaryDirectory(prefix="einsummable-prometheus-") as workdir:
        workdir = Path(workdir)
        d = Daemon(daemon_binary, workdir, [f"--metrics_port={metrics_port}", "--devices=2"])
        server = None
        prometheus_log = workdir / "prometheus.log"
        try:
            d.start()
            calls = _make_requests(d.address)

            prometheus_port = free_port()
            config = workdir / "prometheus.yml"
            config.write_text(PROMETHEUS_YML.format(metrics_port=metrics_port))
            with open(prometheus_log, "wb") as log:
                server = subprocess.Popen(
                    [
                        prometheus,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={workdir / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{prometheus_port}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=workdir,
                )

            # Poll until a scrape has landed the request counters (the first scrape comes
            # within a second of startup; the TSDB and the web API take a moment before that).
            deadline = time.monotonic() + SCRAPE_TIMEOUT_S
            series, last_error = [], None
            while time.monotonic() < deadline:
                if server.poll() is not None:
                    pytest.fail(
                        f"prometheus exited with status {server.returncode}; its log:\n"
                        f"{_tail(prometheus_log)}"
                    )
                try:
                    series = _query(prometheus_port, "einsummable_requests_total")
                    if series:
                        break
                except (urllib.error.URLError, OSError, ValueError) as error:
                    last_error = error
                time.sleep(0.25)
            if not series:
                pytest.fail(
                    f"prometheus returned no einsummable_requests_total series within "
                    f"{SCRAPE_TIMEOUT_S:g} s (last error: {last_error!r}); its log:\n"
                    f"{_tail(prometheus_log)}\n--- daemon log ---\n{d.log_tail()}"
                )

            by_labels = {}
            for s in series:
                labels = s["metric"]
                assert labels["__name__"] == "einsummable_requests_total", s
                assert labels["job"] == "einsummabled", s
                assert labels["instance"] == f"127.0.0.1:{metrics_port}", s
                by_labels[(labels["method"], labels["code"])] = float(s["value"][1])
            for method, count in calls.items():
                # GetServerInfo also counts Daemon.start's readiness probe.
                assert by_labels.get((method, "OK"), 0) >= count, (method, by_labels)
            assert by_labels.get(("ListModels", "OK")) == calls["ListModels"], by_labels
            assert by_labels.get(("Execute", "OK")) == calls["Execute"], by_labels
            assert by_labels.get(("Compile", "NOT_FOUND")) == 1, by_labels
            assert ("Compile", "OK") not in by_labels, by_labels

            # One compile (the first Execute), one cache hit (the second); labelled families.
            compiles = _query(prometheus_port, "einsummable_compile_duration_seconds_count")
            assert [float(s["value"][1]) for s in compiles] == [1.0], compiles
            hits = _query(prometheus_port, "einsummable_plan_cache_hits_total")
            assert [float(s["value"][1]) for s in hits] == [1.0], hits
            executes = _query(prometheus_port, "einsummable_execute_duration_seconds_count")
            assert [(s["metric"]["model"], float(s["value"][1])) for s in executes] == [
                ("tiny", 2.0)
            ], executes

            # The scrape target is healthy and a histogram made it through too.
            up = _query(prometheus_port, 'up{job="einsummabled"}')
            assert [float(s["value"][1]) for s in up] == [1.0], up
            latency = _query(
                prometheus_port,
                'einsummable_request_duration_seconds_count{method="ListModels"}',
            )
            assert [float(s["value"][1]) for s in latency] == [2.0], latency
        finally:
            if server is not None and server.poll() is None:
                server.terminate()
                try:
                    server.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
            d.stop()
