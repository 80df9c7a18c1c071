"""deploy/grafana: the provisioning files and the dashboard, checked structurally (Grafana is
not installed here, so nothing is rendered): the JSON parses, every panel has a data source and
at least one target with an expression, panel ids are unique, grid positions stay inside the
24 columns and do not overlap, every variable a panel uses is defined, and the panels the issue
asks for are there. The metric names the targets query are checked against a live daemon in
test_metric_names.py. Under a second.
"""

from __future__ import annotations

import itertools
import json
import re

import pytest
import yaml

from conftest import DEPLOY, compose_bind_mounts

GRAFANA = DEPLOY / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))


def load(path):
    return json.loads(path.read_text())


def test_there_is_a_dashboard():
    assert [path.name for path in DASHBOARDS] == ["einsummable.json"]


@pytest.fixture(params=DASHBOARDS, ids=[path.name for path in DASHBOARDS])
def dashboard(request):
    return load(request.param)


def panels_of(dashboard):
    """Every panel, those inside collapsed rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_dashboard_has_identity(dashboard):
    assert re.fullmatch(r"[a-z0-9-]{1,40}", dashboard["uid"])
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert "id" not in dashboard or dashboard["id"] is None  # provisioning assigns it


def test_panel_ids_are_unique(dashboard):
    ids = [panel["id"] for panel in panels_of(dashboard)]
    assert len(ids) == len(set(ids)), sorted(ids)
    assert all(isinstance(panel_id, int) and panel_id > 0 for panel_id in ids)


def test_every_panel_has_a_data_source_and_an_expression(dashboard):
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    for panel in panels_of(dashboard):
        if panel["type"] == "row":
            continue
        where = f"panel {panel['id']} {panel.get('title')!r}"
        assert panel.get("title"), where
        datasource = panel.get("datasource")
        assert isinstance(datasource, dict) and datasource.get("type") == "prometheus", where
        uid = datasource.get("uid", "")
        if uid.startswith("$"):
            name = uid.strip("${}")
            assert variables.get(name, {}).get("type") == "datasource", f"{where}: {uid}"
        targets = panel.get("targets", [])
        assert targets, f"{where}: no targets"
        assert any(target.get("expr", "").strip() for target in targets), where
        ref_ids = [target["refId"] for target in targets]
        assert len(ref_ids) == len(set(ref_ids)), f"{where}: refIds {ref_ids}"
        for target in targets:
            assert target.get("expr", "").strip(), f"{where}: target {target['refId']} empty"
            target_datasource = target.get("datasource", datasource)
            assert target_datasource == datasource, f"{where}: target {target['refId']}"


def test_grid_positions_fit_and_do_not_overlap(dashboard):
    boxes = []
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        where = f"panel {panel['id']} {panel.get('title')!r}"
        assert grid["w"] > 0 and grid["h"] > 0, where
        assert grid["x"] >= 0 and grid["y"] >= 0 and grid["x"] + grid["w"] <= 24, where
        boxes.append((where, grid))
    for (a, ga), (b, gb) in itertools.combinations(boxes, 2):
        overlap = (
            ga["x"] < gb["x"] + gb["w"]
            and gb["x"] < ga["x"] + ga["w"]
            and ga["y"] < gb["y"] + gb["h"]
            and gb["y"] < ga["y"] + ga["h"]
        )
        assert not overlap, f"{a} {ga} overlaps {b} {gb}"


def test_variables_used_are_defined(dashboard):
    defined = {variable["name"] for variable in dashboard["templating"]["list"]}
    builtin = {"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms"}
    text = json.dumps(dashboard["panels"]) + json.dumps(dashboard["templating"])
    used = set(re.findall(r"\$\{?(\w+)", text))
    assert used - builtin <= defined, used - builtin - defined


def test_grid_check_catches_an_overlap(dashboard):
    """The overlap check is not vacuous: moving a panel onto its neighbour fails it."""
    moved = json.loads(json.dumps(dashboard))
    first, second = [panel for panel in moved["panels"] if panel["type"] != "row"][:2]
    second["gridPos"] = dict(first["gridPos"])
    with pytest.raises(AssertionError, match="overlaps"):
        test_grid_positions_fit_and_do_not_overlap(moved)


def exprs(panel):
    return " ".join(target["expr"] for target in panel.get("targets", []))


def test_the_panels_the_issue_asks_for(dashboard):
    panels = [panel for panel in panels_of(dashboard) if panel["type"] != "row"]

    def find(what, predicate):
        found = [panel for panel in panels if predicate(panel)]
        assert found, f"no panel shows {what}"
        return found

    find(
        "the request rate",
        lambda p: "rate(einsummable_requests_total" in exprs(p) and "code!=" not in exprs(p),
    )
    find("errors", lambda p: 'code!="OK"' in exprs(p))
    latency = find(
        "latency percentiles",
        lambda p: (
            "histogram_quantile" in exprs(p)
            and "einsummable_request_duration_seconds_bucket" in exprs(p)
        ),
    )
    assert any(
        {"0.5", "0.9", "0.99"} <= set(re.findall(r"histogram_quantile\((0\.\d+)", exprs(p)))
        for p in latency
    )
    find(
        "compile time",
        lambda p: (
            "histogram_quantile" in exprs(p)
            and "einsummable_compile_duration_seconds_bucket" in exprs(p)
        ),
    )
    find(
        "the plan cache hit ratio",
        lambda p: (
            "einsummable_plan_cache_hits_total" in exprs(p)
            and "einsummable_plan_cache_misses_total" in exprs(p)
        ),
    )
    (heatmap,) = find(
        "bytes moved per device pair as a heat map",
        lambda p: p["type"] == "heatmap" and "einsummable_bytes_moved_total" in exprs(p),
    )
    assert re.search(r"by \((src, dst|dst, src)\)", exprs(heatmap))
    assert heatmap["options"]["calculate"] is False  # rows are the pairs, not computed buckets
    find(
        "device memory used against capacity",
        lambda p: (
            "einsummable_device_memory_bytes" in exprs(p)
            and "einsummable_device_memory_capacity_bytes" in exprs(p)
        ),
    )


def test_datasource_provisioning():
    provisioning = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    assert provisioning["apiVersion"] == 1
    (source,) = provisioning["datasources"]
    assert source["type"] == "prometheus"
    assert source["isDefault"] is True
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    host, port = source["url"].removeprefix("http://").split(":")
    assert host in compose["services"], host
    assert any(mapping.endswith(f":{port}") for mapping in compose["services"][host]["ports"])


def test_dashboard_provider_reads_the_mounted_dashboards():
    provisioning = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "einsummable.yml").read_text()
    )
    assert provisioning["apiVersion"] == 1
    (provider,) = provisioning["providers"]
    assert provider["type"] == "file"
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    mounts = compose_bind_mounts(compose["services"]["grafana"])
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
