#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
# tools/package.json) in server mode against `kberg-conformance`, once per protocol revision.
#
#   scripts/conformance.sh [--no-build] [--baseline FILE] [REVISION...]
#
# REVISION defaults to both `2025-11-25` and `2026-07-28`. The script builds the binary (unless
# --no-build), starts it on a free loopback port, runs `conformance server --requirements REV`
# for each revision, stops the server by its pid (also on failure or Ctrl-C), and prints per
# revision how many scored scenarios passed, how many of the tasks extension's scenarios passed
# (they run on 2026-07-28 only), how many of all the scenarios run passed ("all-run"), and which
# unscored ones (pending, extension, added-after-release) passed.
#
# Exit status: 0 only if every scored scenario and every tasks-extension scenario of every
# revision passed, and each set has the size this pinned suite version defines (scored: 30 for
# 2025-11-25, 37 for 2026-07-28; tasks extension: 10 on 2026-07-28, one of which,
# tasks-status-notifications, the suite itself skips with no checks).
# With --baseline FILE the suite's own expected-failures mode is used instead (the run fails on
# any failure not listed in FILE, and on any listed failure that now passes).
#
# Environment:
#   KBERG_TOOLS_DIR        where scripts/install-tools.sh put the tools (default: <repo>/.tools)
#   KBERG_CONFORMANCE_BIN  a prebuilt kberg-conformance (implies --no-build)
#   KBERG_CONFORMANCE_OUT  directory for the suite's results (default: a fresh temporary one)
#   CARGO_TARGET_DIR       honoured when locating the built binary
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${KBERG_TOOLS_DIR:-$root/.tools}"
node="$tools/node/bin/node"
suite="$tools/node/node_modules/@modelcontextprotocol/conformance/dist/index.js"

build=1
baseline=""
revisions=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --baseline) baseline="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "unknown option: $1" >&2; exit 2 ;;
    *) revisions+=("$1") ;;
  esac
  shift
done
[ ${#revisions[@]} -gt 0 ] || revisions=(2025-11-25 2026-07-28)

expected_count() {
  case "$1" in
    2025-11-25) echo 30 ;;
    2026-07-28) echo 37 ;;
    *) echo "" ;;
  esac
}

# The tasks extension's scenarios (io.modelcontextprotocol/tasks) this server must pass.
expected_tasks_count() {
  case "$1" in
    2026-07-28) echo 10 ;;
    *) echo 0 ;;
  esac
}

if [ ! -x "$node" ] || [ ! -f "$suite" ]; then
  echo "the conformance suite or Node is missing under $tools: run scripts/install-tools.sh" >&2
  exit 2
fi

bin="${KBERG_CONFORMANCE_BIN:-}"
if [ -z "$bin" ]; then
  bin="${CARGO_TARGET_DIR:-$root/target}/debug/kberg-conformance"
  if [ "$build" = 1 ]; then
    (cd "$root" && cargo build --quiet -p kberg-examples --bin kberg-conformance)
  fi
fi
if [ ! -x "$bin" ]; then
  echo "kberg-conformance not found at $bin (build it, or set KBERG_CONFORMANCE_BIN)" >&2
  exit 2
fi

out="${KBERG_CONFORMANCE_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/kberg-conformance.XXXXXX")}"
mkdir -p "$out"

server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

"$bin" --listen 127.0.0.1:0 --log warn >"$out/server.stdout" 2>"$out/server.stderr" &
server_pid=$!
url=""
for _ in $(seq 1 300); do
  url="$(sed -n 's/^listening on //p' "$out/server.stdout" 2>/dev/null | head -n 1)"
  [ -n "$url" ] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "kberg-conformance exited before listening; its stderr:" >&2
    cat "$out/server.stderr" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "kberg-conformance did not announce its address within 30 s" >&2
  exit 1
fi
echo "kberg-conformance serving at $url (results in $out)"

status=0
for rev in "${revisions[@]}"; do
  # The scored scenarios of this revision, as the pinned suite defines them.
  mapfile -t scored < <("$node" "$suite" list --requirements "$rev" --server \
    | awk '/^Server scenarios/{s=1; next} /^[^ ]/{s=0} s && /^  - /{print $2}')
  want="$(expected_count "$rev")"
  if [ -n "$want" ] && [ "${#scored[@]}" != "$want" ]; then
    echo "$rev: the suite requires ${#scored[@]} server scenarios, expected $want (suite version changed?)" >&2
    status=1
  fi

  # The tasks extension runs at the 2026-07-28 wire only.
  tasks=()
  if [ "$(expected_tasks_count "$rev")" != 0 ]; then
    mapfile -t tasks < <("$node" "$suite" list --server \
      | sed -n 's/^  - \(tasks-[^ ]*\) \[extension\]$/\1/p')
  fi
  want_tasks="$(expected_tasks_count "$rev")"
  if [ "${#tasks[@]}" != "$want_tasks" ]; then
    echo "$rev: the suite lists ${#tasks[@]} tasks-extension scenarios, expected $want_tasks (suite version changed?)" >&2
    status=1
  fi

  log="$out/$rev.log"
  args=(server --url "$url" --requirements "$rev" -o "$out/$rev")
  [ -n "$baseline" ] && args+=(--expected-failures "$baseline")
  set +e
  (cd "$out" && "$node" "$suite" "${args[@]}") >"$log" 2>&1
  suite_status=$?
  set -e

  summary="$(sed -n '/=== SUMMARY ===/,$p' "$log")"
  passed=0
  failed=()
  for s in "${scored[@]}"; do
    if grep -q "^✓ $s:" <<<"$summary"; then
      passed=$((passed + 1))
    else
      failed+=("$s")
    fi
  done
  tasks_passed=0
  for s in "${tasks[@]}"; do
    if grep -q "^✓ $s:" <<<"$summary"; then
      tasks_passed=$((tasks_passed + 1))
    else
      failed+=("$s")
    fi
  done
  all_run="$(grep -c '^[✓✗] [^ ]*:' <<<"$summary" || true)"
  all_passed="$(grep -c '^✓ [^ ]*:' <<<"$summary" || true)"
  unscored_pass="$(sed -n '/^Not scored for/,$p' "$log" | sed -n 's/^  ✓ \([^ ]*\) (\(.*\))$/\1 (\2)/p' | paste -sd ',' - | sed 's/,/, /g')"
  unscored_fail="$(sed -n '/^Not scored for/,$p' "$log" | sed -n 's/^  ✗ \([^ ]*\) (\(.*\))$/\1 (\2)/p' | paste -sd ',' - | sed 's/,/, /g')"

  echo "== $rev: $passed/${#scored[@]} scored scenarios passed (suite exit $suite_status; log $log)"
  [ ${#tasks[@]} -eq 0 ] || echo "   tasks extension: $tasks_passed/${#tasks[@]} scenarios passed"
  echo "   all-run: $all_passed/$all_run scenarios passed"
  [ ${#failed[@]} -eq 0 ] || echo "   failed: ${failed[*]}"
  echo "   unscored, passing: ${unscored_pass:-none}"
  echo "   unscored, failing: ${unscored_fail:-none}"

  if [ -n "$baseline" ]; then
    [ "$suite_status" = 0 ] || status=1
  elif [ ${#failed[@]} -ne 0 ] || [ "$suite_status" != 0 ]; then
    status=1
  fi
done

stop_server
exit "$status"
