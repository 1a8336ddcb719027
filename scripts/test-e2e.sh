#!/usr/bin/env bash
# The end-to-end tier (`make test-e2e`): every test, the long ones included
# (real processes, Chromium, PyTorch, NATS relays, trainings to a target),
# in shards that run side by side, E2E_JOBS at a time (default: one per
# core). A shard is a set of packages and a -run/-skip by test-name prefix,
# as nats-server's CI splits its suite. Each shard's whole `go test` output
# goes to test-artifacts/e2e/SHARD.log; this script prints each shard's
# result as it ends, then every shard's package lines (and the whole log of
# any that failed), and exits non-zero if one did.
#
#   SHARDS=relay,browser scripts/test-e2e.sh   # only those shards
#   E2E_JOBS=1 scripts/test-e2e.sh             # one shard at a time
#
# The shards together run every test of `go test ./...` exactly once, by
# construction: a package split by name prefixes has one shard per prefix
# set (-run) and one for all the others (-skip of the same sets).
set -uo pipefail
set -f # the patterns are regular expressions, not globs
cd "$(dirname "$0")/.."

GO=${GO:-go}
OUT=${E2E_OUT:-$PWD/test-artifacts/e2e}
JOBS=${E2E_JOBS:-$(nproc)}
TIMEOUT=${E2E_TIMEOUT:-40m}
mkdir -p "$OUT"

module=$($GO list -m)
# Test-name prefixes, as alternations for ^(...): cmd/crowdtrain's relays
# over NATS, and its trainings against PyTorch or on the text corpora;
# the coordinator's trainings to a target under attack or beside
# stragglers, apart from the rest of its in-process tests.
relay='TestRelay|TestRootRestartWithRelays|TestServeWithExternalNATS'
torch='TestCharLM|TestTorch|TestExport|TestFashion|TestTextSpec|TestServeCharlm|TestCharlm|TestSample|TestTaskDataset|TestRLJob'
training='TestMLP|TestGPTMini|TestCNN|TestLocalSGD|TestStaleResults|TestDiLoCo|TestInt8|TestHostile|TestAsyncEarly|TestSpotCheck|TestValidator|TestSync|TestStraggler|TestVanished|TestExpired'
rest_pkgs=$($GO list ./... | grep -v -x -e "$module/coordinator" -e "$module/cmd/crowdtrain" -e "$module/web" -e "$module/worker/wasm")

# A shard's name, packages and go test arguments; longest first, so that
# the pool starts them early.
names=(cmd coordinator relay coordinator-training torch browser rest)
pkgs=(./cmd/crowdtrain ./coordinator ./cmd/crowdtrain ./coordinator ./cmd/crowdtrain "./web ./worker/wasm" "$(echo $rest_pkgs)")
args=("-skip ^($relay|$torch)" "-skip ^($training)" "-run ^($relay)" "-run ^($training)" "-run ^($torch)" "" "")

want=",${SHARDS:-},"
run_shard() {
	local name=$1 pkgs=$2 args=$3 start=$SECONDS rc
	# shellcheck disable=SC2086 # packages and arguments are word lists
	$GO test -count=1 -timeout "$TIMEOUT" -artifacts -outputdir "$OUT/.." $args $pkgs >"$OUT/$name.log" 2>&1
	rc=$?
	echo "$rc" >"$OUT/$name.rc"
	if [ "$rc" = 0 ]; then
		echo "e2e shard $name: ok in $((SECONDS - start)) s"
	else
		echo "e2e shard $name: FAILED (exit $rc) in $((SECONDS - start)) s; log: $OUT/$name.log"
	fi
}

ran=()
for i in "${!names[@]}"; do
	name=${names[$i]}
	if [ "$want" != ",," ] && [[ "$want" != *",$name,"* ]]; then
		continue
	fi
	ran+=("$name")
	rm -f "$OUT/$name.rc" "$OUT/$name.log"
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
		wait -n
	done
	run_shard "$name" "${pkgs[$i]}" "${args[$i]}" &
done
wait
if [ ${#ran[@]} = 0 ]; then
	echo "no shard named in SHARDS=$SHARDS" >&2
	exit 2
fi

failed=0
for name in "${ran[@]}"; do
	rc=$(cat "$OUT/$name.rc" 2>/dev/null || echo 1)
	echo "--- shard $name"
	if [ "$rc" = 0 ]; then
		grep -E '^(ok|FAIL|---|\?)[[:space:]]' "$OUT/$name.log" | grep -v -E '^--- (PASS|SKIP)' || true
	else
		failed=1
		cat "$OUT/$name.log"
	fi
done
exit $failed
