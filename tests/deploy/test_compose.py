"""deploy/compose.yaml: valid against the Compose specification (check-jsonschema's vendored
compose-spec schema; no Docker needed), and wired as the other files expect: the daemon built
from deploy/docker/Dockerfile with an NVIDIA GPU reservation, every bind mount's source present,
Prometheus reading the mounted configuration, ports published on loopback only, and a stop
grace period longer than the daemon's drain. Under a second.
"""

from __future__ import annotations

import re

import yaml

from conftest import DEPLOY, compose_bind_mounts, run, tool

COMPOSE = DEPLOY / "compose.yaml"


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_matches_the_compose_specification():
    result = run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", COMPOSE], timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_catches_a_misspelt_key(tmp_path):
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("driver: nvidia", "drivr: nvidia"))
    result = run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", broken], timeout=60
    )
    assert result.returncode != 0
    assert "drivr" in result.stdout + result.stderr


def test_services():
    assert set(compose()["services"]) == {"einsummabled", "prometheus", "grafana"}


def test_daemon_is_built_here_and_reserves_gpus():
    daemon = compose()["services"]["einsummabled"]
    context = (DEPLOY / daemon["build"]["context"]).resolve()
    assert (context / daemon["build"]["dockerfile"]).is_file()
    (device,) = daemon["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert "gpu" in device["capabilities"]
    assert device.get("count") == "all" or device.get("device_ids")
    volumes = [volume.split(":") for volume in daemon["volumes"]]
    assert ["plans", "/var/lib/einsummable"] in volumes
    assert "plans" in compose()["volumes"]


def test_daemon_serves_the_mounted_model_repository_read_only():
    """The host's model directory is mounted read-only where FLAGS_model_repository points, and
    the health check allows for the start-up load (health is NOT_SERVING until it ends)."""
    daemon = compose()["services"]["einsummabled"]
    mounts = compose_bind_mounts(daemon)
    assert mounts["./models"] == daemon["environment"]["FLAGS_model_repository"] == "/models"
    (volume,) = [v for v in daemon["volumes"] if ":/models" in v]
    assert volume.endswith(":ro"), volume
    assert (DEPLOY / "models" / "README.md").is_file()
    period = re.fullmatch(r"(\d+)m", daemon["healthcheck"]["start_period"])
    assert period and int(period.group(1)) >= 5, daemon["healthcheck"]


def test_stop_grace_period_covers_the_drain():
    daemon = compose()["services"]["einsummabled"]
    grace = int(re.search(r"FLAGS_shutdown_grace_seconds=(\d+)", dockerfile()).group(1))
    grace = int(daemon.get("environment", {}).get("FLAGS_shutdown_grace_seconds", grace))
    period = re.fullmatch(r"(\d+)s", daemon["stop_grace_period"])
    assert period and int(period.group(1)) >= grace + 10, daemon["stop_grace_period"]


def dockerfile() -> str:
    return (DEPLOY / "docker" / "Dockerfile").read_text()


def test_bind_mounts_exist_and_prometheus_reads_its_config():
    services = compose()["services"]
    for name, service in services.items():
        for source in compose_bind_mounts(service):
            assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
    prometheus = services["prometheus"]
    mounts = compose_bind_mounts(prometheus)
    assert mounts["./prometheus"] == "/etc/prometheus"
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert (DEPLOY / "prometheus" / "prometheus.yml").is_file()


def test_ports_are_published_on_loopback_only():
    for name, service in compose()["services"].items():
        for mapping in service.get("ports", []):
            assert str(mapping).startswith("127.0.0.1:"), f"{name}: {mapping}"


def test_images_are_pinned():
    for name, service in compose()["services"].items():
        if "build" in service:
            continue
        image = service["image"]
        assert re.search(r":v?\d+\.\d+\.\d+$", image), f"{name}: {image} has no version tag"
