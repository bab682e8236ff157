# specprof — build, generate, test, demo.
# Tests that load BPF need root; CI runs them as root with CI=true, where a
# missing privilege fails instead of skipping.

GO      ?= go
# go-nvml's cgo preamble declares NVML functions that CUDA 13 deprecates: quiet the warnings.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
PYTHON  ?= python3
BUILD   := build
STANDIN := $(abspath $(BUILD)/standin)
BIN     := $(BUILD)/specprof

.PHONY: test-python all build generate check-generate standins test test-unit bench demo lint clean jaeger

all: build

build: $(BIN) standins

$(BIN): FORCE
	$(GO) build -ldflags "-X main.buildRevision=$$(git describe --always --dirty 2>/dev/null)" -o $(BIN) ./cmd/specprof

FORCE:

# bpf2go (through the go.mod tool directive) regenerates bpf/specprof_x86_bpfel.{go,o}.
generate:
	$(GO) generate ./...

# Regenerate and fail if the committed generated files differ.
check-generate: generate
	git diff --exit-code -- bpf/ cupti/ || { echo "generated files are stale: run 'make generate' and commit" >&2; exit 1; }

# Stand-in libcuda.so.1 / libnccl.so.2 driving a simulated GPU (testdata/standin).
standins:
	$(MAKE) -C testdata/standin OUT=$(STANDIN) all check

test: standins
	$(GO) test -count=1 -timeout 45m ./...
	$(MAKE) fuzz
	$(MAKE) test-python

# Every decoder of untrusted bytes, fuzzed: about two minutes on 2 cores with the build cache
# warm, three with it empty (the instrumented builds). Counts, not durations: Go 1.26's fuzz
# coordinator can fail a clean run with "context deadline exceeded" when a duration ends
# mid-exec (golang/go#75804). FuzzDeriveNameRegex runs at about 150 inputs a second (it
# derives and compiles regexes for each); each run also replays the corpus the earlier runs
# left in the build cache.
.PHONY: fuzz
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 400000x ./cupti/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 300000x ./bpf/
	$(GO) test -run '^$$' -fuzz '^FuzzLoadRules$$' -fuzztime 100000x ./agent/phase/
	$(GO) test -run '^$$' -fuzz '^FuzzDeriveNameRegex$$' -fuzztime 3000x ./agent/phase/
	$(GO) test -run '^$$' -fuzz '^FuzzFrameWalk$$' -fuzztime 500000x ./agent/python/
	$(GO) test -run '^$$' -fuzz '^FuzzOffsetsFromDebug$$' -fuzztime 300000x ./agent/python/
	$(GO) test -run '^$$' -fuzz '^FuzzLineTable$$' -fuzztime 300000x ./agent/python/
	$(GO) test -run '^$$' -fuzz '^FuzzVersionFromELF$$' -fuzztime 200000x ./agent/python/
	$(GO) test -run '^$$' -fuzz '^FuzzParseMaps$$' -fuzztime 300000x ./agent/proc/
	$(GO) test -run '^$$' -fuzz '^FuzzELF$$' -fuzztime 200000x ./agent/proc/

# The GPU benchmark suite's driver, report parsing and EAGLE worker logic, without a GPU.
test-python:
	python3 bench/gpu/test_suite_dryrun.py

test-unit:
	$(GO) test -count=1 -short ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./bpf/... ./agent/...
	$(GO) test -run '^$$' -bench BenchmarkHookedLaunch -benchtime 20000x -count 1 ./bpf/

# The main job: the SGLang-shaped EAGLE workload on the simulated GPU under `specprof run`.
demo: build mockcupti
	LD_LIBRARY_PATH=$(STANDIN) SPECPROF_CUPTI_LIB=$(STANDIN)/libcupti.so.13 $(BIN) run --interval 100 --force -o $(BUILD)/demo-out -- \
		$(PYTHON) testdata/workloads/sglang_demo.py --cycles 300 --mode graph --allreduce --proctitle sglang::scheduler_TP0

# The CUPTI injection library (build/libspecprof_cupti.so; needs no CUDA header) and the mock
# libcupti.so.13 that the stand-in libcuda drives (build/standin), for cupti's tests.
.PHONY: cupti mockcupti cupti-layoutcheck
build: cupti
test: cupti mockcupti

cupti:
	$(MAKE) -C cupti/lib OUT=$(abspath $(BUILD))

mockcupti: standins
	$(MAKE) -C testdata/mockcupti OUT=$(STANDIN)

# On a CUDA host: assert cupti_min.h and the mock's layouts against NVIDIA's headers.
cupti-layoutcheck:
	sh cupti/layoutcheck/run.sh

# Jaeger for the OTLP end-to-end test (cmd/specprof TestJaeger*), built from the Go module proxy
# at the version pinned in internal/tools/jaeger/go.mod and cached in /var/cache/specprof.
jaeger:
	GO=$(GO) sh internal/tools/jaeger/install.sh

# The GPU benchmark suite (issue 6; bench/gpu/suite.py) on a CUDA host with torch and transformers,
# as root. Builds nothing: build/specprof and build/libspecprof_cupti.so are built elsewhere
# (make build) and carried. PYTHON: the Python with torch; BENCH_GPU_ARGS: more suite flags, e.g.
#   make bench-gpu PYTHON=/opt/torch/.venv/bin/python3 BENCH_GPU_ARGS='--workloads hf --out /tmp/b'
.PHONY: bench-gpu
bench-gpu:
	$(PYTHON) bench/gpu/suite.py --specprof $(BIN) --python $(PYTHON) $(BENCH_GPU_ARGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf $(BUILD)
