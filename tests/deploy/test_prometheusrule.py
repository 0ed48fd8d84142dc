"""The Kubernetes PrometheusRule is generated from the one rules file systemd's
deployment loads (scripts/render-prometheusrule.py), and the committed copy is current."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.deploy.test_deploy import ROOT, RULES

SCRIPT = ROOT / "scripts" / "render-prometheusrule.py"
GENERATED = ROOT / "deploy" / "kubernetes" / "components" / "prometheus-operator" / \
    "prometheusrule.yaml"


def test_committed_prometheusrule_is_current() -> None:
    """The committed resource is exactly what the script renders from the rules file now."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_spec_is_the_rules_file() -> None:
    """The resource's spec parses to the rules file's content, group for group."""
    resource = yaml.safe_load(GENERATED.read_text())
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    rules = yaml.safe_load(RULES.read_text())
    assert resource["spec"] == rules
    assert len(rules["groups"][0]["rules"]) >= 8
