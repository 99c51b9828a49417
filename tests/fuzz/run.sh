#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (default 10s; a
# count such as 5000x runs that many inputs instead).
#
# A duration can fail a target that found nothing, with "context deadline
# exceeded": a race in Go's fuzzing coordinator at the end of the window
# (go.dev/issue/75804, fixed in Go 1.27; go1.26 has it). No input is
# written then. A count has no deadline, so CI passes a count.
#
# go test takes one -fuzz target per run and rebuilds the instrumented test
# binary each time; this builds it once per package (go test -c -fuzz) and
# runs each target from the package's folder, so that testdata/fuzz seeds
# are read and new failing inputs are written where go test puts them.
# Targets are found by their `func Fuzz…(f *testing.F)` lines.
set -euo pipefail
cd "$(dirname "$0")/../.."
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
module=$($go list -m)
cache=$($go env GOCACHE)/fuzz
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

for dir in $(git ls-files '*_test.go' | xargs grep -l '^func Fuzz[A-Za-z0-9_]*(f \*testing.F)' | xargs -n1 dirname | sort -u); do
	test=$bin/$(echo "$dir" | tr '/.' '__').test
	echo "build ./$dir (instrumented for fuzzing)"
	$go test -c -fuzz=. -o "$test" "./$dir"
	pkg=$module
	[ "$dir" = . ] || pkg=$module/$dir
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*(f \*testing.F)' "$dir"/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/'); do
		echo "fuzz $target in ./$dir for $fuzztime"
		(cd "$dir" && "$test" -test.run '^$' -test.fuzz "^$target\$" -test.fuzztime "$fuzztime" \
			-test.fuzzcachedir "$cache/$pkg/" -test.paniconexit0 -test.timeout 10m)
	done
done
