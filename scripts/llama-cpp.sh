#!/usr/bin/env bash
# llama-cpp.sh: build the pinned llama.cpp release with its own CMake and
# install it for the binding (package llama):
#
#   llama/lib/include/     llama.h, the ggml headers, llama-grammar.h and
#                          corral-arch.h
#   llama/lib/GOOS_GOARCH/ libllama.a, libggml.a, libggml-base.a and
#                          libcorral-common.a (llama/upstream/CMakeLists.txt),
#                          static, compiled for the architecture's baseline;
#   llama/lib/GOOS_GOARCH/cpu/libggml-cpu-VARIANT.so.gz
#                          ggml's CPU backend once per instruction-set
#                          variant (GGML_CPU_ALL_VARIANTS: x64 ... zen4 on
#                          x86-64, armv8.0_1 ... on arm64), each a module the
#                          binary embeds and loads the best of at start
#                          (llama/cpuvariant.go);
#   llama/zllama_GOOS_GOARCH.go  the build's release and key, and the
#                          go:embed of the modules (Go rebuilds the binding
#                          when it changes)
#
# Usage: scripts/llama-cpp.sh [verify|build|src|dir]
#   build   (default) the libraries for $GOOS/$GOARCH (default: this machine's)
#   verify  check the source against the committed hash list and exit
#   src     print the folder of the verified source tree
#   dir     print the cache folders of the build's two parts, core and cpu
#           (built or not)
#
# The release is pinned in llama/upstream/release (tag, commit, sha256 of
# the shared tarball); llama/upstream/<tag>.sha256 lists the sha256 of every
# file the build can compile. The source is, in order:
#   1. $LLAMA_CPP_SRC, an unpacked tree;
#   2. $LLAMA_CPP_TARBALL (default ../shared/llama.cpp/llama.cpp-<tag>.tar.gz
#      beside the clone), its sha256 checked;
#   3. the release archive of the tag from upstream (a machine with internet
#      access).
# Every file of the list must match, whatever the source: a mismatch is an
# error that names the files that differ. Nothing falls back to another
# version.
#
# Builds are cached outside the clone, in $CORRAL_LLAMA_CACHE (default
# ~/.cache/corral/llama.cpp), keyed by the release, the compilers and the
# options: a second build (another clone, CI's next run) only copies. The
# CPU variants are cached apart from the core.
#
# Environment:
#   GOOS, GOARCH   the target (linux/amd64 and linux/arm64)
#   CC, CXX        compilers (default: gcc/g++, or aarch64-linux-gnu-* for a
#                  linux/arm64 target on another machine)
#   CPU_VARIANTS   the CPU variants to build, space-separated (default: all
#                  of ggml's for the architecture that the compiler can
#                  build; e.g. "x64 haswell" for a quicker first build)
#   JOBS           parallel jobs (default: nproc)
#   LINK_CHECK     1: compile without optimisation (-O0), for a build
#                  that is only linked, never run (make check-builds):
#                  a third of the compile time
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/lib.sh"
read -r tag commit tarsum < "$here/llama/upstream/release"
list="$here/llama/upstream/$tag.sha256"
cache="${CORRAL_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/corral/llama.cpp}"
cmd="${1:-build}"

say() { echo "llama.cpp: $*" >&2; }
die() { say "$*"; exit 1; }

# verify_tree DIR: every listed file of DIR has its listed hash.
verify_tree() {
	local dir=$1 bad
	[ -f "$dir/CMakeLists.txt" ] || die "$dir is not a llama.cpp source tree (no CMakeLists.txt)"
	bad=$(cd "$dir" && sha256sum --quiet --check "$list" 2>/dev/null | sed -n 's/: FAILED.*//p' | head -20 || true)
	if [ -n "$bad" ]; then
		local n found
		n=$(cd "$dir" && sha256sum --quiet --check "$list" 2>/dev/null | grep -c FAILED || true)
		found=$(sed -n 's/.*LLAMA_BUILD_NUMBER[^0-9]*\([0-9][0-9]*\).*/b\1/p' "$dir/cmake/build-info.cmake" 2>/dev/null | head -1)
		die "$dir is not llama.cpp $tag ($commit): $n files differ from llama/upstream/$tag.sha256${found:+ (the tree names build $found)}, first: $(echo "$bad" | tr '\n' ' ')"
	fi
}

# source_tree prints a verified source folder, unpacking or downloading it
# into the cache first when needed.
source_tree() {
	if [ -n "${LLAMA_CPP_SRC:-}" ]; then
		verify_tree "$LLAMA_CPP_SRC"
		echo "$LLAMA_CPP_SRC"
		return
	fi
	local src="$cache/src-$tag"
	if [ -f "$src/.verified" ]; then
		echo "$src"
		return
	fi
	local tarball="${LLAMA_CPP_TARBALL:-$here/../shared/llama.cpp/llama.cpp-$tag.tar.gz}"
	mkdir -p "$cache"
	rm -rf "$src.tmp"
	mkdir -p "$src.tmp"
	if [ -f "$tarball" ]; then
		local sum
		sum=$(sha256sum "$tarball" | cut -d' ' -f1)
		[ "$sum" = "$tarsum" ] || die "$tarball has sha256 $sum, not $tarsum (llama.cpp $tag): another release or a damaged file"
		say "unpacking $tarball"
		tar -xzf "$tarball" -C "$src.tmp" --strip-components=1
	else
		local url="https://github.com/ggml-org/llama.cpp/archive/refs/tags/$tag.tar.gz"
		say "$tarball not found; downloading $url"
		command -v curl >/dev/null || die "no source: set LLAMA_CPP_SRC or LLAMA_CPP_TARBALL (curl is missing for a download)"
		curl -fsSL --retry 3 "$url" | tar -xz -C "$src.tmp" --strip-components=1 ||
			die "downloading $url failed: set LLAMA_CPP_SRC (an unpacked llama.cpp $tag) or LLAMA_CPP_TARBALL"
	fi
	verify_tree "$src.tmp"
	touch "$src.tmp/.verified"
	rm -rf "$src"
	mv "$src.tmp" "$src"
	echo "$src"
}

case "$cmd" in
verify)
	# source_tree verifies what it returns (an assignment, so that its
	# failure stops here).
	src=$(source_tree)
	say "source verified: $tag ($commit) in $src"
	exit 0
	;;
src) source_tree; exit 0 ;;
build | dir) ;;
*) die "usage: scripts/llama-cpp.sh [verify|build|src|dir]" ;;
esac

goos=${GOOS:-$(go env GOOS)}
goarch=${GOARCH:-$(go env GOARCH)}
hostarch=$(go env GOHOSTARCH)
[ "$goos" = linux ] || die "GOOS=$goos: only linux builds are set up"
cmake_args=()
if [ "$goarch" != "$hostarch" ]; then
	case "$goarch" in
	arm64)
		CC=${CC:-aarch64-linux-gnu-gcc}
		CXX=${CXX:-aarch64-linux-gnu-g++}
		cmake_args+=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64)
		;;
	amd64)
		CC=${CC:-x86_64-linux-gnu-gcc}
		CXX=${CXX:-x86_64-linux-gnu-g++}
		cmake_args+=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=x86_64)
		;;
	*) die "GOARCH=$goarch: only amd64 and arm64 are set up" ;;
	esac
else
	CC=${CC:-gcc}
	CXX=${CXX:-g++}
fi
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v patchelf >/dev/null || need+=(patchelf)
if [ ${#need[@]} -gt 0 ]; then "$here/scripts/apt-install.sh" llama.cpp "${need[@]}"; fi
command -v "$CXX" >/dev/null || die "$CXX not found"

# recipe: bump when the steps below change what they produce (the
# options, llama/upstream/*/CMakeLists.txt and corral's own sources in
# llama/upstream are part of the keys).
recipe=3
common=(
	-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF
	-DCMAKE_C_FLAGS= -DCMAKE_CXX_FLAGS=
)
if [ "${LINK_CHECK:-}" = 1 ]; then
	common=(
		-DCMAKE_BUILD_TYPE=None -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF
		-DCMAKE_C_FLAGS=-O0 -DCMAKE_CXX_FLAGS=-O0
	)
fi
# The core: static libraries without a CPU backend of their own (GGML_CPU
# off: ggml's registry then registers none), compiled for the
# architecture's baseline (the compiler's default: x86-64, armv8-a).
# CMAKE_OPTIMIZE_DEPENDENCIES: a static library's target then does not wait
# for the libraries it links.
core_opts=("${common[@]}"
	-DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DGGML_CPU=OFF
	-DLLAMA_OPENSSL=OFF -DCMAKE_OPTIMIZE_DEPENDENCIES=ON)
# The kernels: ggml's CPU backend in each of its variants, as modules
# (GGML_BACKEND_DL) built from llama/upstream/backend (ggml alone).
cpu_opts=("${common[@]}" -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON)

partkey() { # partkey NAME OPTS...: the cache key of a part
	local name=$1
	shift
	{
		echo "$tag $commit recipe $recipe $goos/$goarch $name"
		"$CC" --version | sed -n 1p
		"$CXX" --version | sed -n 1p
		printf '%s\n' "$@" "${cmake_args[@]+"${cmake_args[@]}"}"
		if [ "$name" = core ]; then cat "$here/llama/upstream/CMakeLists.txt" "$here"/llama/upstream/*.cpp "$here"/llama/upstream/*.h; else cat "$here/llama/upstream/backend/CMakeLists.txt"; fi
	} | sha256sum | cut -c1-16
}

# variants prints the CPU variants to build: $CPU_VARIANTS, else all of
# ggml's for the architecture (ggml/src/CMakeLists.txt, Linux) that the
# compiler can target (Debian 12's gcc 12 has no SME: armv9.2 is left out,
# and said so).
variants() {
	if [ -n "${CPU_VARIANTS:-}" ]; then
		echo "$CPU_VARIANTS"
		return
	fi
	case "$goarch" in
	amd64) echo "x64 sse42 sandybridge ivybridge piledriver haswell skylakex cannonlake cascadelake icelake cooperlake zen4 alderlake sapphirerapids" ;;
	arm64)
		local v="armv8.0_1 armv8.2_1 armv8.2_2 armv8.2_3 armv8.6_1 armv8.6_2"
		if echo 'int main(void){return 0;}' | "$CC" -march=armv9.2-a+sme -x c -c -o /dev/null - 2>/dev/null; then
			v="$v armv9.2_1 armv9.2_2"
		else
			say "$CC cannot target armv9.2-a+sme: the armv9.2 (SME) variants are not built"
		fi
		echo "$v"
		;;
	esac
}
cpu_list=$(variants)
corekey=$(partkey core "${core_opts[@]}")
cpukey=$(partkey "cpu $cpu_list" "${cpu_opts[@]}")
core="$cache/$tag-$goos-$goarch-core-$corekey"
cpu="$cache/$tag-$goos-$goarch-cpu-$cpukey"
if [ "$cmd" = dir ]; then
	echo "$core"
	echo "$cpu"
	exit 0
fi

# configure NAME OUT SRCDIR OPTS...: configure llama/upstream/SRCDIR in
# OUT.build; prints the build folder.
configure() {
	local name=$1 out=$2 dir=$3 src gen=()
	shift 3
	src=$(source_tree)
	rm -rf "$out.build"
	command -v ninja >/dev/null && gen=(-G Ninja)
	# ccache, when installed, speeds up a rebuild with other options.
	command -v ccache >/dev/null && gen+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
	CC=$CC CXX=$CXX cmake -S "$here/llama/upstream$dir" -B "$out.build" "${gen[@]+"${gen[@]}"}" "$@" \
		-DLLAMA_CPP_SRC="$src" "${cmake_args[@]+"${cmake_args[@]}"}" >"$out.log" 2>&1 ||
		{ tail -30 "$out.log" >&2; die "cmake configure of the $name part failed (log: $out.log)"; }
}

# build NAME OUT TARGETS...: build TARGETS in OUT.build.
build() {
	local name=$1 out=$2
	shift 2
	say "building the $name part of $tag for $goos/$goarch in $out.build (${JOBS:-$(nproc)} jobs)"
	cmake --build "$out.build" -j"${JOBS:-$(nproc)}" --target "$@" >>"$out.log" 2>&1 ||
		{ tail -30 "$out.log" >&2; die "cmake build of the $name part failed (log: $out.log)"; }
	rm -rf "$out"
	mkdir -p "$out/lib"
}

start=$(date +%s)
if [ ! -f "$core/.done" ]; then
	configure core "$core" "" "${core_opts[@]}"
	build core "$core" llama ggml ggml-base corral-common mtmd vendor-hash
	for t in llama ggml ggml-base corral-common mtmd vendor-hash; do
		find "$core.build" -name "lib$t.a" -exec cp {} "$core/lib/" \;
		[ -f "$core/lib/lib$t.a" ] || die "the build made no lib$t.a (log: $core.log)"
	done
	src=$(source_tree)
	mkdir -p "$core/include"
	cp "$src"/include/llama.h "$src"/ggml/include/*.h "$src"/src/llama-grammar.h "$src"/common/fit.h \
		"$src"/tools/mtmd/mtmd.h "$src"/tools/mtmd/mtmd-helper.h \
		"$here/llama/upstream/corral-arch.h" "$core/include/"
	echo "$tag $commit" >"$core/build.txt"
	rm -rf "$core.build"
	touch "$core/.done"
	say "built the core in $(( $(date +%s) - start )) s: $core"
fi
start=$(date +%s)
if [ ! -f "$cpu/.done" ]; then
	configure cpu "$cpu" /backend "${cpu_opts[@]}"
	targets=()
	for v in $cpu_list; do targets+=("ggml-cpu-$v"); done
	build cpu "$cpu" "${targets[@]}"
	strip=${CC%gcc}strip
	command -v "$strip" >/dev/null || strip=strip
	for v in $cpu_list; do
		so=$(find "$cpu.build" -name "libggml-cpu-$v.so" -type f | head -1)
		[ -n "$so" ] || die "the build made no libggml-cpu-$v.so (log: $cpu.log)"
		ggml_module "$so"
		"$strip" --strip-unneeded "$so"
		gzip -9n <"$so" >"$cpu/lib/libggml-cpu-$v.so.gz"
	done
	echo "$tag $commit $cpu_list" >"$cpu/build.txt"
	rm -rf "$cpu.build"
	touch "$cpu/.done"
	say "built the CPU variants ($cpu_list) in $(( $(date +%s) - start )) s: $cpu"
fi

# Install: copies (not links), so the tree travels as it is (a device
# run carries llama/lib).
libdir="$here/llama/lib/${goos}_$goarch"
inc="$here/llama/lib/include"
mkdir -p "$libdir/cpu" "$inc"
for f in "$core"/lib/*.a; do
	cmp -s "$f" "$libdir/$(basename "$f")" || cp -f "$f" "$libdir/"
done
rm -f "$libdir/libggml-cpu.a"
for f in "$libdir"/cpu/*; do
	[ -e "$cpu/lib/$(basename "$f")" ] || rm -f "$f"
done
for f in "$cpu"/lib/*.so.gz; do
	cmp -s "$f" "$libdir/cpu/$(basename "$f")" || cp -f "$f" "$libdir/cpu/"
done
for f in "$core"/include/*.h; do
	cmp -s "$f" "$inc/$(basename "$f")" || cp -f "$f" "$inc/"
done
# A Go file in the package names the build: Go hashes the package's own
# files, not the libraries it links, so a new build must change one of them
# for the binding to be rebuilt and relinked.
gofile="$here/llama/zllama_${goos}_$goarch.go"
cat >"$gofile.tmp" <<EOG
// Code generated by scripts/llama-cpp.sh; DO NOT EDIT.

package llama

import "embed"

// The llama.cpp build in llama/lib/${goos}_$goarch.
const (
	buildRelease = "$tag"
	buildCommit  = "$commit"
	buildKey     = "$corekey+$cpukey"
)

// cpuModules holds ggml's CPU backend variants (cpu/libggml-cpu-*.so.gz).
//
//go:embed lib/${goos}_$goarch/cpu
var cpuModules embed.FS

const cpuModulesDir = "lib/${goos}_$goarch/cpu"
EOG
if cmp -s "$gofile.tmp" "$gofile"; then rm -f "$gofile.tmp"; else mv -f "$gofile.tmp" "$gofile"; fi
say "$tag ($goos/$goarch, CPU variants: $cpu_list) installed in llama/lib/${goos}_$goarch"
