#!/usr/bin/env bash
# bench-compare.sh — our training step beside the peers', in one run on this
# machine, one thread (docs/BENCHMARKS.md, "Kernels" and "Transformer"):
#
#   native: `crowdtrain bench` on each CPU kernel path (auto; auto without
#           OpenBLAS; avx512; avx2; openblas; gonum; a -tags purego build
#           without OpenBLAS) against PyTorch + OpenBLAS
#           (the baselines' torch_step.py), for mnist-mlp and mnist-cnn at
#           batch 64; then the transformers, charlm at batch 32 and gpt-small
#           at batch 8 (auto only), against the same models in PyTorch
#           (scripts/torch_charlm_step.py);
#   browser: our worker (wasm-simd, wasm-go) against TensorFlow.js 4.22's
#           wasm backend (SIMD, one thread), each in a Web Worker in the same
#           headless Chromium (BenchmarkBrowserVsTFJS; TF.js comes from npm
#           into a temporary folder); then our worker's webgpu backend
#           against TF.js's webgpu backend (@tensorflow/tfjs-backend-webgpu,
#           the same models and SGD step), both on the adapter headless
#           Chromium has: SwiftShader, a GPU emulated on the CPU, so their
#           ratio is a relative figure only, nothing about a real GPU. Each
#           WebGPU step waits for the GPU (TF.js reads its loss back), and
#           their figures are medians of 3 rounds, not 5 (SwiftShader is
#           slow: a minute or so per mnist-cnn run). A WebGPU backend that
#           cannot run (ours, in a worker without one) is left out, the
#           report saying why.
#
# Each repetition runs every variant back to back; a variant's figure is the
# median over REPS repetitions (each itself the median of 5 rounds, 3 for
# the browser's WebGPU rows), and ratios divide medians. PyTorch's step is
# bimodal on this machine kind (its OpenBLAS runs some processes at a third
# of the speed of others), so the best run of each side and their ratio are
# given too. Run from the repository root:
#
#   scripts/bench-compare.sh        (make bench-compare)
#
# BASELINES (default ../shared/baselines) holds torch_step.py and TF.js's
# package.json; REPS (default 5) repetitions; MODELS (default mnist-mlp
# mnist-cnn charlm gpt-small) the models; SKIP_BROWSER=1 skips the browser part. The
# report goes to stdout and, when $OUT is set, to $OUT/bench-compare.txt.
set -u
BASELINES="${BASELINES:-$(pwd)/../shared/baselines}"
REPS="${REPS:-5}"
MODELS="${MODELS:-mnist-mlp mnist-cnn charlm gpt-small}"
PY="${PYTHON:-/usr/bin/python3}"
work="$(mktemp -d)"
report="$work/report"
: >"$report"
finish() {
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT" && cp "$report" "$OUT/bench-compare.txt"
	fi
	rm -rf "$work"
}
trap finish EXIT
say() { echo "$*" | tee -a "$report"; }

# median and largest of the numbers on stdin
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "nan"; exit} print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
best() { sort -g | tail -1 | awk '{print ($1 == "" ? "nan" : $1)} END {if (NR==0) print "nan"}'; }

say "# bench-compare $(date -u +%Y-%m-%dT%H:%M:%SZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
go build -o "$work/crowdtrain" ./cmd/crowdtrain || exit 1
go build -tags purego -o "$work/crowdtrain-purego" ./cmd/crowdtrain || exit 1

kernels="$("$work/crowdtrain" bench --rounds 1 --round 10ms 2>&1 | sed -n 's/.*kernel auto (of \([^;]*\);.*/\1/p' | tr -d ',')"
say "CPU kernels here: ${kernels:-unknown}"
variants="auto noblas"
for k in avx512 avx2 openblas gonum; do
	case " $kernels " in *" $k "*) variants="$variants $k" ;; esac
done
variants="$variants purego"

torch=""
if [ -f "$BASELINES/torch_step.py" ] && "$PY" -c 'import torch' 2>/dev/null; then
	torch="$PY $BASELINES/torch_step.py"
	info="$($torch mlp 1 2>&1 | head -1)"
	say "PyTorch: $info"
	case "$info" in *openblas*) ;; *) say "WARNING: PyTorch is not using OpenBLAS (apt-get install libopenblas0-openmp): no fair baseline" ;; esac
else
	say "PyTorch: not found (apt-get install -y python3-torch libopenblas0-openmp; BASELINES=$BASELINES)"
fi

say ""
say "## native, one thread: examples/s, median and best of $REPS"
for model in $MODELS; do
	case "$model" in
	charlm | gpt-small | gpt-mini)
		# The transformers: auto only (their steps take a while), batch 32
		# (gpt-small: 8, sequences of 256 tokens).
		if ! "$work/crowdtrain" bench --model "$model" --rounds 1 --round 10ms --batch 1 >/dev/null 2>&1; then
			say "$model: no such preset in this build; skipped"
			continue
		fi
		mvariants="auto"
		batch=32
		[ "$model" = gpt-small ] && batch=8
		peer=""
		if [ -n "$torch" ]; then peer="$PY scripts/torch_charlm_step.py 1 --model $model --batch $batch"; fi
		;;
	*)
		mvariants="$variants"
		batch=64
		peer=""
		if [ -n "$torch" ]; then peer="$torch ${model#mnist-} 1"; fi
		;;
	esac
	for rep in $(seq "$REPS"); do
		for v in $mvariants; do
			case "$v" in
			auto) cmd=("$work/crowdtrain" bench --model "$model" --batch "$batch") ;;
			# The downloadable binary on a host without OpenBLAS.
			noblas) cmd=(env CROWDTRAIN_OPENBLAS=off "$work/crowdtrain" bench --model "$model" --batch "$batch") ;;
			# No assembly of ours and no OpenBLAS: gonum's.
			purego) cmd=(env CROWDTRAIN_OPENBLAS=off "$work/crowdtrain-purego" bench --model "$model" --batch "$batch") ;;
			*) cmd=("$work/crowdtrain" bench --model "$model" --batch "$batch" --kernel "$v") ;;
			esac
			out="$("${cmd[@]}" 2>&1)"
			echo "$out" | sed -n 's/^examples\/s: //p' >>"$work/$model.$v"
			echo "$out" | sed -n 's/^kernel: //p' | tail -1 >"$work/$model.$v.kernel"
			echo "$out" | grep 'kernel auto: ' | sed 's/^[0-9\/: ]*//' >>"$work/$model.$v.log"
		done
		if [ -n "$peer" ]; then
			$peer 2>/dev/null | sed -n 's/^examples\/s: //p' >>"$work/$model.torch"
		fi
	done
	t="nan"
	tb="nan"
	[ -s "$work/$model.torch" ] && t="$(median <"$work/$model.torch")" && tb="$(best <"$work/$model.torch")"
	for v in $mvariants torch; do
		[ -s "$work/$model.$v" ] || continue
		m="$(median <"$work/$model.$v")"
		b="$(best <"$work/$model.$v")"
		label="$v"
		[ -s "$work/$model.$v.kernel" ] && label="$v (kernel $(cat "$work/$model.$v.kernel"))"
		[ "$v" = torch ] && label="PyTorch + OpenBLAS"
		runs="$(tr '\n' ' ' <"$work/$model.$v")"
		ratio="$(awk -v a="$m" -v b="$t" 'BEGIN {if (b == "nan" || b == 0) print "-"; else printf "%.2fx", a/b}')"
		bratio="$(awk -v a="$b" -v b="$tb" 'BEGIN {if (b == "nan" || b == 0) print "-"; else printf "%.2fx", a/b}')"
		say "$(printf '%-10s %-34s median %9.1f %6s  best %9.1f %6s vs PyTorch   runs: %s' "$model" "$label" "$m" "$ratio" "$b" "$bratio" "$runs")"
	done
	if [ -s "$work/$model.auto.log" ]; then
		say "$model, what auto measured (first run):"
		head -2 "$work/$model.auto.log" | tee -a "$report"
	fi
done

if [ "${SKIP_BROWSER:-0}" = 1 ]; then
	exit 0
fi
say ""
say "## browser, one Web Worker each, same headless Chromium, batch 64: examples/s, median of $REPS"
tf="$work/tfjs"
mkdir -p "$tf"
if ! cp "$BASELINES/package.json" "$tf/" 2>/dev/null; then
	say "no $BASELINES/package.json: skipping the browser comparison"
	exit 0
fi
if ! (cd "$tf" && npm install --no-audit --no-fund >"$work/npm.log" 2>&1); then
	say "npm install of TF.js failed (see below): skipping the browser comparison"
	tail -5 "$work/npm.log" | tee -a "$report"
	exit 0
fi
# No time limit: the WebGPU rows on SwiftShader take minutes per repetition.
CROWDTRAIN_TFJS_DIR="$tf/node_modules" go test -timeout 0 -run '^$' -bench BrowserVsTFJS -benchtime 1x -count "$REPS" ./web/ >"$work/browser.log" 2>&1
grep -E '^Benchmark|kernelbench_test' "$work/browser.log" | sed 's/^ *//' >>"$work/browser.lines"
for case in mnist-mlp/random mnist-mlp/mnist mnist-cnn/random mnist-cnn/mnist; do
	model="${case%/*}"
	metric() { grep "^BenchmarkBrowserVsTFJS/$case" "$work/browser.log" | awk -v m="$1" '{for (i=1;i<NF;i++) if ($(i+1)==m) print $i}' | median; }
	ours="$(metric crowdtrain-examples/s)"
	scalar="$(metric crowdtrain-go-examples/s)"
	tfjs="$(metric tfjs-examples/s)"
	why="$(grep -m1 "$model on .*TF.js cannot train it" "$work/browser.log" | sed 's/.*TF.js cannot train it: //')"
	line="$(printf '%-17s wasm-simd %7.0f   wasm-go %7.0f (%.2fx)' "$case" "$ours" "$scalar" "$(awk -v a="$ours" -v b="$scalar" 'BEGIN {print a/b}')")"
	if [ "$tfjs" = nan ]; then
		say "$line   TF.js wasm: ${why:-no figure (see the log below)}"
	else
		say "$(printf '%s   TF.js wasm %7.0f   simd %.2fx, go %.2fx of it' "$line" "$tfjs" "$(awk -v a="$ours" -v b="$tfjs" 'BEGIN {print a/b}')" "$(awk -v a="$scalar" -v b="$tfjs" 'BEGIN {print a/b}')")"
	fi
	# The WebGPU rows, for the section below.
	data="${case#*/}"
	tgpu="$(metric tfjs-webgpu-examples/s)"
	ogpu="$(metric crowdtrain-webgpu-examples/s)"
	if [ "$tgpu" = nan ]; then
		twhy="$(grep -m1 "$model on $data inputs, webgpu .*TF.js webgpu cannot run: " "$work/browser.log" | sed 's/.*TF.js webgpu cannot run: //')"
		tcol="TF.js webgpu: ${twhy:-no figure (see the log below)}"
	else
		tcol="$(printf 'TF.js webgpu %7.1f' "$tgpu")"
	fi
	if [ "$ogpu" = nan ]; then
		owhy="$(grep -m1 "$model on $data inputs, webgpu .*our webgpu backend is not available" "$work/browser.log" | sed 's/.*our webgpu backend is not available //')"
		ocol="ours webgpu: not available ${owhy:-(no figure; see the log below)}"
	elif [ "$tgpu" = nan ]; then
		ocol="$(printf 'ours webgpu %7.1f' "$ogpu")"
	else
		ocol="$(printf 'ours webgpu %7.1f   ours/TF.js webgpu %.2fx (on SwiftShader: relative only)' "$ogpu" "$(awk -v a="$ogpu" -v b="$tgpu" 'BEGIN {print a/b}')")"
	fi
	printf '%-17s %s   %s\n' "$case" "$tcol" "$ocol" >>"$work/webgpu.lines"
done
say ""
say "## browser WebGPU on SwiftShader (a GPU emulated on the CPU: relative figures only, nothing about a real GPU), batch 64: examples/s, median of $REPS (each of 3 rounds)"
[ -s "$work/webgpu.lines" ] && tee -a "$report" <"$work/webgpu.lines"
say ""
say "browser runs:"
grep -E 'kernelbench_test.go:[0-9]+: mnist' "$work/browser.log" | sed 's/^ *kernelbench_test.go:[0-9]*: //' | tee -a "$report"
if grep -q -E '^(FAIL|--- FAIL)' "$work/browser.log"; then
	say "the browser benchmark failed:"
	grep -v 'page console' "$work/browser.log" | tail -20 | tee -a "$report"
	exit 1
fi
