# Shell helpers shared by the end-to-end scripts (scripts/e2e-vllm.sh, scripts/e2e-llamacpp.sh).
# Sourced, not run. Before sourcing, the script sets:
#   E2E_NAME     prefix of its log lines (e.g. e2e-vllm)
#   E2E_TIMEOUT  overall limit in seconds
#   ROOT         the repository root; PROJECT_PY the python with the sidecar installed
# and may set LOG_NOISE (an extended regex of log lines not worth showing on failure) and
# SERVE=1 (an interrupt or the time limit is then a normal end).
#
# e2e_start then gives it: T0, LOGS (a fresh log directory), PIDS (processes to stop; each
# started with setsid, so its pid is its process group), STATUS (set to 0 on success), the
# traps that stop everything on exit, error and Ctrl-C, and a watchdog that sends the script
# SIGTERM after E2E_TIMEOUT seconds. Every long command in the scripts has its own
# `timeout`, so bash gets to run the trap in bounded time.

CACHE=${RUNAWAY_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runaway-sidecar}
LOG_NOISE=${LOG_NOISE:-'^$'}
SERVE=${SERVE:-0}

# e2e_parse_args HELP_END ARGS...: the options both scripts take (see their headers). Sets
# RECORD, RUN_TESTS, SERVE, SETUP_ONLY and PYTEST_ARGS (what follows --); --help prints
# lines 2 to HELP_END of the script, its header.
e2e_parse_args() {
  local help_end=$1
  shift
  RECORD=0 RUN_TESTS=1 SERVE=0 SETUP_ONLY=0
  PYTEST_ARGS=()
  while (($#)); do
    case $1 in
      --record) RECORD=1 ;;
      --record-only) RECORD=1; RUN_TESTS=0 ;;
      --serve) SERVE=1 ;;
      --setup-only) SETUP_ONLY=1 ;;
      --) shift; PYTEST_ARGS=("$@"); break ;;
      -h|--help) sed -n "2,${help_end}p" "$0"; exit 0 ;;
      *) echo "$E2E_NAME: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
  done
}

# The site-packages directory of the venv at $VENV.
site_dir() { compgen -G "$VENV/lib/python3*/site-packages" | head -n 1; }

say() { printf '%s [%4ds] %s\n' "$E2E_NAME" "$(( $(date +%s) - T0 ))" "$*" >&2; }

stop_all() {
  # SIGTERM goes to each leader first (a server then shuts down its own children in
  # order); whatever is left of the groups after 20 s gets SIGKILL.
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 40); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.5
  done
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}

e2e_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  ((STATUS == 0)) || STATUS=$rc
  stop_all
  if [[ -n $WATCHDOG ]]; then kill -- "-$WATCHDOG" 2>/dev/null || true; fi
  if ((STATUS != 0)); then
    for f in "$LOGS"/*.log; do
      [[ -f $f ]] || continue
      echo "----- last lines of $f" >&2
      grep -v -E "$LOG_NOISE" "$f" | tail -n 20 >&2 || true
    done
    say "FAILED (status $STATUS); logs kept in $LOGS"
  elif [[ ${E2E_KEEP_LOGS:-0} == 1 ]]; then
    say "logs kept in $LOGS"
  else
    rm -rf "$LOGS"
  fi
  say "total duration $(( $(date +%s) - T0 ))s"
  exit "$STATUS"
}

e2e_start() {
  T0=$(date +%s)
  LOGS=$(mktemp -d "${TMPDIR:-/tmp}/runaway-$E2E_NAME.XXXXXX")
  PIDS=()
  WATCHDOG=
  STATUS=1
  trap e2e_cleanup EXIT
  trap 'say "interrupted"; STATUS=$((SERVE ? 0 : 130)); exit "$STATUS"' INT
  trap 'say "stopped (overall limit ${E2E_TIMEOUT}s or SIGTERM)"; STATUS=$((SERVE ? 0 : 124)); exit "$STATUS"' TERM
  # The overall bound: a watchdog that sends this script SIGTERM, whose trap stops everything.
  setsid bash -c "sleep $E2E_TIMEOUT; kill -TERM $$" >/dev/null 2>&1 &
  WATCHDOG=$!
}

# The tiny Hugging Face models of tests/e2e/tiny_model.py, cached by a hash of that file.
tiny_models_dir() {
  echo "$CACHE/models/$(sha256sum "$ROOT/tests/e2e/tiny_model.py" | cut -c1-16)"
}

free_port() {
  "$PROJECT_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_http() {  # wait_http NAME URL DEADLINE_EPOCH
  local name=$1 url=$2 deadline=$3
  until curl -sf -o /dev/null --max-time 2 "$url"; do
    if (($(date +%s) >= deadline)); then
      say "$name did not answer $url in time"
      return 1
    fi
    for pid in "${PIDS[@]}"; do
      kill -0 "$pid" 2>/dev/null || { say "$name: a started process exited early"; return 1; }
    done
    sleep 1
  done
}

# A sidecar in front of UPSTREAM with the config text CONFIG; sets SIDECAR_URL_OUT and
# SIDECAR_METRICS_OUT. Its log is $LOGS/sidecar-NAME.log.
start_sidecar_for() {  # start_sidecar_for NAME UPSTREAM CONFIG
  local name=$1 upstream=$2 config=$3 port mport cfg=$LOGS/sidecar-$1.toml
  port=$(free_port)
  mport=$(free_port)
  printf '%s\n' "$config" >"$cfg"
  setsid "$PROJECT_PY" -m sidecar serve --config "$cfg" --upstream "$upstream" \
    --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" \
    >"$LOGS/sidecar-$name.log" 2>&1 &
  PIDS+=($!)
  SIDECAR_URL_OUT=http://127.0.0.1:$port
  SIDECAR_METRICS_OUT=http://127.0.0.1:$mport
}

# ------------------------------------------------------------------ vLLM (CPU build)

# Never leave loopback, never phone home: the models are local directories.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# The CPU build turns --gpu-memory-utilization 0.15 into 15% of the node's memory per server
# (3.2 GiB of KV cache on a 24 GiB machine, allocated up front); 1 GiB holds 130k tokens of
# these models, so the KV cache is set explicitly and four servers fit.
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}

VLLM_ARGS=(--reasoning-parser qwen3 --dtype float32 --enforce-eager
           --gpu-memory-utilization 0.15 --max-model-len 8192)

# A vLLM server of the venv at $VENV on a free loopback port, serving MODEL_DIR under
# each NAME; sets VLLM_URL_OUT and VLLM_PID_OUT (its process group). Its log is
# $LOGS/vllm-LOGNAME.log.
start_vllm_server() {  # start_vllm_server LOGNAME MODEL_DIR NAME...
  local logname=$1 model=$2 port
  shift 2
  port=$(free_port)
  # tests/e2e/vllm_site: vLLM's CPU engine sleeps instead of spinning on sched_yield (see there).
  PYTHONPATH="$ROOT/tests/e2e/vllm_site" setsid "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$model" --served-model-name "$@" \
    --host 127.0.0.1 --port "$port" "${VLLM_ARGS[@]}" >"$LOGS/vllm-$logname.log" 2>&1 &
  PIDS+=($!)
  VLLM_PID_OUT=$!
  VLLM_URL_OUT=http://127.0.0.1:$port
}
