# corral — build, test, run, bench.
#
# llama.cpp's kernels are chosen at run time: the binary embeds ggml's CPU
# backend in each of its instruction-set variants and loads the best the
# machine runs (llama/cpuvariant.go). NATIVE is only for the binding's own
# C code (cgo), compiled with -O3 -march=native by default; make dist
# builds it for the architecture's baseline. A binary started on a CPU
# that lacks what its own code was built for stops and names what is
# missing (llama/cpu.c). Plain go commands use CGO_CFLAGS and CGO_CXXFLAGS
# as they are: export the same flags ("-O3 -march=native").
NATIVE      ?= -march=native
CGO_FLAGS   := -O3 $(NATIVE)
export CGO_ENABLED  := 1
export CGO_CFLAGS   := $(CGO_FLAGS)
export CGO_CXXFLAGS := $(CGO_FLAGS)

GO          ?= go
SHARED      ?= ../shared
MODEL       ?= $(firstword $(wildcard $(SHARED)/models/tinystories-656k-q8_0.gguf))
ARGS        ?=
TESTFLAGS   ?= -race -count=1 -timeout 60m
# go vet with the tests' -race: vet compiles the packages' dependencies,
# and with the same flags go test then finds them in the build cache
# instead of compiling the tree a second time (in deploy/picker's
# Kubernetes tree, cold: 495 s against 864).
VETFLAGS    := $(filter -race,$(TESTFLAGS))
CORRAL_BIN  := $(abspath bin/corral)

.PHONY: all build llama test picker run bench vet clean browser dist check-builds cross-toolchain vulkan cuda lavapipe test-gpu zmq

all: build

build: llama
	$(GO) build -o bin/corral ./cmd/corral

# The pinned llama.cpp release (llama/upstream/release) built with its own
# CMake: static libraries, the CPU variants' modules and headers in
# llama/lib, the build's key and the modules' go:embed in
# llama/zllama_GOOS_GOARCH.go (all git-ignored). Cached in
# ~/.cache/corral/llama.cpp: only the first build takes long (about 11
# minutes on 2 cores), later ones copy in seconds. After it, plain go
# build, go test and gopls work. cmake (and ninja and ccache when there)
# do the build; cmake and patchelf are installed when missing, as for the
# browser.
llama:
	./scripts/llama-cpp.sh build

# The browser test (e2e/browser_test.go) drives a headless Chromium,
# Debian's chromium package. When it is missing and apt-get can run (as
# root, or through sudo without a password), install it; otherwise say so
# and go on: the test itself then fails, naming what is missing (it never
# skips). CORRAL_CHROMIUM points the test at another browser.
CHROMIUM    ?= /usr/bin/chromium
browser:
	@if [ -x "$(CHROMIUM)" ] || [ -n "$${CORRAL_CHROMIUM:-}" ]; then exit 0; fi; \
	./scripts/apt-install.sh --optional browser chromium

# The end-to-end tests (bench, supervisor, e2e, server) run bin/corral, built
# once here with the flags above, instead of each compiling its own.
# CORRAL_BACKENDS= (set, empty): they compute on the CPU even where a GPU
# backend library lies beside bin/corral (make vulkan); make test-gpu
# tests the offload.
test: build browser
	$(GO) vet $(VETFLAGS) ./...
	CORRAL_BACKENDS= CORRAL_BIN="$(CORRAL_BIN)" $(GO) test $(TESTFLAGS) ./...
	$(MAKE) picker

# deploy/picker, its own module (the endpoint picker's Kubernetes
# dependency tree stays out of corral's): the manifests against
# Kubernetes' own schemas and strict decoding, the picker's own flags and
# configuration loader, and requests routed by the real picker among
# corral processes.
picker: build zmq
	cd deploy/picker && $(GO) vet $(VETFLAGS) ./...
	cd deploy/picker && CORRAL_BACKENDS= CORRAL_BIN="$(CORRAL_BIN)" $(GO) test $(TESTFLAGS) ./...

# libzmq, which llm-d's KV-event subscriber (deploy/picker's
# TestKVEventsIndex) is built on: installed when missing.
zmq:
	@if pkg-config --exists libzmq 2>/dev/null; then exit 0; fi; \
	./scripts/apt-install.sh zmq libzmq3-dev pkg-config

# ggml's GPU backends, built from the pinned llama.cpp release with its own
# CMake as libraries corral loads at run time (scripts/backend.sh,
# llama/backend.go): bin/libggml-vulkan.so or bin/libggml-cuda.so, beside
# bin/corral, where corral looks by default. Vulkan's build tools are
# installed when missing (as for the browser); CUDA needs nvcc. Each
# library is cached outside the clone (~/.cache/corral/backends, keyed by
# the release and the compilers), so only the first build takes long.
BACKENDS_DIR ?= bin
vulkan:
	./scripts/backend.sh vulkan $(BACKENDS_DIR)
cuda:
	./scripts/backend.sh cuda $(BACKENDS_DIR)

# Lavapipe, Mesa's Vulkan device that computes on the CPU: what
# make test-gpu offloads to on a machine without a GPU. Installed when
# missing and apt-get can run.
LAVAPIPE_ICD ?= /usr/share/vulkan/icd.d/lvp_icd.$(shell uname -m).json
lavapipe:
	@if [ -f "$(LAVAPIPE_ICD)" ]; then exit 0; fi; \
	./scripts/apt-install.sh lavapipe mesa-vulkan-drivers

# The offload tests (build tag gpu): greedy outputs, embeddings and
# cancellation with every layer on GPU_DEVICE, through the Vulkan
# library above. By default the device is lavapipe (ggml-vulkan skips a
# CPU-type device unless GGML_VK_VISIBLE_DEVICES names it); on a machine
# with a GPU: make test-gpu GPU_DEVICE=Vulkan0 GGML_VK_VISIBLE_DEVICES=
# (or GPU_DEVICE=CUDA0, which builds and loads the CUDA library instead:
# scripts/gpu-cuda.sh). The tests fail, not skip, when the device is not
# found.
GPU_DEVICE  ?= Vulkan0
GPU_BACKEND ?= $(if $(filter CUDA%,$(GPU_DEVICE)),cuda,vulkan)
GGML_VK_VISIBLE_DEVICES ?= 0
test-gpu: build $(GPU_BACKEND) $(if $(filter vulkan,$(GPU_BACKEND)),lavapipe)
	$(GO) vet -tags gpu $(VETFLAGS) ./llama/ ./engine/ ./e2e/
	$(if $(GGML_VK_VISIBLE_DEVICES),GGML_VK_VISIBLE_DEVICES="$(GGML_VK_VISIBLE_DEVICES)",env -u GGML_VK_VISIBLE_DEVICES) \
		CORRAL_BACKENDS="$(abspath $(BACKENDS_DIR))" CORRAL_TEST_DEVICE="$(GPU_DEVICE)" CORRAL_BIN="$(CORRAL_BIN)" \
		$(GO) test -tags gpu $(TESTFLAGS) -run GPU ./llama/ ./engine/ ./e2e/

# Release binaries for other machines, in dist/: linux/amd64 and
# linux/arm64, each with all of ggml's CPU variants for its architecture
# (the best the machine runs is loaded at start: AVX2 on Zen 3, AVX-512 on
# Zen 4 and Ice Lake, dot product, SVE or I8MM on arm64). The binding's
# own code is built for x86-64-v2 (SSE4.2, POPCNT: every x86-64 server
# since 2009) and ARMv8.0-A. libstdc++ and libgcc are linked in; they need
# glibc 2.36 or later (Debian 12, Ubuntu 22.10, RHEL 10). The arm64 one is
# cross-compiled with Debian's aarch64 compilers (installed when missing,
# as for the browser).
DIST_AMD64  := -march=x86-64-v2 -mtune=generic
DIST_ARM64  := -march=armv8-a
AARCH64_CC  := aarch64-linux-gnu-gcc
AARCH64_CXX := aarch64-linux-gnu-g++
DIST_LDFLAGS := -s -w -extldflags "-static-libstdc++ -static-libgcc"
dist: cross-toolchain
	@mkdir -p dist
	GOARCH=amd64 ./scripts/llama-cpp.sh build
	CGO_CFLAGS="-O3 $(DIST_AMD64)" CGO_CXXFLAGS="-O3 $(DIST_AMD64)" GOOS=linux GOARCH=amd64 \
		$(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o dist/corral-linux-amd64 ./cmd/corral
	GOARCH=arm64 ./scripts/llama-cpp.sh build
	CGO_CFLAGS="-O3 $(DIST_ARM64)" CGO_CXXFLAGS="-O3 $(DIST_ARM64)" GOOS=linux GOARCH=arm64 \
		CC=$(AARCH64_CC) CXX=$(AARCH64_CXX) \
		$(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o dist/corral-linux-arm64 ./cmd/corral
	@ls -l dist

# Builds CI's own machine cannot run, linked and thrown away (.ci/run):
# linux/arm64 and linux/amd64 as make dist builds them (the arm64
# libraries compiled once, cached). arm64's are only linked, so they are
# compiled without optimisation (LINK_CHECK: the core in 233 s on 2 cores
# cold, against 471 s at -O3 on a busier machine), and of its CPU
# variants, modules the binary embeds but does not link, only the
# baseline: one proves the embedding (19 s at -O0).
check-builds: cross-toolchain
	GOARCH=arm64 CPU_VARIANTS=armv8.0_1 LINK_CHECK=1 ./scripts/llama-cpp.sh build
	CGO_CFLAGS="-O3 $(DIST_ARM64)" CGO_CXXFLAGS="-O3 $(DIST_ARM64)" GOOS=linux GOARCH=arm64 \
		CC=$(AARCH64_CC) CXX=$(AARCH64_CXX) $(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o /dev/null ./cmd/corral
	GOARCH=amd64 ./scripts/llama-cpp.sh build
	CGO_CFLAGS="-O3 $(DIST_AMD64)" CGO_CXXFLAGS="-O3 $(DIST_AMD64)" GOOS=linux GOARCH=amd64 \
		$(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o /dev/null ./cmd/corral
	@echo "check-builds: linux/arm64 and linux/amd64 (dist) link"

# Debian's aarch64 cross compilers, installed when missing and apt-get can
# run (as root, or through sudo without a password).
cross-toolchain:
	@if command -v $(AARCH64_CXX) >/dev/null 2>&1; then exit 0; fi; \
	./scripts/apt-install.sh cross-toolchain gcc-aarch64-linux-gnu g++-aarch64-linux-gnu

# Serve $(MODEL) (default: the shared test model; see README for others).
run: build
	./scripts/run.sh "$(MODEL)" $(ARGS)

bench: llama
	$(GO) test -run '^$$' -bench . -benchtime 3x ./engine/

vet: llama
	$(GO) vet ./...

clean:
	rm -rf bin dist llama/lib llama/zllama_*.go
