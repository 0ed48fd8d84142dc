#!/usr/bin/env bash
# Checks the deployment files: Prometheus rules (promtool check + unit tests), the PromQL
# of the Grafana dashboard (parsed by promtool), and the systemd units: the service
# (systemd-analyze verify, and a security exposure score of 2.0 or lower) and its
# listening socket (systemd-analyze verify, with the service it activates beside it).
#
# Installs promtool (Debian package "prometheus") and systemd-analyze (package
# "systemd") when they are missing and apt-get is usable; fast when both are present.
# A check is skipped only when its tool cannot be had, and the reason is printed.
# systemd need not be running: verify and `security --offline=true` read unit files.
#
# Usage: scripts/check-deploy.sh        (exit 0: all checks ran and passed)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RULES="$ROOT/deploy/prometheus/runaway-sidecar.rules.yml"
RULE_TESTS="$ROOT/deploy/prometheus/runaway-sidecar.rules.test.yml"
UNIT="$ROOT/deploy/systemd/runaway-sidecar@.service"
SOCKET_UNIT="$ROOT/deploy/systemd/runaway-sidecar@.socket"
DASHBOARD="$ROOT/deploy/grafana/runaway-sidecar.json"
MAX_EXPOSURE="2.0"
UNIT_BIN="/usr/local/bin/runaway-sidecar"

failed=0
skipped=()
apt_updated=0

say() { printf 'check-deploy: %s\n' "$*"; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# apt_install PACKAGE: install quietly; run apt-get update once if the package is unknown.
apt_install() {
    command -v apt-get >/dev/null 2>&1 || return 1
    [ "$(id -u)" -eq 0 ] || return 1
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends "$1" >/dev/null 2>&1; then
        [ "$apt_updated" -eq 1 ] && return 1
        apt-get update -qq >/dev/null 2>&1 || return 1
        apt_updated=1
        apt-get install -y -qq --no-install-recommends "$1" >/dev/null 2>&1 || return 1
    fi
}

# need TOOL PACKAGE: succeed when TOOL is on PATH, installing PACKAGE if needed.
need() {
    command -v "$1" >/dev/null 2>&1 && return 0
    say "installing $2 for $1"
    apt_install "$2" && command -v "$1" >/dev/null 2>&1
}

# --- Prometheus rules -------------------------------------------------------------
if need promtool prometheus; then
    say "promtool: $(promtool --version 2>&1 | head -n1)"
    (cd "$(dirname "$RULES")" && promtool check rules "$(basename "$RULES")") || failed=1
    (cd "$(dirname "$RULE_TESTS")" && promtool test rules "$(basename "$RULE_TESTS")") || failed=1
    # The dashboard's queries, with Grafana's variables given values, become recording
    # rules so promtool parses their PromQL (JSON is valid YAML).
    python3 - "$DASHBOARD" >"$tmp/dashboard.rules.json" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1], encoding="utf-8"))
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
subst = {"$__rate_interval": "5m", "$__range": "1h"}
rules = []
for i, expr in enumerate(exprs):
    for var, value in subst.items():
        expr = expr.replace(var, value)
    rules.append({"record": f"dashboard:query_{i}", "expr": expr})
print(json.dumps({"groups": [{"name": "grafana-dashboard", "rules": rules}]}))
PY
    if out="$(promtool check rules "$tmp/dashboard.rules.json" 2>&1)"; then
        say "dashboard PromQL: $(printf '%s' "$out" | grep -o '[0-9]* rules found' | sed 's/rules/queries/')"
    else
        printf '%s\n' "$out"
        say "FAIL: dashboard PromQL"
        failed=1
    fi
else
    skipped+=("promtool: not installed and apt-get install prometheus failed (not root, or no package index)")
fi

# --- systemd unit -----------------------------------------------------------------
if need systemd-analyze systemd; then
    say "systemd-analyze: $(systemd-analyze --version | head -n1)"
    # verify needs ExecStart's binary to exist. Use the installed one if there is one,
    # otherwise point a copy of the unit at this checkout's console script, so verify
    # still checks a real executable and every directive.
    bin="$UNIT_BIN"
    if [ ! -x "$bin" ]; then
        bin=""
        for candidate in "$ROOT/.venv/bin/runaway-sidecar" "$(command -v runaway-sidecar || true)"; do
            if [ -n "$candidate" ] && [ -x "$candidate" ]; then bin="$candidate"; break; fi
        done
    fi
    if [ -z "$bin" ]; then
        say "FAIL: no runaway-sidecar executable for ExecStart (install the package: pip install -e .)"
        failed=1
    else
        # Instance names, as operators start them: runaway-sidecar@gpu0.service and the
        # socket that activates it, side by side (verify loads the one from the other).
        sed "s|$UNIT_BIN|$bin|g" "$UNIT" >"$tmp/runaway-sidecar@gpu0.service"
        cp "$SOCKET_UNIT" "$tmp/runaway-sidecar@gpu0.socket"
        # verify exits 0 on unknown keys and bad values (it only warns), so any output
        # counts as a failure.
        for unit in runaway-sidecar@gpu0.service runaway-sidecar@gpu0.socket; do
            if out="$(cd "$tmp" && systemd-analyze verify "$tmp/$unit" 2>&1)" \
                && [ -z "$out" ]; then
                say "systemd-analyze verify $unit: OK (ExecStart=$bin)"
            else
                printf '%s\n' "$out"
                say "FAIL: systemd-analyze verify $unit"
                failed=1
            fi
        done
        report="$(cd "$tmp" && systemd-analyze security --offline=true "$UNIT" 2>&1 || true)"
        score="$(printf '%s\n' "$report" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')"
        if [ -z "$score" ]; then
            printf '%s\n' "$report"
            say "FAIL: systemd-analyze security printed no exposure level"
            failed=1
        elif awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }'; then
            say "systemd-analyze security: exposure $score (limit $MAX_EXPOSURE)"
        else
            printf '%s\n' "$report" | grep -v '✓' || true
            say "FAIL: systemd-analyze security exposure $score is above $MAX_EXPOSURE"
            failed=1
        fi
    fi
else
    skipped+=("systemd-analyze: not installed and apt-get install systemd failed")
fi

for reason in "${skipped[@]+"${skipped[@]}"}"; do
    say "SKIPPED $reason"
done
if [ "$failed" -ne 0 ]; then
    say "FAILED"
    exit 1
fi
say "all deploy checks passed${skipped[*]:+ (with skips above)}"
