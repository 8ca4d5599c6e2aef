#!/usr/bin/env bash
# gpu-cuda.sh: the checks a machine with an NVIDIA GPU runs in one go,
# unattended (meant for about 10 minutes of a 16-core machine with one
# GPU, nvcc on the PATH, and the clone with ../shared beside it):
#
#   1. make cuda: ggml's CUDA backend from the pinned llama.cpp release
#      (scripts/backend.sh), for this machine's GPUs only
#      (CUDA_ARCHITECTURES=native), as bin/libggml-cuda.so;
#   2. make test-gpu GPU_DEVICE=CUDA0: the offload tests on the GPU;
#   3. a synthetic 8B-shaped model (Llama 3 8B's shape, Q8_0, 8.5 GB) and
#      scripts/versus.sh's short and shared rows at c = 1 to 64, every
#      layer on the GPU, against llama-server built from the same tarball.
#      llama-server is built for the CPU with GGML_BACKEND_DL (a few
#      minutes) and loads the same libggml-cuda.so from its folder: one
#      CUDA compile serves both, so both run the same kernels.
#
# usage: scripts/gpu-cuda.sh [OUT]   (OUT: reports and logs, default a
#        temporary folder; its summary.txt has the versus table)
# env:   STEPS   which of "cuda test versus" to run (default: all)
#        ROUNDS  versus rounds (default 1), N requests per level (default 32)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}
steps=${STEPS:-cuda test versus}
mkdir -p "$out"
want() { [[ " $steps " == *" $1 "* ]]; }
log() { echo "gpu-cuda: $(date +%T) $*" | tee -a "$out/summary.txt" >&2; }
command -v nvcc >/dev/null || { log "nvcc not found"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/summary.txt"

start=$(date +%s)
if want cuda; then
	log "make cuda"
	make build cuda >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
	log "built ($(( $(date +%s) - start )) s)"
fi
if want test; then
	log "make test-gpu GPU_DEVICE=CUDA0"
	if make test-gpu GPU_DEVICE=CUDA0 GGML_VK_VISIBLE_DEVICES= >"$out/test-gpu.log" 2>&1; then
		log "test-gpu passed"
	else
		log "test-gpu FAILED (see test-gpu.log)"
		tail -40 "$out/test-gpu.log"
	fi
fi
if want versus; then
	peer="$out/llama-server"
	log "llama-server b10573 with GGML_BACKEND_DL (CPU), loading bin/libggml-cuda.so"
	src=$(./scripts/llama-cpp.sh src)
	cmake -S "$src" -B "$peer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_BACKEND_DL=ON -DBUILD_SHARED_LIBS=ON \
		-DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$out/peer.log" 2>&1
	cmake --build "$peer" -j"$(nproc)" --target llama-server ggml-cpu >>"$out/peer.log" 2>&1 || { tail -40 "$out/peer.log"; exit 1; }
	cp bin/libggml-cuda.so "$peer/bin/"
	model=${TMPDIR:-/tmp}/corral-synth-8b.gguf
	[ -f "$model" ] || ./bin/corral synth --shape embd=4096,layers=32,heads=32,kv=8,ff=14336,vocab=128256,ctx=8192,type=q8_0 -o "$model"
	log "versus (short and shared, c = 1..64, -ngl 99)"
	MODEL=$model THREADS=$(nproc) NP=64 N=${N:-32} CONC=1,2,4,8,16,32,64 ONLY="short shared" SERVE_ARGS="-ngl 99" \
		OUT="$out/versus" ./scripts/versus.sh "$peer/bin/llama-server" "${ROUNDS:-1}" 2>"$out/versus.log" | tee -a "$out/summary.txt"
fi
log "done in $(( $(date +%s) - start )) s; reports in $out"
