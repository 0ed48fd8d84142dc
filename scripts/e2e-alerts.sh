#!/usr/bin/env bash
# The alert rules end to end, on real servers: deploy/prometheus/runaway-sidecar.rules.yml
# (time-scaled) in a real Prometheus, delivered by a real Alertmanager to a webhook.
#
#   scripts/e2e-alerts.sh [-- PYTEST_ARGS...]
#
# 1. Installs Debian's prometheus and prometheus-alertmanager when they are missing.
# 2. Makes sure the vLLM venv and the tiny models exist (scripts/e2e-vllm.sh --setup-only).
# 3. Starts one vLLM server (CPU build) with the looping tiny model, served under two names:
#    tiny-loop (asked with thinking on: it loops) and tiny-steady (asked with thinking off:
#    it answers at once).
# 4. Runs `pytest -m alerts` (tests/deploy/test_alerts_live.py), which starts the sidecar,
#    Prometheus, Alertmanager and the webhook, sends the traffic, stops vLLM, and checks
#    the dashboard's queries; its log (alerts with their pending and firing times, the
#    webhook payloads, the dashboard's panels) is printed at the end.
# Everything it starts is stopped on exit. Bounded in time (E2E_TIMEOUT, default 600 s,
# counted after step 2; the suite itself takes about 3 minutes).
#
# Environment: RUNAWAY_E2E_CACHE, VLLM_VENV, PROJECT_PYTHON, E2E_KEEP_LOGS as for
# scripts/e2e-vllm.sh; E2E_HEALTH_TIMEOUT (default 300) for vLLM to answer /health.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E_NAME=e2e-alerts
LOG_NOISE='nanobind|^ - leaked|resource_tracker|warnings\.warn'
# shellcheck source=scripts/e2e-lib.sh
. "$ROOT/scripts/e2e-lib.sh"
VENV=${VLLM_VENV:-$CACHE/vllm-venv}
PROJECT_PY=${PROJECT_PYTHON:-$ROOT/.venv/bin/python}
E2E_TIMEOUT=${E2E_TIMEOUT:-600}
HEALTH_TIMEOUT=${E2E_HEALTH_TIMEOUT:-300}
PYTEST_ARGS=()
if (($#)); then
  [[ $1 == -- ]] || { echo "usage: $0 [-- PYTEST_ARGS...]" >&2; exit 2; }
  shift
  PYTEST_ARGS=("$@")
fi

# The vLLM venv and the models first, outside the suite's time bound: on a new machine
# that is the vLLM install (scripts/e2e-vllm.sh bounds it itself); later, a few checks.
t=$(date +%s)
VLLM_VENV=$VENV bash "$ROOT/scripts/e2e-vllm.sh" --setup-only
SETUP_S=$(( $(date +%s) - t ))

e2e_start
say "vLLM venv and models ready in ${SETUP_S}s"

need() {  # need COMMAND DEBIAN_PACKAGE
  command -v "$1" >/dev/null 2>&1 && return
  say "installing $2"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }
}
need prometheus prometheus
need prometheus-alertmanager prometheus-alertmanager
say "$(prometheus --version 2>&1 | head -n1)"
say "$(prometheus-alertmanager --version 2>&1 | head -n1)"

MODELS=$(tiny_models_dir)

t=$(date +%s)
start_vllm_server loop "$MODELS/loop" tiny-loop tiny-steady
wait_http "vLLM" "$VLLM_URL_OUT/health" "$(( $(date +%s) + HEALTH_TIMEOUT ))"
say "vLLM up in $(( $(date +%s) - t ))s ($VLLM_URL_OUT, pid $VLLM_PID_OUT)"

t=$(date +%s)
rc=0
(cd "$ROOT" && env E2E_VLLM_URL="$VLLM_URL_OUT" E2E_VLLM_PID="$VLLM_PID_OUT" \
  E2E_LOGS="$LOGS" E2E_REPORT="$LOGS/alerts-report.txt" \
  timeout 420 "$PROJECT_PY" -m pytest -m alerts -n 0 -p no:cacheprovider \
  tests/deploy/test_alerts_live.py "${PYTEST_ARGS[@]}") || rc=$?
say "pytest took $(( $(date +%s) - t ))s"
if [[ -s $LOGS/alerts-report.txt ]]; then
  say "report:"
  cat "$LOGS/alerts-report.txt" >&2
fi
((rc == 0)) || exit "$rc"
STATUS=0
say "alerts suite passed"
