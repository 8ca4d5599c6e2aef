# corral — build, test, run, bench.
#
# cgo flags: llama.cpp is compiled with -O3 -march=native by default. For a
# binary that runs on other x86-64 machines: make build NATIVE=  (or set
# CGO_CFLAGS/CGO_CXXFLAGS yourself, e.g. "-O3 -mavx2 -mfma -mf16c"), or
# make dist for the release binaries. A binary started on a CPU that lacks
# what it was built for stops and names what is missing (llama/cpu.c).
NATIVE      ?= -march=native
CGO_FLAGS   := -O3 $(NATIVE)
export CGO_ENABLED  := 1
export CGO_CFLAGS   := $(CGO_FLAGS)
export CGO_CXXFLAGS := $(CGO_FLAGS)

# LLAMA=upstream links the pinned llama.cpp release (llama/upstream/release)
# built with its own CMake by scripts/llama-cpp.sh (make llama) instead of
# the ollama module's copy: the build tag upstream, and the libraries'
# code-generation flags from NATIVE. The switch of issue 32 in progress:
# the default stays on the module until every test passes on the release.
LLAMA       ?= ollama
ifeq ($(LLAMA),upstream)
export GOFLAGS := $(strip $(GOFLAGS) -tags=upstream)
LLAMA_DEP   := llama
else
LLAMA_DEP   := $(HEADERS)
endif

GO          ?= go
SHARED      ?= ../shared
MODEL       ?= $(firstword $(wildcard $(SHARED)/models/tinystories-656k-q8_0.gguf))
ARGS        ?=
TESTFLAGS   ?= -race -count=1 -timeout 60m
CORRAL_BIN  := $(abspath bin/corral)
HEADERS     := llama/include/llama.h llama/include/llama-grammar.h

.PHONY: all build llama test picker run bench headers vet clean browser manifests dist check-builds cross-toolchain vulkan lavapipe test-gpu zmq

all: build

# Copy llama.h, the ggml headers and llama-grammar.h (the grammar's state,
# which the binding reads to find the text a grammar forces) from the
# pinned ollama module into the binding package (git-ignored), so that
# plain `go build`/`go test` and editors see them too.
headers: $(HEADERS)
# The module's folder is looked up in the recipe, after the download: a
# make-time $(shell ...) would run before it and expand to nothing on a
# machine whose module cache is empty.
$(HEADERS): go.mod
	@set -eu; \
	$(GO) mod download github.com/ollama/ollama; \
	dir=$$($(GO) list -m -f '{{.Dir}}' github.com/ollama/ollama); \
	if [ -z "$$dir" ] || [ ! -f "$$dir/llama/llama.cpp/include/llama.h" ]; then \
		echo "headers: github.com/ollama/ollama not found in the module cache (dir='$$dir')" >&2; exit 1; \
	fi; \
	echo "headers: copying llama.h, llama-grammar.h and ggml headers from $$dir"; \
	mkdir -p llama/include; \
	cp "$$dir"/llama/llama.cpp/include/*.h "$$dir"/ml/backend/ggml/ggml/include/*.h \
		"$$dir"/llama/llama.cpp/src/llama-grammar.h llama/include/; \
	chmod u+w llama/include/*.h; \
	touch $(HEADERS)

build: $(LLAMA_DEP)
	$(GO) build -o bin/corral ./cmd/corral

# llama.cpp's static libraries for this machine (llama/lib, llama/zllama_*.go):
# cached in ~/.cache/corral/llama.cpp, so only the first build takes long.
llama:
	LLAMA_CFLAGS="$(NATIVE)" ./scripts/llama-cpp.sh build

# The browser test (server/browser_test.go) drives a headless Chromium,
# Debian's chromium package. When it is missing and apt-get can run (as
# root, or through sudo without a password), install it; otherwise say so
# and go on: the test itself then fails, naming what is missing (it never
# skips). CORRAL_CHROMIUM points the test at another browser.
CHROMIUM    ?= /usr/bin/chromium
browser:
	@if [ -x "$(CHROMIUM)" ] || [ -n "$${CORRAL_CHROMIUM:-}" ]; then exit 0; fi; \
	./scripts/apt-install.sh --optional browser chromium

# The end-to-end tests (bench, supervisor, server) run bin/corral, built
# once here with the flags above, instead of each compiling its own.
# CORRAL_BACKENDS= (set, empty): they compute on the CPU even where a GPU
# backend library lies beside bin/corral (make vulkan); make test-gpu
# tests the offload.
test: build browser manifests
	$(GO) vet ./...
	CORRAL_BACKENDS= CORRAL_BIN="$(CORRAL_BIN)" $(GO) test $(TESTFLAGS) ./...
	$(MAKE) picker

# deploy/picker, its own module (the endpoint picker's Kubernetes
# dependency tree stays out of corral's): the manifests against the
# picker's own flags and configuration loader, and requests routed by the
# real picker among corral processes.
picker: build zmq
	cd deploy/picker && $(GO) vet ./...
	cd deploy/picker && CORRAL_BACKENDS= CORRAL_BIN="$(CORRAL_BIN)" $(GO) test $(TESTFLAGS) ./...

# libzmq, which llm-d's KV-event subscriber (deploy/picker's
# TestKVEventsIndex) is built on: installed when missing.
zmq:
	@if pkg-config --exists libzmq 2>/dev/null; then exit 0; fi; \
	./scripts/apt-install.sh zmq libzmq3-dev pkg-config

# ggml's Vulkan backend, built from the pinned module's sources as a
# library corral loads at run time (scripts/backend.sh, llama/backend.go):
# bin/libggml-vulkan.so, beside bin/corral, where corral looks by
# default. Its build tools are installed when missing (as for the
# browser); the library is cached outside the clone
# (~/.cache/corral/backends, keyed by the module version), so only the
# first build takes long.
BACKENDS_DIR ?= bin
vulkan:
	GO=$(GO) ./scripts/backend.sh vulkan $(BACKENDS_DIR)

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
# (or CUDA0 with a CUDA library). The tests fail, not skip, when the
# device is not found.
GPU_DEVICE  ?= Vulkan0
GGML_VK_VISIBLE_DEVICES ?= 0
test-gpu: build vulkan lavapipe
	$(GO) vet -tags gpu ./llama/ ./engine/ ./server/
	$(if $(GGML_VK_VISIBLE_DEVICES),GGML_VK_VISIBLE_DEVICES="$(GGML_VK_VISIBLE_DEVICES)",env -u GGML_VK_VISIBLE_DEVICES) \
		CORRAL_BACKENDS="$(abspath $(BACKENDS_DIR))" CORRAL_TEST_DEVICE="$(GPU_DEVICE)" CORRAL_BIN="$(CORRAL_BIN)" \
		$(GO) test -tags gpu $(TESTFLAGS) -run GPU ./llama/ ./engine/ ./server/

# The Kubernetes manifests against their schemas, offline: Kubernetes
# 1.30's, built into the pinned kubectl-validate, and the CRD schemas in
# deploy/kubernetes/crds. (cmd/corral's tests check the rest: the command
# line, the probes, the picker's metrics.)
KUBECTL_VALIDATE := sigs.k8s.io/kubectl-validate@v0.0.4
manifests:
	$(GO) run $(KUBECTL_VALIDATE) --version 1.30 --local-crds deploy/kubernetes/crds \
		deploy/kubernetes/corral.yaml deploy/kubernetes/inferencepool.yaml

# Release binaries for other machines, in dist/: linux/amd64 for
# x86-64-v3 (Haswell, Zen 1 and later: AVX2, FMA, F16C) and linux/arm64 for
# ARMv8.2-A with dot product and FP16 (Graviton 2+, Ampere Altra, Neoverse,
# Cortex-A76+). libstdc++ and libgcc are linked in; they need glibc 2.36 or
# later (Debian 12, Ubuntu 22.10, RHEL 10). The arm64 one is cross-compiled
# with Debian's aarch64 compilers (installed when missing, as for the
# browser).
DIST_AMD64  := -march=x86-64-v3 -mtune=generic
DIST_ARM64  := -march=armv8.2-a+dotprod+fp16
AARCH64_CC  := aarch64-linux-gnu-gcc
AARCH64_CXX := aarch64-linux-gnu-g++
DIST_LDFLAGS := -s -w -extldflags "-static-libstdc++ -static-libgcc"
dist: $(HEADERS) cross-toolchain
	@mkdir -p dist
	CGO_CFLAGS="-O3 $(DIST_AMD64)" CGO_CXXFLAGS="-O3 $(DIST_AMD64)" GOOS=linux GOARCH=amd64 \
		$(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o dist/corral-linux-amd64 ./cmd/corral
	CGO_CFLAGS="-O3 $(DIST_ARM64)" CGO_CXXFLAGS="-O3 $(DIST_ARM64)" GOOS=linux GOARCH=arm64 \
		CC=$(AARCH64_CC) CXX=$(AARCH64_CXX) \
		$(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o dist/corral-linux-arm64 ./cmd/corral
	@ls -l dist

# Builds CI's own machine cannot run, linked and thrown away (.ci/run):
# an AMX target (ggml-cpu asks for AMX kernels the module does not
# compile; llama/amx.cpp answers), linux/arm64 exactly as make dist builds
# it (so either one fills the build cache for the other), and
# the portable x86-64 baseline (NATIVE=). Each flag set compiles llama.cpp
# once; later runs take it from Go's build cache.
check-builds: $(HEADERS) cross-toolchain
	CGO_CFLAGS="-O3 -march=sapphirerapids" CGO_CXXFLAGS="-O3 -march=sapphirerapids" \
		$(GO) build -o /dev/null ./cmd/corral
	CGO_CFLAGS="-O3 $(DIST_ARM64)" CGO_CXXFLAGS="-O3 $(DIST_ARM64)" GOOS=linux GOARCH=arm64 \
		CC=$(AARCH64_CC) CXX=$(AARCH64_CXX) $(GO) build -trimpath -ldflags='$(DIST_LDFLAGS)' -o /dev/null ./cmd/corral
	CGO_CFLAGS="-O3" CGO_CXXFLAGS="-O3" $(GO) build -o /dev/null ./cmd/corral
	@echo "check-builds: sapphirerapids, linux/arm64 and portable x86-64 link"

# Debian's aarch64 cross compilers, installed when missing and apt-get can
# run (as root, or through sudo without a password).
cross-toolchain:
	@if command -v $(AARCH64_CXX) >/dev/null 2>&1; then exit 0; fi; \
	./scripts/apt-install.sh cross-toolchain gcc-aarch64-linux-gnu g++-aarch64-linux-gnu

# Serve $(MODEL) (default: the shared test model; see README for others).
run: build
	./scripts/run.sh "$(MODEL)" $(ARGS)

bench: $(HEADERS)
	$(GO) test -run '^$$' -bench . -benchtime 3x ./engine/

vet: $(HEADERS)
	$(GO) vet ./...

clean:
	rm -rf bin dist llama/include
