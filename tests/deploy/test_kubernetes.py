"""The Kubernetes manifests, as ``kubectl kustomize`` renders them, agree with the
sidecar's own defaults, routes and rules (marker ``kubernetes``; run by
scripts/check-kubernetes.sh, which also validates them with kubernetes-validate,
checkov and promtool).

Rendered: deploy/kubernetes/example (the base with both components).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from sidecar.config import Config, load_config
from sidecar.service.health import make_metrics_app
from tests.deploy.test_deploy import ROOT, RULES

pytestmark = pytest.mark.kubernetes

KUSTOMIZE = ROOT / "deploy" / "kubernetes"
CONTAINERFILE = ROOT / "deploy" / "container" / "Containerfile"
Resources = dict[tuple[str, str], dict[str, Any]]


def render(path: Path) -> Resources:
    kubectl = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not installed: scripts/check-kubernetes.sh installs it")
    done = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return {(doc["kind"], doc["metadata"]["name"]): doc
            for doc in yaml.safe_load_all(done.stdout) if doc}


@pytest.fixture(scope="module")
def rendered() -> Resources:
    return render(KUSTOMIZE / "example")


def _pod(rendered: Resources) -> dict[str, Any]:
    spec: dict[str, Any] = rendered["Deployment", "vllm"]["spec"]["template"]["spec"]
    return spec


def _container(rendered: Resources, name: str) -> dict[str, Any]:
    (found,) = [c for c in _pod(rendered)["containers"] if c["name"] == name]
    return found


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _config(rendered: Resources, tmp_path: Path, **env: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(rendered["ConfigMap", "runaway-sidecar-config"]["data"]["config.toml"])
    sidecar = _container(rendered, "runaway-sidecar")
    pod_env = {e["name"]: e["value"] for e in sidecar.get("env", [])}
    return load_config(path, env={**pod_env, **env})


def test_sidecar_owns_the_service_port_and_vllm_is_pod_local(
        rendered: Resources, tmp_path: Path) -> None:
    """The Service targets the sidecar's port; the sidecar listens on every interface of
    the pod at its default ports; vLLM listens on 127.0.0.1:8200, its upstream."""
    defaults = Config()
    sidecar = _container(rendered, "runaway-sidecar")
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert ports == {"http": _port(defaults.listen), "metrics": _port(defaults.metrics_listen)}
    cfg = _config(rendered, tmp_path)
    assert cfg.listen == f"0.0.0.0:{ports['http']}"
    assert cfg.metrics_listen == f"0.0.0.0:{ports['metrics']}"
    (service_port,) = rendered["Service", "vllm"]["spec"]["ports"]
    assert service_port["targetPort"] == "http"
    vllm = _container(rendered, "vllm")
    assert "ports" not in vllm
    assert "--host=127.0.0.1" in vllm["args"]
    assert cfg.upstream == "http://127.0.0.1:8200"
    assert "--port=8200" in vllm["args"]
    policy = rendered["NetworkPolicy", "vllm"]["spec"]
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == ["http", "metrics"]


def test_probes_use_the_sidecars_health_routes(rendered: Resources) -> None:
    """Readiness on /readyz and liveness on /healthz, on the metrics port, both routes
    of the sidecar's metrics listener."""
    sidecar = _container(rendered, "runaway-sidecar")
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    app = make_metrics_app(CollectorRegistry(), readiness=lambda: None)  # type: ignore[arg-type,return-value]
    paths = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert {"/readyz", "/healthz", "/metrics"} <= paths
    for container in _pod(rendered)["containers"]:
        assert "readinessProbe" in container
        assert "livenessProbe" in container
        assert container["resources"]["requests"]


def test_config_map_is_mounted_to_reload_in_place(rendered: Resources, tmp_path: Path) -> None:
    """The ConfigMap (a fixed name, so that an edit is no new object) is mounted as a
    directory, never by subPath (which the kubelet never updates), at the image's
    ``--config`` path; it loads, watches itself, and drains within the grace period."""
    sidecar = _container(rendered, "runaway-sidecar")
    cmd = re.search(r'^CMD \["--config", "(.*)"\]$', CONTAINERFILE.read_text(), re.MULTILINE)
    assert cmd is not None
    config_path = Path(cmd.group(1))
    (mount,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == str(config_path.parent)]
    assert "subPath" not in mount
    (volume,) = [v for v in _pod(rendered)["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "runaway-sidecar-config"
    assert config_path.name in rendered["ConfigMap", "runaway-sidecar-config"]["data"]
    cfg = _config(rendered, tmp_path)
    assert cfg.config_watch_seconds > 0
    pre_stop = sidecar["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert _pod(rendered)["terminationGracePeriodSeconds"] > pre_stop + cfg.drain_timeout_seconds
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert sidecar["securityContext"]["runAsNonRoot"] is True


def test_fleet_memory_component(rendered: Resources, tmp_path: Path) -> None:
    """With the fleet-memory component, the sidecar's policy.redis_url names the memory
    Service's port."""
    cfg = _config(rendered, tmp_path)
    assert cfg.policy.redis_url is not None
    host, port = re.match(r"redis://([^:/]+):(\d+)/", cfg.policy.redis_url).groups()  # type: ignore[union-attr]
    (service_port,) = rendered["Service", host]["spec"]["ports"]
    assert service_port["port"] == int(port)


def test_operator_resources_come_from_the_rules_file(rendered: Resources) -> None:
    """The PrometheusRule's spec is the rules file; the PodMonitor scrapes the metrics
    port's /metrics under the job the rules select."""
    rules = yaml.safe_load(RULES.read_text())
    assert rendered["PrometheusRule", "runaway-sidecar"]["spec"] == rules
    jobs = set(re.findall(r'job="([^"]+)"', RULES.read_text()))
    (endpoint,) = rendered["PodMonitor", "runaway-sidecar"]["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    relabeled = {r["targetLabel"]: r.get("replacement") for r in endpoint["relabelings"]}
    assert {relabeled["job"]} == jobs


def test_base_renders_without_the_components() -> None:
    """The base alone is a complete deployment: no operator resources, no Redis."""
    base = render(KUSTOMIZE / "base")
    assert {kind for kind, _ in base} == {"ConfigMap", "Deployment", "Service", "NetworkPolicy"}
    sidecar = next(c for c in base["Deployment", "vllm"]["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "runaway-sidecar")
    assert all(e["name"] != "RUNAWAY_SIDECAR_POLICY_REDIS_URL" for e in sidecar["env"])


def test_production_stack_post_renderer(tmp_path: Path) -> None:
    """On the chart's engine Deployment and Service (tests/data/production-stack), the
    post-renderer adds the sidecar on port 8000 under the port name the engine Service
    targets, keeps vLLM on the values' port 8200 (the sidecar's upstream), and mounts the
    config as a directory."""
    kubectl = os.environ.get("KUBECTL") or shutil.which("kubectl")
    assert kubectl is not None
    chart = ROOT / "tests" / "data" / "production-stack" / "chart-output.yaml"
    done = subprocess.run([str(KUSTOMIZE / "production-stack" / "post-render.sh")],
                          input=chart.read_text(), capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, KUBECTL=kubectl), check=False)
    assert done.returncode == 0, done.stderr
    out = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout) if d}
    pod = out["Deployment", "vllm-qwen3-deployment-vllm"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    (service,) = [p for p in out["Service", "vllm-qwen3-engine-service"]["spec"]["ports"]
                  if p["name"] == "service-port"]
    targets = [(name, p["containerPort"]) for name, c in containers.items()
               for p in c.get("ports", []) if p["name"] == service["targetPort"]]
    assert targets == [("runaway-sidecar", _port(Config().listen))]
    vllm = containers["vllm"]
    assert vllm["command"][vllm["command"].index("--port") + 1] == "8200"
    assert vllm["ports"][0] == {"name": "vllm", "containerPort": 8200}
    assert vllm["readinessProbe"]["httpGet"]["port"] == 8200
    path = tmp_path / "config.toml"
    path.write_text(out["ConfigMap", "runaway-sidecar-config"]["data"]["config.toml"])
    sidecar = containers["runaway-sidecar"]
    cfg = load_config(path, env={e["name"]: e["value"] for e in sidecar["env"]})
    assert cfg.upstream == "http://127.0.0.1:8200"
    assert cfg.listen == "0.0.0.0:8000"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    (mount,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == "/etc/runaway-sidecar"]
    assert "subPath" not in mount
