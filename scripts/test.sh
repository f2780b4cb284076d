#!/usr/bin/env bash
# The test command of the README: every package, the race detector on.
# Extra arguments go to `go test` (e.g. -run, -v).
#
# Afterwards no dashgate cgroup may be left in the cgroup2 root that was
# not there before: a test that kills a dashgate must leave the machine as
# a clean stop would (testkit removes a killed instance's tree), so the
# run fails, naming them, when one is left.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
cgroups() {
	if [ -n "$root" ]; then
		find "$root" -maxdepth 1 -type d -name 'dashgate-*' | sort
	fi
}
before=$(cgroups)
status=0
go test -race -count=1 -timeout 30m "$@" ./... || status=$?
left=$(comm -13 <(echo "$before") <(cgroups) | sed '/^$/d')
if [ -n "$left" ]; then
	echo "the tests left these dashgate cgroups behind:" >&2
	echo "$left" >&2
	status=1
fi
exit "$status"
