#!/usr/bin/env bash
# Real coding agents as clients of the sidecar, end to end, against real vLLM (CPU build).
#
#   scripts/e2e-agents.sh [--setup-only] [--baseline] [--only-tool-loops] [--full-prompts]
#                         [--agents LIST]
#
# 1. Makes sure the vLLM venv and the tiny models exist (scripts/e2e-vllm.sh --setup-only),
#    and builds the tool-call loop models (tests/e2e/tiny_agent_model.py, one per agent,
#    cached by a hash of that file and tiny_model.py).
# 2. Installs Claude Code, Codex CLI and Qwen Code at pinned versions from the npm registry
#    into the cache (one directory per agent and version; later runs: a file check).
# 3. Runs scripts/e2e_agents.py: one vLLM server with the looping model (long context, the
#    hermes tool parser) and a sidecar in front; each agent headless on the field's bugfix
#    prompt; then one with the healthy model, each agent directly and through a sidecar.
#    The checks and what is measured are described there. Every agent runs under strace;
#    a run that reaches any address other than loopback fails.
#    --baseline also runs each agent on the looping model without the sidecar (bounded by
#    E2E_AGENTS_BASELINE_TIMEOUT): the before figures. --full-prompts runs the agents as
#    they come (their own system prompts, tools and context); by default they run with the
#    options that leave those out, so the CPU build's prefill stays within CI time.
#    Each agent also runs against its tool-call loop model (the same tool call on every
#    turn, issue 39) through a sidecar with agent_loops = "nudge", then "refuse" (each run
#    bounded by E2E_AGENTS_LOOP_TIMEOUT and, for nudge, 3 turns after the loop is seen):
#    the loop seen at turn K, the note in vLLM's request log, the refusal in the agent's
#    output. --baseline also runs each one there without the sidecar, until the agent
#    stops or the time bound: turns, tokens, seconds and the agent's own guard.
#    --only-tool-loops runs only the tool-call loop runs.
#    --agents claude,codex,qwen picks some. --setup-only stops after steps 1 and 2.
# Everything it starts is stopped on exit, on error and on Ctrl-C. Bounded in time overall.
#
# Environment (all optional):
#   RUNAWAY_E2E_CACHE             cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/runaway-sidecar)
#   VLLM_VENV                     vLLM venv (default $RUNAWAY_E2E_CACHE/vllm-venv)
#   PROJECT_PYTHON                python with the sidecar installed (default .venv/bin/python)
#   E2E_AGENTS_TIMEOUT            overall limit in seconds (default 3600)
#   E2E_AGENTS_RUN_TIMEOUT        limit for one agent run, seconds (default 600)
#   E2E_AGENTS_BASELINE_TIMEOUT   limit for one --baseline run, seconds (default 300)
#   E2E_AGENTS_LOOP_TIMEOUT       limit for one tool-call loop run via a sidecar (default 90)
#   E2E_HEALTH_TIMEOUT            limit for vLLM to answer /health, seconds (default 300)
#   E2E_KEEP_LOGS                 keep the log directory even on success (default 0)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${RUNAWAY_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runaway-sidecar}
VENV=${VLLM_VENV:-$CACHE/vllm-venv}
PROJECT_PY=${PROJECT_PYTHON:-$ROOT/.venv/bin/python}
AGENTS_DIR=$CACHE/agents
# The pinned agents, as name=package@version (the versions the checks were written against).
PINNED=(claude=@anthropic-ai/claude-code@2.1.332 codex=@openai/codex@0.171.0
        qwen=@qwen-code/qwen-code@0.24.4)

SETUP_ONLY=0
DRIVER_ARGS=()
while (($#)); do
  case $1 in
    --setup-only) SETUP_ONLY=1 ;;
    --baseline) DRIVER_ARGS+=(--baseline) ;;
    --only-tool-loops) DRIVER_ARGS+=(--only-tool-loops) ;;
    --full-prompts) DRIVER_ARGS+=(--prompts full) ;;
    --agents) shift; DRIVER_ARGS+=(--agents "$1") ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "e2e-agents: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

T0=$(date +%s)
say() { printf 'e2e-agents [%4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

command -v strace >/dev/null || { say "strace is needed (the loopback-only check)"; exit 1; }
strace -f --seccomp-bpf -qq -e trace=connect -o /dev/null true ||
  { say "strace cannot trace here (ptrace refused?)"; exit 1; }
node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' ||
  { say "Node.js 20 or later is needed (Qwen Code)"; exit 1; }

t=$(date +%s)
bash "$ROOT/scripts/e2e-vllm.sh" --setup-only
MODELS=$CACHE/models/$(sha256sum "$ROOT/tests/e2e/tiny_model.py" | cut -c1-16)
AGENT_MODELS=$CACHE/models/agents-$(cat "$ROOT/tests/e2e/tiny_agent_model.py" \
  "$ROOT/tests/e2e/tiny_model.py" | sha256sum | cut -c1-16)
for pin in "${PINNED[@]}"; do
  name=${pin%%=*}
  [[ -f $AGENT_MODELS/agent-$name/script.json ]] && continue
  say "building the tool-call loop model for $name"
  rm -rf "$AGENT_MODELS/.tmp-$name"
  mkdir -p "$AGENT_MODELS"
  HF_HUB_OFFLINE=1 timeout 300 "$VENV/bin/python" "$ROOT/tests/e2e/tiny_agent_model.py" \
    "$AGENT_MODELS/.tmp-$name" --agent "$name" >&2
  mv "$AGENT_MODELS/.tmp-$name" "$AGENT_MODELS/agent-$name"
done
say "vLLM venv and models took $(( $(date +%s) - t ))s"

t=$(date +%s)
for pin in "${PINNED[@]}"; do
  name=${pin%%=*} spec=${pin#*=}
  version=${spec##*@} package=${spec%@*}
  dir=$AGENTS_DIR/$name-$version
  if [[ -f $dir/.installed ]]; then continue; fi
  say "installing $package@$version into $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false \
    timeout 900 npm install --prefix "$dir" --no-save --loglevel=error "$package@$version" >&2
  got=$(HOME=$dir timeout 60 "$dir/node_modules/.bin/$name" --version 2>/dev/null | head -n 1)
  [[ $got == *"$version"* ]] || { say "$name --version said '$got', not $version"; exit 1; }
  touch "$dir/.installed"
done
say "agents (${PINNED[*]}) ready in $(( $(date +%s) - t ))s"

if ((SETUP_ONLY)); then
  say "setup done"
  exit 0
fi

LOGS=$(mktemp -d "${TMPDIR:-/tmp}/runaway-agents.XXXXXX")
rc=0
timeout -s TERM -k 60 "$(( ${E2E_AGENTS_TIMEOUT:-3600} + 60 ))" \
  "$PROJECT_PY" "$ROOT/scripts/e2e_agents.py" --logs "$LOGS" --models "$MODELS" \
    --agent-models "$AGENT_MODELS" \
    --vllm-python "$VENV/bin/python" --agents-dir "$AGENTS_DIR" \
    --timeout "${E2E_AGENTS_TIMEOUT:-3600}" \
    --agent-timeout "${E2E_AGENTS_RUN_TIMEOUT:-600}" \
    --baseline-timeout "${E2E_AGENTS_BASELINE_TIMEOUT:-300}" \
    --loop-timeout "${E2E_AGENTS_LOOP_TIMEOUT:-90}" \
    --health-timeout "${E2E_HEALTH_TIMEOUT:-300}" "${DRIVER_ARGS[@]}" || rc=$?
if ((rc != 0)); then
  say "FAILED (status $rc); logs kept in $LOGS"
elif [[ ${E2E_KEEP_LOGS:-0} == 1 ]]; then
  say "logs kept in $LOGS"
else
  rm -rf "$LOGS"
fi
say "total duration $(( $(date +%s) - T0 ))s"
exit "$rc"
