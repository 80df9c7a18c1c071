"""deploy/prometheus: the configuration and the alert rules pass promtool, and the rules' unit
tests (promtool test rules) pass and show every alert both firing and quiet.

promtool is Debian's prometheus package (scripts/setup); missing, the tests fail. About 1 s.
"""

from __future__ import annotations

import re

import yaml

from conftest import DEPLOY, REPO_ROOT, run, tool

PROMETHEUS = DEPLOY / "prometheus"
RULES = PROMETHEUS / "rules" / "einsummable.rules.yml"
RULE_TESTS = PROMETHEUS / "tests" / "einsummable.rules.test.yml"

# What the issue asks the alerts to cover, by the alert that covers it.
EXPECTED_ALERTS = {
    "EinsummableDown",  # daemon down
    "EinsummableServerErrors",  # error ratio: failures inside the server
    "EinsummableErrorRatioHigh",  # error ratio: every code but OK
    "EinsummableLatencyP99High",  # p99 latency
    "EinsummableCompileSlow",  # compile time
    "EinsummableCompileQueueBacklog",  # compile time: waiting for a thread
    "EinsummablePlanCacheThrash",  # plan cache thrash: misses
    "EinsummablePlanStoreEvictions",  # plan cache thrash: evictions
    "EinsummableDeviceMemoryNearCapacity",  # device memory near capacity
}


def alerts() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def test_promtool_checks_config():
    result = run([tool("promtool"), "check", "config", PROMETHEUS / "prometheus.yml"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout + result.stderr


def test_promtool_checks_rules():
    result = run([tool("promtool"), "check", "rules", RULES])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in result.stdout + result.stderr


def test_promtool_rule_unit_tests_pass():
    result = run([tool("promtool"), "test", "rules", RULE_TESTS])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_rule_unit_tests_catch_a_wrong_threshold(tmp_path):
    """The unit tests fail when an alert's threshold changes (so they test the rules rather than
    pass on anything): the rules copied with EinsummableServerErrors at 10% instead of 1%."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    changed = RULES.read_text().replace("            > 0.01\n", "            > 0.1\n")
    assert changed != RULES.read_text()
    (tmp_path / "rules" / RULES.name).write_text(changed)
    (tmp_path / "tests" / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    result = run([tool("promtool"), "test", "rules", tmp_path / "tests" / RULE_TESTS.name])
    assert result.returncode != 0
    assert "alertname: EinsummableServerErrors" in result.stdout + result.stderr


def test_alerts_cover_the_issue():
    names = [rule["alert"] for rule in alerts()]
    assert sorted(names) == sorted(EXPECTED_ALERTS)


def test_every_alert_is_tested_firing_and_quiet():
    tested = yaml.safe_load(RULE_TESTS.read_text())
    firing, quiet = set(), set()
    for case in tested["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert firing >= EXPECTED_ALERTS, f"never shown firing: {EXPECTED_ALERTS - firing}"
    assert quiet >= EXPECTED_ALERTS, f"never shown quiet: {EXPECTED_ALERTS - quiet}"


def test_every_alert_has_severity_summary_and_a_runbook_in_operations_md():
    operations = (REPO_ROOT / "docs" / "operations.md").read_text()
    headings = {
        # GitHub's anchor of a heading: lower case, spaces to dashes, punctuation dropped.
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in operations.splitlines()
        if line.startswith("#")
    }
    for rule in alerts():
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        runbook = rule["annotations"]["runbook"]
        assert runbook == f"docs/operations.md#{rule['alert'].lower()}", rule["alert"]
        assert runbook.split("#")[1] in headings, f"docs/operations.md has no heading {runbook}"


def test_scrape_job_and_target_match_the_rules_and_compose():
    """EinsummableDown selects the scrape job by name, and the target is the compose service
    on the image's metrics port."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "einsummabled"
    down = next(rule for rule in alerts() if rule["alert"] == "EinsummableDown")
    assert 'up{job="einsummabled"}' in down["expr"]
    (target,) = job["static_configs"][0]["targets"]
    host, port = target.split(":")
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert host in compose["services"]
    dockerfile = (DEPLOY / "docker" / "Dockerfile").read_text()
    assert f"FLAGS_metrics_port={port}" in dockerfile
    assert config["rule_files"] == ["rules/einsummable.rules.yml"]
