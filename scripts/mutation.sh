#!/usr/bin/env bash
# make mutation: gremlins over each package given, one at a time, then one
# line per package with its efficacy (mutants killed / killed + lived).
# Fails when any package is below the threshold or gremlins gives no score.
#
# The threshold is checked here, not by gremlins' --threshold-efficacy:
# gremlins v0.6.0 reads that flag back from viper as a string and so never
# applies it (its exit status is 0 at any score).
#
#   scripts/mutation.sh THRESHOLD WORKERS PKG...
# GREMLINS is the command that runs gremlins; each package's full output
# is kept in ${MUTATION_OUT:-bin/mutation}/<pkg>.txt. A mutant's tests may
# take MUTATION_TIMEOUT_COEFFICIENT (default 10) times the package's own
# before it counts as timed out: a mutant that makes the suite hang costs
# that long.
set -uo pipefail
cd "$(dirname "$0")/.."
threshold=$1 workers=$2
shift 2
out=${MUTATION_OUT:-bin/mutation}
mkdir -p "$out"
# Gremlins tests a copy of the module in a temporary directory, with no
# ../shared beside it: point the fixture tests at the recorded traffic so
# that they run (and count) there too.
if [ -z "${SLUICE_FIXTURES:-}" ] && [ -d ../shared/fixtures/openai ]; then
	SLUICE_FIXTURES=$(cd ../shared/fixtures/openai && pwd)
	export SLUICE_FIXTURES
fi
summary=()
fail=0
for p in "$@"; do
	log="$out/$(echo "$p" | tr / _).txt"
	echo "== $p (full output: $log)"
	# GOFLAGS=-count=1: gremlins times each mutant against its coverage
	# run, which must not be a cached test result.
	GOFLAGS=-count=1 $GREMLINS unleash --workers="$workers" --timeout-coefficient="${MUTATION_TIMEOUT_COEFFICIENT:-10}" -S lct "./$p" 2>&1 | tee "$log"
	eff=$(sed -n 's/.*Test efficacy: \([0-9.]*\)%.*/\1/p' "$log" | tail -1)
	counts=$(sed -n 's/.*\(Killed: [0-9]*, Lived: [0-9]*\).*/\1/p' "$log" | tail -1)
	if [ -z "$eff" ]; then
		summary+=("$p: no score (gremlins failed; see $log)")
		fail=1
	elif awk -v e="$eff" -v t="$threshold" 'BEGIN { exit !(e < t) }'; then
		summary+=("$p: $eff% ($counts) BELOW $threshold%")
		fail=1
	else
		summary+=("$p: $eff% ($counts)")
	fi
done
echo
echo "mutation efficacy, threshold $threshold%:"
printf '  %s\n' "${summary[@]}"
exit $fail
