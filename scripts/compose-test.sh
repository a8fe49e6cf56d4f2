#!/usr/bin/env bash
# Runs the Bridle Compose stack for real on this machine and checks it from outside:
#
#   1. every profile combination of compose.yaml passes `docker-compose config`;
#   2. the gateway image is built (target runtime-prebuilt: a bridle binary built on this host,
#      on a Debian base made here with debootstrap, since no image registry is reachable);
#   3. the stack comes up; the official MCP Python SDK client connects through the published
#      port with a bearer token (and a wrong token is refused);
#   4. the secrets arrive as files under /run/secrets and never in the environment
#      (`docker inspect`), the vault uses the mounted master key, and no agent token reaches
#      `docker logs`;
#   5. the data volume survives `down` and `up` (a proposal and a vault-issued token persist);
#   6. `docker-compose stop` drains the gateway with SIGTERM and it exits 0; the stack is
#      brought down and its volumes removed.
#
# The bundled Kanboard, Qdrant and embedding images come only from a registry, so their
# profiles are validated (step 1), not run.
#
# Needs root (dockerd, debootstrap), docker.io, docker-compose and debootstrap from Debian,
# the Python SDK in .tools/venv (scripts/install-tools.sh), and cargo. Installs the Debian
# packages itself when missing. Leaves the base image `local/debian:bookworm` cached.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
TOOLS="${KBERG_TOOLS_DIR:-$ROOT/.tools}"
PROJECT="bridle-compose-test"
BASE_IMAGE="${RUNTIME_IMAGE:-local/debian:bookworm}"
IMAGE="bridle:compose-test"
WORK="$(mktemp -d /var/tmp/bridle-compose-test.XXXXXX)"
STARTED_DOCKERD=""

log() { printf 'compose-test: %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }
# Whether TEXT holds NEEDLE (a fixed string). Never `producer | grep -q`: under pipefail, grep
# quitting at the first match can kill the producer with SIGPIPE and fail the pipeline, which
# turns a found line into a miss (and hides a found token from an `if`).
has() { grep -qF -- "$1" <<<"$2"; }

cleanup() {
    local code=$?
    if [ -n "${COMPOSE_READY:-}" ]; then
        compose down -v --remove-orphans >/dev/null 2>&1 || true
    fi
    if [ -n "$STARTED_DOCKERD" ]; then
        kill "$STARTED_DOCKERD" 2>/dev/null || true
        wait "$STARTED_DOCKERD" 2>/dev/null || true
    fi
    rm -rf "$WORK"
    exit "$code"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || fail "run as root (dockerd and debootstrap need it)"

# --- tools -------------------------------------------------------------------------------
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
PYTHON="$TOOLS/venv/bin/python"
[ -x "$PYTHON" ] || fail "$PYTHON is missing: run scripts/install-tools.sh"

if ! docker info >/dev/null 2>&1; then
    log "starting dockerd"
    dockerd >"$WORK/dockerd.log" 2>&1 &
    STARTED_DOCKERD=$!
    for _ in $(seq 1 100); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$STARTED_DOCKERD" 2>/dev/null || { cat "$WORK/dockerd.log" >&2; fail "dockerd exited"; }
        sleep 0.2
    done
    docker info >/dev/null 2>&1 || fail "dockerd did not answer within 20 s"
fi

# --- 1. every profile combination is valid ----------------------------------------------
SECRETS="$WORK/secrets"
mkdir -p "$SECRETS"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRETS/bridle_master_key"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRETS/bridle_admin_token"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRETS/gitea_token"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRETS/kanboard_token"
# Readable by the gateway's user (uid 10001) alone.
chown 10001:10001 "$SECRETS"/*
chmod 0400 "$SECRETS"/*

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export BRIDLE_SECRETS_DIR="$SECRETS"
export BRIDLE_IMAGE="$IMAGE"
export BRIDLE_IMAGE_TARGET=runtime-prebuilt
export RUNTIME_IMAGE="$BASE_IMAGE"
export BRIDLE_BINARY=docker/bin/bridle
export BRIDLE_PUBLISH="127.0.0.1:$PORT"
export BRIDLE_ALLOWED_HOSTS="127.0.0.1:$PORT,localhost:$PORT"
export BRIDLE_ALLOWED_ORIGINS="http://127.0.0.1:$PORT,http://localhost:$PORT"
compose() { docker-compose -p "$PROJECT" -f "$ROOT/compose.yaml" "$@"; }

profiles=(with-kanboard with-qdrant with-embeddings)
for mask in 0 1 2 3 4 5 6 7; do
    args=()
    for i in 0 1 2; do
        if (( mask & (1 << i) )); then args+=(--profile "${profiles[$i]}"); fi
    done
    compose "${args[@]}" config -q || fail "docker-compose ${args[*]} config"
    log "config ok [${args[*]:-gateway only}]"
done

# --- 2. the image ------------------------------------------------------------------------
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    MIRROR="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    [ -n "$MIRROR" ] || MIRROR="$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)"
    log "making $BASE_IMAGE with debootstrap (minbase bookworm)"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log" >&2; fail "debootstrap"; }
    tar -C "$WORK/rootfs" -c . | docker import - "$BASE_IMAGE" >/dev/null
    rm -rf "$WORK/rootfs"
fi
if [ -z "${BRIDLE_HOST_BINARY:-}" ]; then
    log "building bridle on the host"
    cargo build -q -p kberg-examples --bin bridle
    BRIDLE_HOST_BINARY="$CARGO_TARGET_DIR/debug/bridle"
fi
mkdir -p docker/bin
cp "$BRIDLE_HOST_BINARY" docker/bin/bridle
strip docker/bin/bridle 2>/dev/null || true
has --shutdown-grace "$(docker/bin/bridle serve --help)" \
    || fail "$BRIDLE_HOST_BINARY is not this checkout's bridle (no serve --shutdown-grace); a shared CARGO_TARGET_DIR may have been overwritten"
COMPOSE_READY=1
compose build -q gateway || compose build gateway

# --- 3. up, and an agent through the published port --------------------------------------
compose up -d gateway
URL="http://127.0.0.1:$PORT"
wait_ready() {
    for _ in $(seq 1 300); do
        if [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz" || true)" = 200 ]; then return 0; fi
        sleep 0.2
    done
    compose logs gateway >&2 || true
    fail "the gateway did not become ready at $URL/readyz"
}
wait_ready
curl -sf "$URL/healthz" >/dev/null || fail "/healthz"
# The image's HEALTHCHECK command, run as Docker runs it.
compose exec -T gateway bridle health >/dev/null || fail "bridle health (the HEALTHCHECK) inside the container"
compose exec -T gateway bridle health --ready >/dev/null || fail "bridle health --ready inside the container"
metrics="$(curl -sf "$URL/metrics")" || fail "/metrics"
grep -q '^bridle_mcp_requests_in_flight ' <<<"$metrics" || fail "/metrics"
CONTAINER="$(compose ps -q gateway)"
# The first start laid out token files in the volume and printed no token: stdout is the log.
FILE_TOKEN="$(compose exec -T gateway cat /data/secrets/claude-token | tr -d '\r\n')"
[ -n "$FILE_TOKEN" ] || fail "no token file in the data volume"
if has "$FILE_TOKEN" "$(docker logs "$CONTAINER" 2>&1)"; then fail "an agent token reached docker logs"; fi
out="$("$PYTHON" examples/tests/clients/bridle_compose_client.py "$URL/mcp" "$FILE_TOKEN" check)"
case "$out" in "OK "*) ;; *) fail "with the token file: $out";; esac
# An agent token from the vault in the volume, issued the way an operator does (shown once).
TOKEN="$(compose exec -T gateway bridle agents token issue claude | tail -n 1 | tr -d '\r\n')"
[ -n "$TOKEN" ] || fail "bridle agents token issue printed no token"
out="$("$PYTHON" examples/tests/clients/bridle_compose_client.py "$URL/mcp" "$TOKEN" propose compose-persists)"
[ "$out" = "PROPOSED compose-persists" ] || fail "python client: $out"
out="$("$PYTHON" examples/tests/clients/bridle_compose_client.py "$URL/mcp" "not-a-token" refused 2>/dev/null)"
[ "$out" = "REFUSED" ] || fail "a wrong token: $out"
log "the Python SDK client works through 127.0.0.1:$PORT with a bearer token"

# --- 4. secrets are files, never environment ---------------------------------------------
envs="$(docker inspect --format '{{json .Config.Env}}' "$CONTAINER")"
for s in bridle_master_key bridle_admin_token gitea_token kanboard_token; do
    value="$(cat "$SECRETS/$s")"
    case "$envs" in *"$value"*) fail "the secret $s is in the container's environment";; esac
    compose exec -T gateway test -f "/run/secrets/$s" || fail "/run/secrets/$s is not a file"
done
case "$envs" in *TOKEN=*|*PASSWORD=*|*MASTER_KEY=*) fail "a secret-like variable: $envs";; esac
mounts="$(docker inspect --format '{{range .Mounts}}{{.Destination}} {{end}}' "$CONTAINER")"
case "$mounts" in *"/run/secrets/bridle_master_key"*) ;; *) fail "the master key is not mounted: $mounts";; esac
if compose exec -T gateway test -e /data/vault.key; then
    fail "the gateway made its own key instead of using the mounted one"
fi
[ "$(docker inspect --format '{{.Config.User}}' "$CONTAINER")" = "bridle:bridle" ] || fail "not the non-root user"
log "secrets are files under /run/secrets, absent from the environment; the gateway runs as bridle"

# --- 5. the volume survives down and up --------------------------------------------------
compose down
compose up -d gateway
wait_ready
has compose-persists "$(compose exec -T gateway bridle rules queue)" || fail "the proposal did not survive down/up"
# The token issued before `down` still opens the gateway: the vault lives in the volume.
out="$("$PYTHON" examples/tests/clients/bridle_compose_client.py "$URL/mcp" "$TOKEN" check)"
case "$out" in "OK "*) ;; *) fail "after down/up: $out";; esac
log "the data volume survived down and up"

# --- 6. SIGTERM drains and exits 0 -------------------------------------------------------
CONTAINER="$(compose ps -q gateway)"
compose stop gateway
[ "$(docker inspect --format '{{.State.ExitCode}}' "$CONTAINER")" = 0 ] || fail "the gateway did not exit 0 on SIGTERM"
logs="$(docker logs "$CONTAINER" 2>&1)"
if ! has 'the gateway has stopped' "$logs"; then
    printf '%s\n' "$logs" | tail -n 15 >&2
    fail "no orderly stop in the log"
fi
for t in "$TOKEN" "$FILE_TOKEN"; do
    if has "$t" "$logs"; then fail "an agent token reached docker logs"; fi
done
compose down -v --remove-orphans
COMPOSE_READY=""
echo "compose-test: 1 passed, 0 failed"
