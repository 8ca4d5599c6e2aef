#!/usr/bin/env bash
# Build one of ggml's GPU backends from the pinned ollama module's sources
# as a loadable backend library (libggml-<name>.so), for corral to load at
# run time (llama/backend.go). Usage: scripts/backend.sh vulkan OUTDIR
#
# The library is what ggml's own CMake build makes with GGML_BACKEND_DL
# (a MODULE exporting ggml_backend_init and ggml_backend_score), but it is
# not linked against a libggml-base.so: its references to ggml-base and
# ggml-cpu stay undefined and resolve, when corral dlopens it, to the one
# copy of ggml compiled into the corral binary, which exports its symbols
# (-Wl,--export-dynamic in llama/llama.go). One ggml, one backend
# registry, one log callback; the library works only with a binary built
# from the same module version, which the cache key below includes.
#
# Builds are cached outside the clone, in $CORRAL_BACKEND_CACHE (default
# ~/.cache/corral/backends), keyed by the module version, the compiler,
# glslc and the recipe number below: a later build (CI's next run,
# another worktree) copies the library in seconds.
#
# Missing build tools (g++, glslc, the Vulkan headers and loader) are
# installed with apt-get when it can run (as root, or through sudo
# without a password), as the Makefile's browser target does.
set -euo pipefail

name="${1:?usage: scripts/backend.sh vulkan OUTDIR}"
out="${2:?usage: scripts/backend.sh vulkan OUTDIR}"
case "$name" in
vulkan) ;;
*) echo "backend: $name: only vulkan is built here (cuda, hip and metal need their toolchains)" >&2; exit 2 ;;
esac

GO="${GO:-go}"
jobs="${JOBS:-$(nproc)}"

# apt_install installs Debian packages when apt-get can run.
apt_install() {
	"$(dirname "$0")/apt-install.sh" backend "$@"
}

need=()
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v glslc >/dev/null 2>&1 || need+=(glslc)
if [ ! -f /usr/include/vulkan/vulkan.hpp ] || [ "$(g++ -print-file-name=libvulkan.so 2>/dev/null)" = libvulkan.so ]; then
	need+=(libvulkan-dev)
fi
if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi

$GO mod download github.com/ollama/ollama
mod=$($GO list -m -f '{{.Dir}}' github.com/ollama/ollama)
ver=$($GO list -m -f '{{.Version}}' github.com/ollama/ollama)
ggml="$mod/ml/backend/ggml/ggml"
src="$ggml/src/ggml-vulkan"
[ -f "$src/ggml-vulkan.cpp" ] || { echo "backend: $src/ggml-vulkan.cpp not found" >&2; exit 1; }

# recipe: bump it when the build steps below change what they produce.
recipe=1
key=$( { echo "$ver recipe $recipe"; g++ --version | sed -n 1p; glslc --version | sed -n 1p; } | sha256sum | cut -c1-16)
cache="${CORRAL_BACKEND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/corral/backends}/$name-$ver-$key"
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
	echo "backend: $out/$lib (cached: $cache)"
	exit 0
fi

start=$(date +%s)
build="$cache.build"
rm -rf "$build"
mkdir -p "$build/spv" "$build/gen" "$build/obj"
echo "backend: building $lib from $src in $build ($jobs jobs)"

# The shader extensions this glslc compiles (ggml's CMake asks the same
# question with its feature-test shaders, which the module does not ship).
defs=()
for ext in GL_KHR_cooperative_matrix:COOPMAT GL_NV_cooperative_matrix2:COOPMAT2 \
	GL_EXT_integer_dot_product:INTEGER_DOT GL_EXT_bfloat16:BFLOAT16; do
	printf '#version 460\n#extension %s : require\nvoid main() {}\n' "${ext%%:*}" >"$build/t.comp"
	if glslc -o /dev/null -fshader-stage=compute --target-env=vulkan1.3 "$build/t.comp" >/dev/null 2>&1; then
		defs+=("-DGGML_VULKAN_${ext##*:}_GLSLC_SUPPORT")
	fi
done
echo "backend: glslc extensions: ${defs[*]:-none}"

# The shader generator (a host program), then the SPIR-V of every shader
# variant embedded in one C++ file per shader.
g++ -O2 -std=c++17 -pthread "${defs[@]}" "$src/vulkan-shaders/vulkan-shaders-gen.cpp" -o "$build/vulkan-shaders-gen"
hpp="$build/gen/ggml-vulkan-shaders.hpp"
"$build/vulkan-shaders-gen" --output-dir "$build/spv" --target-hpp "$hpp"
export build hpp
ls "$src"/vulkan-shaders/*.comp | xargs -P "$jobs" -I{} sh -c '
	f=$(basename "{}")
	"$build/vulkan-shaders-gen" --glslc glslc --source "{}" --output-dir "$build/spv" \
		--target-hpp "$hpp" --target-cpp "$build/gen/$f.cpp" >"$build/gen/$f.log" 2>&1 \
		|| { echo "backend: shader $f failed:" >&2; tail -20 "$build/gen/$f.log" >&2; exit 255; }'
echo "backend: shaders generated in $(( $(date +%s) - start ))s"

# Vulkan headers older than VK_EXT_layer_settings (Debian 12 has 1.3.239)
# lack three types ggml-vulkan.cpp names when it creates its instance
# (their structure is chained only with GGML_VULKAN_VALIDATE's layer):
# a header force-included before it declares them with the extension's
# layouts, after ggml's own prologue, so that vulkan.hpp is included as
# ggml-vulkan.cpp includes it.
cat >"$build/gen/corral-vk-compat.h" <<'EOF'
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

# Position-independent objects; ggml-base's symbols stay undefined.
cflags=(-O2 -fPIC -std=c++17 -DNDEBUG -DGGML_BACKEND_DL -DGGML_BACKEND_BUILD -DGGML_BACKEND_SHARED -DGGML_SHARED
	-DGGML_VERSION=0x0 -DGGML_COMMIT=0x0 "${defs[@]}" -I"$ggml/include" -I"$ggml/src" -I"$build/gen")
export cflags_s="${cflags[*]}"
{ echo "$src/ggml-vulkan.cpp"; ls "$build"/gen/*.comp.cpp; } | xargs -P "$jobs" -I{} sh -c '
	f="{}"
	extra=""
	case "$f" in */ggml-vulkan.cpp) extra="-include $build/gen/corral-vk-compat.h" ;; esac
	g++ $cflags_s $extra -c "$f" -o "$build/obj/$(basename "$f").o" || exit 255'
g++ -shared -o "$build/$lib" -Wl,-soname,"$lib" -Wl,--as-needed "$build"/obj/*.o -lvulkan -pthread
mv "$build/$lib" "$cache.lib.tmp"
mkdir -p "$cache"
mv "$cache.lib.tmp" "$cache/$lib"
rm -rf "$build"
install
echo "backend: built $out/$lib in $(( $(date +%s) - start ))s (cached: $cache)"
