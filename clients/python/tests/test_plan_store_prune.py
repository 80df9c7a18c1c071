"""Integration: ``--plan_cache_max_bytes`` on the real daemon (docs/server.md "Plans and weights").

A daemon holding two plans in memory and room for three and a half plan files on disk compiles
four shapes, one of them kept in memory by a cache hit while its file is the oldest: the
directory stays under the cap, the least recently used file not in use goes, the plan in use
stays, the metrics count the eviction, and a restarted daemon on the same directory loads the
most recent plan instead of compiling it.
"""

import re
import tempfile
import urllib.request
from pathlib import Path

import pytest
from conftest import Daemon, free_port, matmul_graph

import einsummable as es

pytestmark = pytest.mark.integration

MODEL = "prune-matmul"
# Same number of digits, so the plan files' sizes are close.
TOKENS = (16, 24, 32, 40)


def plan_file_name(plan_key: str) -> str:
    """server::PlanStore::file_name: FNV-1a 64 of the key, 16 hex digits, ".plan"."""
    h = 14695981039346656037
    for byte in plan_key.encode():
        h = ((h ^ byte) * 1099511628211) % 2**64
    return f"{h:016x}.plan"


def plan_files(directory: Path) -> dict:
    return {
        p.name: p.stat().st_size
        for p in directory.iterdir()
        if re.fullmatch(r"[0-9a-f]{16}\.plan", p.name)
    }


def register(client):
    # No weights: a model with weights gets one plan that lays them out and pinned plans with
    # an exchange more each (test_serving.py), and this test wants plan files of equal size.
    client.register_model(MODEL, matmul_graph())


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics:\n{text}"
    return float(match.group(1))


def test_plan_files_stay_under_the_cap_and_the_plan_in_use_survives(daemon_binary):
    with tempfile.TemporaryDirectory(prefix="einsummable-prune-") as workdir:
        workdir = Path(workdir)
        # The plan files' sizes, from a daemon without a cap.
        (workdir / "probe").mkdir()
        probe = Daemon(daemon_binary, workdir / "probe", ["--plan_cache_max_bytes=0"]).start()
        try:
            with es.Client(probe.address, timeout=60) as client:
                register(client)
                keys = {t: client.compile(MODEL, {"tokens": t}).plan_key for t in TOKENS}
        finally:
            probe.stop()
        sizes = plan_files(probe.plan_cache_dir)
        assert sorted(sizes) == sorted(plan_file_name(k) for k in keys.values())
        largest, smallest = max(sizes.values()), min(sizes.values())
        cap = 3 * largest + largest // 2
        assert 4 * smallest > cap, f"plan files too unequal for this test: {sizes}"

        (workdir / "capped").mkdir()
        metrics_port = free_port()
        flags = [
            f"--plan_cache_max_bytes={cap}",
            "--plan_cache_entries=2",
            f"--metrics_port={metrics_port}",
        ]
        capped = Daemon(daemon_binary, workdir / "capped", flags).start()
        directory = capped.plan_cache_dir
        t1, t2, t3, t4 = TOKENS
        try:
            with es.Client(capped.address, timeout=60) as client:
                register(client)
                for t in (t1, t2):
                    assert not client.compile(MODEL, {"tokens": t}).cache_hit
                # A hit in memory: t1 is used, but its file stays the oldest.
                assert client.compile(MODEL, {"tokens": t1}).cache_hit
                # t3: four files would not fit, but t1 and t2 are in memory and t3 just saved.
                client.compile(MODEL, {"tokens": t3})
                assert len(plan_files(directory)) == 3
                # t4: memory holds t3 and t1 now; t2's file is the oldest not in use.
                client.compile(MODEL, {"tokens": t4})
                files = plan_files(directory)
                assert sum(files.values()) <= cap
                assert sorted(files) == sorted(plan_file_name(keys[t]) for t in (t1, t3, t4))
                assert metric(metrics_port, "einsummable_plan_store_evictions_total") == 1
                assert metric(metrics_port, "einsummable_plan_store_files") == 3
                assert metric(metrics_port, "einsummable_plan_store_bytes") == sum(files.values())
                # The plan kept in memory still runs from memory.
                assert client.compile(MODEL, {"tokens": t1}).cache_hit
        finally:
            capped.stop()
        assert "removed 1 least recently used plan file(s)" in capped.log_tail(200)

        # A restarted daemon finds the most recent plan; the evicted one is compiled again.
        capped.extra_flags[-1] = "--metrics_port=0"
        capped.start()
        try:
            with es.Client(capped.address, timeout=60) as client:
                register(client)
                assert client.compile(MODEL, {"tokens": t4}).cache_hit
                assert not client.compile(MODEL, {"tokens": t2}).cache_hit
            assert sum(plan_files(directory).values()) <= cap
        finally:
            capped.stop()
