#!/usr/bin/env bash
# backend.sh: build one of ggml's GPU backends from the pinned llama.cpp
# release (the source scripts/llama-cpp.sh verifies) with llama.cpp's own
# CMake, as a library corral loads at run time (llama/backend.go):
#
#   scripts/backend.sh vulkan|cuda OUTDIR   writes OUTDIR/libggml-<name>.so
#
# The library is what ggml's CMake makes with GGML_BACKEND_DL (a MODULE
# exporting ggml_backend_init and ggml_backend_score), with its need of
# libggml-base.so removed (patchelf): its references to ggml-base resolve,
# when corral dlopens it, to the one copy of ggml linked into the corral
# binary, which exports its symbols (-Wl,--export-dynamic in
# llama/llama.go). One ggml, one backend registry, one log callback; the
# library works only with a binary built from the same release, which the
# cache key below includes.
#
# Builds are cached outside the clone, in $CORRAL_BACKEND_CACHE (default
# ~/.cache/corral/backends), keyed by the release, the recipe number below,
# the compiler and the backend's own compiler (glslc, nvcc): a later build
# (CI's next run, another worktree) copies the library in seconds.
#
# Missing build tools are installed with apt-get when it can run (as root,
# or through sudo without a password), as the Makefile's browser target
# does: for Vulkan g++, glslc, the Vulkan headers and loader, SPIR-V
# headers, cmake and patchelf. CUDA needs nvcc on the PATH (Debian has
# none here); CUDA_ARCHITECTURES (default: native, the GPUs of the machine
# that builds) says which GPUs to compile for.
set -euo pipefail

name="${1:?usage: scripts/backend.sh vulkan|cuda OUTDIR}"
out="${2:?usage: scripts/backend.sh vulkan|cuda OUTDIR}"
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/lib.sh"
jobs="${JOBS:-$(nproc)}"
say() { echo "backend: $*" >&2; }
die() { say "$*"; exit 1; }

need=()
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v patchelf >/dev/null 2>&1 || need+=(patchelf)
opts=(-DGGML_BACKEND_DL=ON -DBUILD_SHARED_LIBS=ON -DGGML_CPU=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DCMAKE_BUILD_TYPE=Release)
case "$name" in
vulkan)
	command -v glslc >/dev/null 2>&1 || need+=(glslc)
	if [ ! -f /usr/include/vulkan/vulkan.hpp ] || [ "$(g++ -print-file-name=libvulkan.so 2>/dev/null)" = libvulkan.so ]; then
		need+=(libvulkan-dev)
	fi
	[ -f /usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake ] || need+=(spirv-headers)
	opts+=(-DGGML_VULKAN=ON)
	tool() { glslc --version | sed -n 1p; }
	;;
cuda)
	command -v nvcc >/dev/null 2>&1 || die "cuda: nvcc not found (install the CUDA toolkit and put its bin/ on the PATH)"
	opts+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-native}")
	tool() { nvcc --version | tail -1; echo "${CUDA_ARCHITECTURES:-native}"; }
	;;
*) die "$name: only vulkan and cuda are built here" ;;
esac
if [ ${#need[@]} -gt 0 ]; then "$here/scripts/apt-install.sh" backend "${need[@]}"; fi

read -r tag commit _ <"$here/llama/upstream/release"
# recipe: bump it when the build steps below change what they produce.
recipe=2
key=$( {
	echo "$tag $commit $name recipe $recipe"
	g++ --version | sed -n 1p
	tool
	printf '%s\n' "${opts[@]}"
	cat "$here/llama/upstream/backend/CMakeLists.txt"
} | sha256sum | cut -c1-16)
cache="${CORRAL_BACKEND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/corral/backends}/$name-$tag-$key"
lib="libggml-$name.so"
mkdir -p "$out"
# install copies the cached library to $out through a temporary file: a
# running corral that has the old one mapped keeps it intact.
install() {
	cp -f "$cache/$lib" "$out/.$lib.tmp"
	mv -f "$out/.$lib.tmp" "$out/$lib"
}
if [ -f "$cache/$lib" ]; then
	install
	say "$out/$lib (cached: $cache)"
	exit 0
fi

src=$("$here/scripts/llama-cpp.sh" src)
start=$(date +%s)
build="$cache.build"
rm -rf "$build"
mkdir -p "$build"
say "building $lib from llama.cpp $tag in $build ($jobs jobs)"

if [ "$name" = vulkan ]; then
	# Vulkan headers older than VK_EXT_layer_settings (Debian 12 has
	# 1.3.239) lack three types ggml-vulkan.cpp names when it creates its
	# instance (their structure is chained only with the validation
	# layer): declared here with the extension's layouts, after the same
	# prologue as ggml-vulkan.cpp's, so that vulkan.hpp is included as it
	# includes it.
	cat >"$build/corral-vk-compat.h" <<'EOF'
#include <vulkan/vulkan_core.h>
#define VULKAN_HPP_DISPATCH_LOADER_DYNAMIC 1
#if VK_HEADER_VERSION >= 301
namespace vk::detail { class DispatchLoaderDynamic; }
using vk::detail::DispatchLoaderDynamic;
#else
namespace vk { class DispatchLoaderDynamic; }
using vk::DispatchLoaderDynamic;
#endif
DispatchLoaderDynamic & ggml_vk_default_dispatcher();
#define VULKAN_HPP_DEFAULT_DISPATCHER ggml_vk_default_dispatcher()
#include <vulkan/vulkan.hpp>
#ifndef VK_EXT_layer_settings
#include <cstdint>
#include <vector>
namespace vk {
// The layouts of VkLayerSettingTypeEXT, VkLayerSettingEXT and
// VkLayerSettingsCreateInfoEXT (sType 1000496000).
enum class LayerSettingTypeEXT : int32_t { eBool32 = 0, eInt32 = 1, eInt64 = 2, eUint32 = 3, eUint64 = 4, eFloat32 = 5, eFloat64 = 6, eString = 7 };
struct LayerSettingEXT {
	const char * pLayerName;
	const char * pSettingName;
	LayerSettingTypeEXT type;
	uint32_t valueCount;
	const void * pValues;
};
struct LayerSettingsCreateInfoEXT {
	explicit LayerSettingsCreateInfoEXT(const std::vector<LayerSettingEXT> & s)
		: settingCount(uint32_t(s.size())), pSettings(s.data()) {}
	int32_t sType = 1000496000;
	const void * pNext = nullptr;
	uint32_t settingCount;
	const LayerSettingEXT * pSettings;
};
} // namespace vk
#endif
EOF
	opts+=(-DCORRAL_VK_COMPAT="$build/corral-vk-compat.h")
fi

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$here/llama/upstream/backend" -B "$build/cmake" "${gen[@]+"${gen[@]}"}" "${opts[@]}" \
	-DLLAMA_CPP_SRC="$src" >"$build/log" 2>&1 ||
	{ tail -30 "$build/log" >&2; die "cmake configure failed (log: $build/log)"; }
cmake --build "$build/cmake" -j"$jobs" --target "ggml-$name" >>"$build/log" 2>&1 ||
	{ tail -30 "$build/log" >&2; die "cmake build failed (log: $build/log)"; }
so=$(find "$build/cmake" -name "$lib" -type f | head -1)
[ -n "$so" ] || die "the build made no $lib (log: $build/log)"
ggml_module "$so"
cp "$so" "$cache.lib.tmp"
mkdir -p "$cache"
mv "$cache.lib.tmp" "$cache/$lib"
rm -rf "$build"
install
say "built $out/$lib in $(( $(date +%s) - start )) s (cached: $cache)"
