"""Every series the alert rules and the Grafana dashboard query is one the daemon really exports.

The expressions are read from deploy/prometheus/rules/*.yml and deploy/grafana/dashboards/*.json
(targets and the label_values() queries of template variables) with promql.py. The daemon is
the real one (conftest.daemon_binary; skipped when absent) on the CPU backend with 2 devices,
``--device_memory`` (so the capacity gauge exists) and a plan cache directory; a few requests
make the series that appear only once used (per method, code, model, device pair, device, and a
model with batching). Then /metrics is scraped once and:

- every metric name an expression reads is a sample name in it. Histograms are exported as
  <family>_bucket (with le), _sum and _count, so those are the names queries must use; a query
  of the bare family name reads nothing in Prometheus, and is reported as such;
- every label a selector matches on is one the metric's samples carry (job and instance are
  added by Prometheus at scrape time), and every label of a by/on/... list is carried by one
  of the metrics the expression reads;
- names that are Prometheus's own (``up`` and the scrape_* series, ALERTS) are allowed only
  from an explicit list, so a misspelt metric is never taken for one of them.

About 5 s (the daemon takes 2 s to stop its metrics endpoint).
"""

from __future__ import annotations

import json
import tempfile
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

import promql
from conftest import DEPLOY, DaemonProcess, free_port

# Series Prometheus itself writes for every target or rule, not the daemon.
PROMETHEUS_SERIES = {
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
    "ALERTS",
    "ALERTS_FOR_STATE",
}
# Target labels Prometheus adds to every scraped sample (prometheus.yml has no relabelling).
TARGET_LABELS = {"job", "instance"}


def rule_expressions() -> list[tuple[str, str]]:
    found = []
    for path in sorted((DEPLOY / "prometheus" / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule.get("record")
                found.append((f"{path.name}: {name}", rule["expr"]))
    return found


def dashboard_expressions() -> list[tuple[str, str]]:
    found = []
    for path in sorted((DEPLOY / "grafana" / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                found.append(
                    (f"{path.name}: panel {panel['id']} {panel['title']!r}", target["expr"])
                )
        for variable in dashboard.get("templating", {}).get("list", []):
            if variable.get("type") != "query":
                continue
            query = variable["query"]
            query = query.get("query", "") if isinstance(query, dict) else query
            selector = promql.label_values_query(query)
            found.append(
                (
                    f"{path.name}: variable ${variable['name']}",
                    query if selector is None else selector,
                )
            )
    return found


# ---- the scanner itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, metrics",
    [
        ('up{job="einsummabled"} == 0 or absent(up{job="einsummabled"})', {"up"}),
        (
            'histogram_quantile(0.99, sum by (job, le) (rate(a_seconds_bucket{m=~"x|y"}[5m]))) > 1',
            {"a_seconds_bucket"},
        ),
        (
            "sum(rate(a_total[$__rate_interval])) by (job) / on (job) b offset 5m > 1e12",
            {"a_total", "b"},
        ),
        (
            'sum by (src, dst) (increase(moved_total{job="$job", instance=~"$i"}[$__range]))',
            {"moved_total"},
        ),
        ("used / capacity > 0.9", {"used", "capacity"}),
        ("a and b unless c or vector(1)", {"a", "b", "c"}),
    ],
)
def test_scanner_finds_metric_names(expr, metrics):
    assert promql.reads(expr).metrics == metrics


def test_scanner_finds_labels():
    reads = promql.reads(
        'sum by (method, le) (rate(x_bucket{job="a", code!="OK"}[5m])) / ignoring(code) y'
    )
    assert reads.matcher_labels == {"x_bucket": {"job", "code"}}
    assert reads.grouping_labels == {"method", "le", "code"}
    assert promql.label_values_query('label_values(m{job="$job"}, instance)') == 'm{job="$job"}'
    assert promql.label_values_query("label_values(job)") == ""
    assert promql.label_values_query("up") is None


def test_expressions_are_found():
    """The readers see the rules' and the dashboard's expressions (so the live test below is
    not vacuous): every alert of the rules file and every target of the dashboard."""
    rules = rule_expressions()
    dashboard = dashboard_expressions()
    assert len(rules) >= 9, rules
    assert len(dashboard) >= 20, dashboard
    assert all(expr.strip() for _, expr in rules + dashboard)


# ---- against the live daemon -----------------------------------------------------------------


def drive_requests(address: str) -> None:
    """Registers a weight-carrying matmul (y = x·w, tokens symbolic), uploads w, executes it
    twice on 2 devices (a compile, then a cache hit; the plan moves bytes between the devices),
    runs a model with batching once (the batch histograms) and one with token buckets after its
    warm-up (the bucket and warm-up series), and makes one call fail (NOT_FOUND), so the
    per-label series exist."""
    import einsummable as es

    def matmul_graph():
        g = es.createGraph()
        x = g.insertTensor(es.tensorDesc(["tokens", ("d", 8)]), name="x")
        w = g.insertTensor(es.tensorDesc([("d", 8), ("e", 8)]), name="w")
        g.save(g.matmul(x, w, name="y"))
        return g

    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8), dtype=np.float32)
    with es.Client(address, timeout=60) as client:
        client.register_model("tiny", matmul_graph(), weights=["w"])
        client.upload_tensor("tiny", "w", w)
        for _ in range(2):
            x = rng.standard_normal((4, 8), dtype=np.float32)
            # The bytes objective splits the contraction: its partial sums move between the
            # devices, so the bytes-moved series exist (the time objective's plan moves nothing).
            result = client.execute(
                "tiny", {"x": x}, {"tokens": 4}, {"devices": 2, "objective": "bytes"}
            )
            np.testing.assert_allclose(result.outputs["y"], x @ w, rtol=1e-5, atol=1e-5)
        client.register_model(
            "batched", matmul_graph(), weights=["w"], batching=es.Batching("tokens")
        )
        client.upload_tensor("batched", "w", w)
        x = rng.standard_normal((4, 8), dtype=np.float32)
        result = client.execute("batched", {"x": x}, {"tokens": 4}, {"devices": 2})
        np.testing.assert_allclose(result.outputs["y"], x @ w, rtol=1e-5, atol=1e-5)
        # Token buckets, warmed up, then one request padded: the bucket and warm-up series.
        client.register_model(
            "bucketed",
            matmul_graph(),
            weights=["w"],
            batching=es.Batching("tokens", buckets=es.TokenBuckets(sizes=(4, 8))),
        )
        client.upload_tensor("bucketed", "w", w)
        assert client.wait_for_warm_up("bucketed", timeout_s=120).state == "done"
        x = rng.standard_normal((3, 8), dtype=np.float32)
        result = client.execute("bucketed", {"x": x})
        np.testing.assert_allclose(result.outputs["y"], x @ w, rtol=1e-5, atol=1e-5)
        with pytest.raises(es.NotFoundError):
            client.compile("no-such-model", {"tokens": 8})


@pytest.fixture(scope="module")
def live_metrics(daemon_binary) -> str:
    metrics_port = free_port()
    with tempfile.TemporaryDirectory(prefix="einsummable-deploy-metrics-") as workdir:
        workdir = Path(workdir)
        daemon = DaemonProcess(
            [
                daemon_binary,
                "--listen=127.0.0.1:0",
                "--backend=cpu",
                "--devices=2",
                "--device_memory=1GiB",
                f"--metrics_port={metrics_port}",
                f"--plan_cache_dir={workdir / 'plans'}",
            ],
            env=None,
            workdir=workdir,
        )
        try:
            drive_requests(daemon.address)
            with urllib.request.urlopen(
                f"http://127.0.0.1:{metrics_port}/metrics", timeout=10
            ) as response:
                return response.read().decode()
        finally:
            assert daemon.stop() == 0, daemon.log_tail()


@pytest.mark.parametrize(
    "where, expr",
    rule_expressions() + dashboard_expressions(),
    ids=[where for where, _ in rule_expressions() + dashboard_expressions()],
)
def test_queried_series_are_exported(live_metrics, where, expr):
    samples, types = promql.exported_series(live_metrics)
    reads = promql.reads(expr)
    assert reads.metrics, f"{where}: reads no metric: {expr}"
    problems = []
    carried = set(TARGET_LABELS)
    for name in sorted(reads.metrics):
        if name in PROMETHEUS_SERIES:
            carried |= {"job", "instance"}
            continue
        if name not in samples:
            why = "not exported"
            if types.get(name) == "histogram":
                why = f"a histogram family: query {name}_bucket, {name}_sum or {name}_count"
            problems.append(f"{name}: {why}")
            continue
        carried |= samples[name]
        for label in reads.matcher_labels.get(name, set()) - TARGET_LABELS:
            if label not in samples[name]:
                problems.append(
                    f"{name}{{{label}=...}}: {name} has no label {label} "
                    f"(it has {sorted(samples[name]) or 'none'})"
                )
    for label in sorted(reads.grouping_labels - carried):
        problems.append(f"by/on ({label}): no metric of the expression carries {label}")
    assert not problems, f"{where}: {expr}\n" + "\n".join(problems)


def test_live_metrics_have_the_series_the_requests_make(live_metrics):
    """The requests above made the series that only exist once used; without them the test
    above could not tell a wrong name from a series not yet created."""
    samples, types = promql.exported_series(live_metrics)
    for name, labels in {
        "einsummable_requests_total": {"method", "code"},
        "einsummable_request_duration_seconds_bucket": {"method", "le"},
        "einsummable_execute_duration_seconds_bucket": {"model", "le"},
        "einsummable_bytes_moved_total": {"src", "dst"},
        "einsummable_device_memory_bytes": {"device"},
        "einsummable_device_memory_capacity_bytes": {"device"},
        "einsummable_batch_size_bucket": {"model", "le"},
        "einsummable_batch_queue_seconds_bucket": {"model", "le"},
        "einsummable_predicted_exchange_seconds": {"model"},
    }.items():
        assert name in samples, f"{name} not exported:\n{live_metrics}"
        assert labels <= samples[name], (name, samples[name])
    assert types["einsummable_request_duration_seconds"] == "histogram"
    assert 'code="NOT_FOUND"' in live_metrics
