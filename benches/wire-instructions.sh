#!/usr/bin/env bash
# Instructions per tools/call over loopback HTTP, Kberg against bare rmcp on both protocol
# generations, counted by callgrind (repeatable whatever else the machine is doing).
#
#   cargo bench -p kberg-benches --bench wire --no-run     # prints the binary's path
#   benches/wire-instructions.sh <that binary> [low calls] [high calls]
#
# Each case runs twice in the wire bench's counting mode (one server, one client, one keep-alive
# connection), with the low and the high call count; (high total - low total) / (high - low) is
# what one call costs the whole process, client and server, with start-up and the handshake
# cancelled out. The client's share is the same for both servers.
#
#   KBERG_WIRE_CLIENTS=16 benches/wire-instructions.sh <binary> 512 2560
#
# shares the calls between 16 clients, each on its own connection (both counts must be
# multiples of it).
set -euo pipefail
bin="${1:?usage: $0 <wire bench binary> [low calls] [high calls]}"
low="${2:-500}"
high="${3:-2500}"
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

total() { # case calls -> total instructions of the run
  KBERG_WIRE_CASE="$1" KBERG_WIRE_COUNT="$2" valgrind --tool=callgrind \
    --callgrind-out-file="$out/cg.out" "$bin" >"$out/stdout" 2>"$out/stderr" || {
    cat "$out/stderr" >&2; exit 1; }
  grep -q "$2 calls answered" "$out/stdout" || { cat "$out/stdout" "$out/stderr" >&2; exit 1; }
  sed -n 's/^==[0-9]*== Collected : //p' "$out/stderr"
}

printf '| server | protocol | instructions per call | vs bare rmcp |\n|---|---|---|---|\n'
for protocol in 2025-11-25 2026-07-28; do
  declare -A per=()
  for server in rmcp kberg; do
    a="$(total "$server/$protocol" "$low")"
    b="$(total "$server/$protocol" "$high")"
    per[$server]=$(( (b - a) / (high - low) ))
  done
  for server in kberg rmcp; do
    printf '| %s | %s | %d | %s |\n' "$server" "$protocol" "${per[$server]}" \
      "$(awk -v k="${per[$server]}" -v r="${per[rmcp]}" 'BEGIN { printf "%.3fx", k / r }')"
  done
done
