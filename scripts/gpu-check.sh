#!/usr/bin/env bash
# gpu-check.sh — the GPU worker's checks on a machine with an NVIDIA GPU:
# diagnostics, the GPU tests (each kernel, the gradient clip's among them,
# against a float64 reference, every layer, the presets and charlm against the CPU, mnist-mlp to 97% through a
# real coordinator) and examples/s for mnist-mlp, mnist-cnn and charlm on
# the GPU, the CPU backend and, when python3 has torch, PyTorch on the same
# GPU.
#
#   scripts/gpu-check.sh            from a checkout, with Go: builds first
#   bash DIR/gpu-check.sh           without Go: uses the binaries in DIR
#                                   (make gpu-carry DIR=... puts them there)
#
# The report goes to stdout and, when $OUT is set, to $OUT/gpu-check.txt
# (the full log to $OUT/gpu-check.log). It runs in well under 5 minutes and
# exits 0 with a note, not a failure, on a machine without a GPU.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log="$work/log"
report="$work/report"
: >"$report"
say() { echo "$*" | tee -a "$report"; }
section() { echo | tee -a "$report"; say "## $*"; }
run() { echo "\$ $*" >>"$log"; "$@" 2>&1 | tee -a "$log"; return "${PIPESTATUS[0]}"; }
finish() {
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT"
		cp "$report" "$OUT/gpu-check.txt"
		cp "$log" "$OUT/gpu-check.log"
	fi
}
trap 'finish; rm -rf "$work"' EXIT
: >"$log"

section "machine"
say "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "host: $(uname -srm)"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$report"
	nvidia-smi 2>&1 | head -15 >>"$log"
else
	say "gpu: nvidia-smi not found"
fi

section "CUDA libraries"
for lib in libcuda.so.1 libnvrtc.so libnvrtc-builtins libcublas.so libcublasLt.so; do
	found="$( (ldconfig -p 2>/dev/null | awk -v l="$lib" 'index($1, l) == 1 {print $NF}';
		ls -1 /usr/local/nvidia/lib64/"$lib"* /usr/local/cuda/lib64/"$lib"* \
			/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/"$lib"* \
			/usr/local/lib/python3*/dist-packages/nvidia/*/lib/"$lib"* 2>/dev/null) | sort -u | tr '\n' ' ')"
	say "$lib: ${found:-not found}"
done

# Binaries: build with Go in a checkout, else take the prebuilt ones.
section "binaries"
if command -v go >/dev/null && [ -f "$here/../go.mod" ]; then
	root="$here/.."
	say "building with $(go version)"
	# The GPU code needs no cgo; the coordinator's SQLite (in the binary
	# and the end-to-end test) does.
	(cd "$root" && go build -o "$work/crowdtrain" ./cmd/crowdtrain &&
		go test -c -o "$work/cuda.test" ./worker/cuda) >>"$log" 2>&1 || { say "build failed; see the log"; tail -20 "$log"; exit 1; }
	bin="$work"
	[ -d "$root/data/mnist" ] && export CROWDTRAIN_DATA="${CROWDTRAIN_DATA:-$root/data/mnist}"
else
	bin="$work"
	for f in crowdtrain cuda.test; do
		if [ -f "$here/$f.gz" ]; then gunzip -c "$here/$f.gz" >"$bin/$f"; else cp "$here/$f" "$bin/$f"; fi
		chmod +x "$bin/$f"
	done
	say "using the prebuilt binaries in $here"
	[ -d "$here/mnist" ] && export CROWDTRAIN_DATA="${CROWDTRAIN_DATA:-$here/mnist}"
fi
say "MNIST: ${CROWDTRAIN_DATA:-the default search}"

section "GPU tests"
# Run in the package's folder: its testdata/ builds the CPU emulation.
pkgdir="$here/../worker/cuda"
[ -f "$pkgdir/kernels.cu" ] || pkgdir="$here/worker/cuda"
(cd "$pkgdir" && run timeout 200 "$bin/cuda.test" -test.v -test.count=1 -test.timeout=190s) >"$work/tests" 2>&1
status=$?
cat "$work/tests" >>"$log"
grep -E '^(=== RUN|--- (PASS|FAIL|SKIP)|    --- (PASS|FAIL|SKIP)|PASS|FAIL|ok )|GPU: |mnist-mlp on the GPU|no usable GPU|differs|relative of the CPU|gpu: .*(of the reference|tolerance)|steps on the device' "$work/tests" |
	grep -v '^=== RUN' | sort -u | tee -a "$report"
say "tests exit status: $status"
gpu=yes
grep -q 'no usable GPU' "$work/tests" && gpu=no

section "examples/s, batch 64, charlm batch 32 (median of 5 rounds)"
bench() { # label, args...
	local label="$1"
	shift
	local r
	r="$(timeout 90 "$bin/crowdtrain" bench --rounds 5 --round 400ms "$@" 2>>"$log" | tee -a "$log" | sed -n 's/^examples\/s: //p')"
	case "$label" in
	charlm*) [ -n "$r" ] && r="$r  ($(awk -v e="$r" 'BEGIN { printf "%.0f", e * 128 }') tokens/s)" ;;
	esac
	say "$(printf '%-44s %s' "$label" "${r:-failed}")"
}
for model in mnist-mlp mnist-cnn charlm; do
	batch=64
	[ "$model" = charlm ] && batch=32
	if [ "$gpu" = yes ]; then
		bench "$model cuda, 1 step per lease" --model "$model" --backend cuda --batch "$batch"
		bench "$model cuda, 16 steps per lease" --model "$model" --backend cuda --batch "$batch" --local-steps 16
	fi
	bench "$model cpu, 1 thread" --model "$model" --backend cpu --threads 1 --batch "$batch"
	bench "$model cpu, $(nproc) threads" --model "$model" --backend cpu --threads 0 --batch "$batch"
done

if [ "$gpu" = yes ] && command -v python3 >/dev/null && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	section "PyTorch on the same GPU"
	tb="$here/torch_bench.py"
	[ -f "$tb" ] || tb="$here/../scripts/torch_bench.py"
	PYTHONUNBUFFERED=1 timeout 120 python3 "$tb" 2>&1 | tee -a "$log" | grep -v '^#' | tee -a "$report"
else
	say "(PyTorch comparison skipped: no GPU, or no python3 with CUDA torch)"
fi
exit "$status"
