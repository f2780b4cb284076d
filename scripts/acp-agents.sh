#!/usr/bin/env bash
# Installs the published Agent Client Protocol agents the ACP tests run
# (internal/testkit's anthropic_test.go, the acp bridge's tests) from the
# npm registry into a fixed prefix, world-readable, so that the throwaway
# non-root accounts of the tests can run them:
#
#   @zed-industries/claude-agent-acp 0.23.1 (with the Claude Code CLI it
#   bundles through @anthropic-ai/claude-agent-sdk 0.2.83; about 94 MB)
#
# The prefix is /opt/dashgate-acp unless DASHGATE_ACP_PREFIX names another
# (the tests read the same variable). Needs node and npm on PATH and write
# access to the prefix (root for /opt). Safe to run again: it installs only
# when the pinned version is not already there.
#
# stdout: the path of the agent's entry, one line
# (/opt/dashgate-acp/node_modules/.bin/claude-agent-acp); progress goes to
# stderr. Exit status non-zero when the install failed.
set -euo pipefail
prefix=${DASHGATE_ACP_PREFIX:-/opt/dashgate-acp}
pkg=@zed-industries/claude-agent-acp
version=0.23.1
bin=$prefix/node_modules/.bin/claude-agent-acp

installed_version() {
  node -p "require('$prefix/node_modules/$pkg/package.json').version" 2>/dev/null || true
}

for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "acp-agents: $tool is not on PATH (Node 20 or later)" >&2; exit 1; }
done

if [ "$(installed_version)" = "$version" ] && [ -x "$bin" ]; then
  echo "acp-agents: $pkg@$version already in $prefix" >&2
else
  echo "acp-agents: installing $pkg@$version into $prefix" >&2
  umask 022
  mkdir -p "$prefix"
  # --save-exact pins the top package in $prefix/package.json; its own
  # dependencies are pinned by its package.json (the SDK exactly). No
  # audit or funding round trips: CI reaches only the registry.
  npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error \
    "$pkg@$version" >&2
  got=$(installed_version)
  if [ "$got" != "$version" ]; then
    echo "acp-agents: after npm install, $pkg is at version '${got:-none}', want $version" >&2
    exit 1
  fi
fi
# Every account may read and run it (the tests' accounts are not root).
chmod -R a+rX "$prefix"
echo "$bin"
