#!/usr/bin/env bash
# The test command of the README: every package, the race detector on.
# Extra arguments go to `go test` (e.g. -run, -v).
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test -race -count=1 -timeout 30m "$@" ./...
