#!/usr/bin/env bash
# Makes the README's screenshots again, into docs/screenshots/: the e2e
# tests that take them (TestScreenshots, TestScreenshotsFeatures,
# TestRecordingsPlayback) run a real dashgate and headless Chromium (sudo
# ./scripts/e2e-deps.sh once) and, with DASHGATE_SCREENSHOTS=1, write their
# PNGs. DASHGATE_SCREENSHOTS=DIR writes TestScreenshotsFeatures' into DIR.
#
#   ./scripts/screenshots.sh                                   all of them
#   ./scripts/screenshots.sh 'TestScreenshotsFeatures/terminal-tabs'   one (a -run pattern)
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:-'^(TestScreenshots|TestScreenshotsFeatures|TestRecordingsPlayback)$'}
# DASHGATE_E2E=1: without Chromium the tests fail instead of skipping.
DASHGATE_E2E=1 DASHGATE_SCREENSHOTS=${DASHGATE_SCREENSHOTS:-1} \
	exec go test -count=1 -timeout 10m -v -run "$run" ./e2e/
