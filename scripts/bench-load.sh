#!/usr/bin/env bash
# bench-load.sh — a crowd on one coordinator (docs/BENCHMARKS.md, "A crowd
# on one coordinator"): IDLE volunteers that stay connected and ACTIVE ones
# that each hold a lease and return an mnist-mlp result every EVERY, for
# DURATION after they have all connected, from crowdtrain-load, a process
# of its own (one process here may hold at most 20,000 descriptors). Every
# REPORT it prints the lease latency the active ones saw (want → lease)
# and the coordinator's resident memory and goroutines; before the crowd
# comes, the same of the coordinator alone. Run from the repository root:
#
#   scripts/bench-load.sh          (make bench-load)
#
# IDLE (10000), ACTIVE (1000), EVERY (10s), DURATION (10m), BINDS (400: the
# connections come from 127.0.0.2 on, spread so that no address passes the
# coordinator's default per-address limits). The report goes to stdout and
# to $OUT/bench-load.txt when $OUT is set; the per-interval figures to
# $OUT/bench-load.jsonl.
set -euo pipefail
IDLE="${IDLE:-10000}"
ACTIVE="${ACTIVE:-1000}"
EVERY="${EVERY:-10s}"
DURATION="${DURATION:-10m}"
BINDS="${BINDS:-400}"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/crowdtrain" ./cmd/crowdtrain
go build -o "$work/crowdtrain-load" ./cmd/crowdtrain-load
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "descriptors per process: $(ulimit -n)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat >"$work/job.yaml" <<YAML
name: load
model: mnist-mlp
spot_check: 0
max_epochs: 100000
target_accuracy: 0
YAML
"$work/crowdtrain" serve --addr "127.0.0.1:$port" --db "" --job "$work/job.yaml" >"$work/serve.log" 2>&1 &
root=$!
for _ in $(seq 100); do
	curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break
	sleep 0.2
done
sleep 5 # the coordinator settles before its memory is read
base_rss="$(awk '/VmRSS/ {print $2}' "/proc/$root/status")"
base_g="$(curl -fs "http://127.0.0.1:$port/metrics" | awk '/^go_goroutines / {print $2}')"
out="${OUT:-$work}"
mkdir -p "$out"
{
	echo "# bench-load: $IDLE idle and $ACTIVE active volunteers (a result every $EVERY), $DURATION, $(date -u +%F), $(nproc) CPUs"
	echo "coordinator alone: RSS $((base_rss / 1024)) MB, $base_g goroutines"
} | tee "$out/bench-load.txt"
"$work/crowdtrain-load" --coordinator "ws://127.0.0.1:$port/ws" --idle "$IDLE" --active "$ACTIVE" --every "$EVERY" \
	--duration "$DURATION" --ramp 60s --binds "$BINDS" --pid "$root" --metrics "http://127.0.0.1:$port/metrics" \
	--json "$out/bench-load.jsonl" | tee -a "$out/bench-load.txt"
# The summary: per connection over the coordinator alone, at the end and 5
# minutes before; the lease latency over the last 5 minutes.
python3 - "$out/bench-load.jsonl" "$base_rss" "$base_g" "$IDLE" "$ACTIVE" <<'PY' | tee -a "$out/bench-load.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base_rss, base_g = int(sys.argv[2]) * 1024, float(sys.argv[3])
conns = int(sys.argv[4]) + int(sys.argv[5])
start = next((r["seconds"] for r in rows if r.get("all_connected")), None)
if start is None:
    sys.exit("not every volunteer connected")
# The idle connections' cost: the last report before any active one had
# connected (the idle ones connect first).
idle_only = [r for r in rows if r["active"] == 0 and r["idle"] > 0]
if idle_only:
    r = idle_only[-1]
    print(f"idle connections alone: {r['idle']} of them, {(r['rss_bytes'] - base_rss) / r['idle'] / 1024:.1f} KB of RSS and {(r['goroutines'] - base_g) / r['idle']:.2f} goroutines each")
loaded = [r for r in rows if r["seconds"] >= start]
end = loaded[-1]
half = [r for r in loaded if r["seconds"] >= end["seconds"] - 300]
first = half[0]
p99 = max(r["p99_ms"] for r in half)
leases = sum(r["leases_in_window"] for r in half)
print(f"everything, per connection (the active ones' results and the job's snapshots included): {(end['rss_bytes'] - base_rss) / conns / 1024:.1f} KB of RSS, {(end['goroutines'] - base_g) / conns:.2f} goroutines")
print(f"last 5 minutes: RSS {first['rss_bytes'] / 2**20:.0f} -> {end['rss_bytes'] / 2**20:.0f} MB, goroutines {first['goroutines']} -> {end['goroutines']}")
print(f"lease latency over the last 5 minutes: worst interval's p99 {p99:.1f} ms ({leases} leases); results {end['results']}, accepted {end['accepted']}, rejected {end.get('rejected', {})}")
PY
