#!/bin/sh
# The image's entrypoint. On the first start of an empty data volume it lays the data directory
# out with the demo agents' tokens as 0600 files in /data/secrets (`bridle init --token-files`)
# instead of issuing them from the vault and showing them once on stdout: in a container stdout
# is the log (`docker logs`), and a token must never reach a log. Read one with
# `docker compose exec gateway cat /data/secrets/claude-token`, or issue a vault token with
# `docker compose exec gateway bridle agents token issue claude`.
set -eu
if [ "${1:-}" = "serve" ] && [ ! -e "${BRIDLE_DATA_DIR:-/data}/bridle.yaml" ]; then
    /usr/local/bin/bridle init --token-files >/dev/null
fi
exec /usr/local/bin/bridle "$@"
