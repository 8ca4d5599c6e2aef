#!/usr/bin/env bash
# llama-cpp.sh: build the pinned llama.cpp release's static libraries with
# its own CMake and install them for the binding (package llama):
#
#   llama/lib/include/     llama.h, the ggml headers and llama-grammar.h
#   llama/lib/GOOS_GOARCH/ libllama.a, libggml.a, libggml-base.a, libggml-cpu.a,
#                          libcorral-common.a (llama/upstream/CMakeLists.txt)
#   llama/zllama_GOOS_GOARCH.go  the build's release and key (Go rebuilds the
#                          binding when it changes)
#
# Usage: scripts/llama-cpp.sh [verify|build|src|dir]
#   build   (default) the libraries for $GOOS/$GOARCH (default: this machine's)
#   verify  check the source against the committed hash list and exit
#   src     print the folder of the verified source tree
#   dir     print the cache folders of the build's two parts, core and cpu
#           (built or not; see part below)
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
# flags: a second build (another clone, CI's next run) only copies. The
# kernels (ggml-cpu) are cached apart from the rest, which does not depend
# on LLAMA_CFLAGS: another flag set compiles only them.
#
# Environment:
#   GOOS, GOARCH   the target (linux/amd64 and linux/arm64)
#   CC, CXX        compilers (default: gcc/g++, or aarch64-linux-gnu-* for a
#                  linux/arm64 target on another machine)
#   LLAMA_CFLAGS   code-generation flags (default: -march=native on the
#                  build machine's own architecture; e.g. -march=x86-64-v3)
#   JOBS           parallel jobs (default: nproc)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
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
	flags=${LLAMA_CFLAGS-}
	[ -n "$flags" ] || die "GOARCH=$goarch is not this machine's ($hostarch): set LLAMA_CFLAGS (e.g. -march=armv8.2-a+dotprod+fp16)"
else
	CC=${CC:-gcc}
	CXX=${CXX:-g++}
	flags=${LLAMA_CFLAGS--march=native}
fi
command -v cmake >/dev/null || "$here/scripts/apt-install.sh" llama.cpp cmake
command -v "$CXX" >/dev/null || die "$CXX not found"

# recipe: bump when the steps below change what they produce (the
# options and llama/upstream/CMakeLists.txt are part of the keys).
recipe=2
opts=(
	-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON
	-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_OPENSSL=OFF
	# A static library's target then does not wait for the libraries it
	# links: the core's build does not compile ggml-cpu, nor the CPU
	# part's build ggml-base.
	-DCMAKE_OPTIMIZE_DEPENDENCIES=ON
)
# -march=native as a flag, not GGML_NATIVE: ggml's CMake then leaves the
# instruction set to the flags, the same way for native and portable builds.
# AMX: its kernels die with SIGILL on some virtual machines that advertise
# it (issue 20); left out unless the flags ask for it by name.
case " $flags " in
*amx*) ;;
*) if [ "$goarch" = amd64 ]; then flags="$flags -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"; fi ;;
esac

# Two parts, cached apart, as llama.cpp's own releases split them:
#   core  llama, ggml (the backend registry), ggml-base and corral-common,
#         compiled for the architecture's baseline (the compiler's default:
#         x86-64, armv8-a): nothing in them is chosen by instruction set;
#   cpu   ggml-cpu, the kernels, compiled with $flags.
# A build for other flags (check-builds, make dist) compiles only the
# kernels again.
partkey() { # partkey FLAGS: the cache key of a part built with FLAGS
	{
		echo "$tag $commit recipe $recipe $goos/$goarch"
		"$CC" --version | sed -n 1p
		"$CXX" --version | sed -n 1p
		echo "$1"
		[ "$1" = "${1#*native}" ] || "$CC" $1 -Q --help=target 2>/dev/null | grep -E '^\s+-march=|enabled' || true
		printf '%s\n' "${opts[@]}" "${cmake_args[@]+"${cmake_args[@]}"}"
		cat "$here/llama/upstream/CMakeLists.txt"
	} | sha256sum | cut -c1-16
}
core_flags=""
corekey=$(partkey "$core_flags")
cpukey=$(partkey "$flags")
core="$cache/$tag-$goos-$goarch-core-$corekey"
cpu="$cache/$tag-$goos-$goarch-cpu-$cpukey"
if [ "$cmd" = dir ]; then
	echo "$core"
	echo "$cpu"
	exit 0
fi

# part NAME OUT FLAGS TARGETS...: build TARGETS with FLAGS into the cache
# folder OUT, unless it is there.
part() {
	local name=$1 out=$2 pflags=$3
	shift 3
	[ -f "$out/.done" ] && return
	local src start gen=()
	src=$(source_tree)
	start=$(date +%s)
	rm -rf "$out.build"
	say "building the $name part of $tag for $goos/$goarch with '$pflags' in $out.build (${JOBS:-$(nproc)} jobs)"
	command -v ninja >/dev/null && gen=(-G Ninja)
	# ccache, when installed, only speeds up rebuilds with other flags.
	command -v ccache >/dev/null && gen+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
	CC=$CC CXX=$CXX cmake -S "$here/llama/upstream" -B "$out.build" "${gen[@]+"${gen[@]}"}" "${opts[@]}" \
		-DLLAMA_CPP_SRC="$src" \
		"${cmake_args[@]+"${cmake_args[@]}"}" -DCMAKE_C_FLAGS="$pflags" -DCMAKE_CXX_FLAGS="$pflags" >"$out.log" 2>&1 ||
		{ tail -30 "$out.log" >&2; die "cmake configure failed (log: $out.log)"; }
	cmake --build "$out.build" -j"${JOBS:-$(nproc)}" --target "$@" >>"$out.log" 2>&1 ||
		{ tail -30 "$out.log" >&2; die "cmake build failed (log: $out.log)"; }
	rm -rf "$out"
	mkdir -p "$out/lib" "$out/include"
	local t
	for t in "$@"; do
		find "$out.build" -name "lib$t.a" -exec cp {} "$out/lib/" \;
		[ -f "$out/lib/lib$t.a" ] || die "the build made no lib$t.a (log: $out.log)"
	done
	if [ "$name" = core ]; then
		cp "$src"/include/llama.h "$src"/ggml/include/*.h "$src"/src/llama-grammar.h "$src"/common/fit.h "$out/include/"
	fi
	printf '%s\n' "$tag $commit" "$pflags" >"$out/build.txt"
	rm -rf "$out.build"
	touch "$out/.done"
	say "built the $name part in $(( $(date +%s) - start )) s: $out"
}
part core "$core" "$core_flags" llama ggml ggml-base corral-common
part cpu "$cpu" "$flags" ggml-cpu

# Install: copies (not links), so the tree travels as it is (a device
# run carries llama/lib).
libdir="$here/llama/lib/${goos}_$goarch"
inc="$here/llama/lib/include"
mkdir -p "$libdir" "$inc"
for f in "$core"/lib/*.a "$cpu"/lib/*.a; do
	cmp -s "$f" "$libdir/$(basename "$f")" || cp -f "$f" "$libdir/"
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

// The llama.cpp build in llama/lib/${goos}_$goarch.
const (
	buildRelease = "$tag"
	buildCommit  = "$commit"
	buildKey     = "$corekey+$cpukey"
	buildFlags   = "$flags"
)
EOG
if cmp -s "$gofile.tmp" "$gofile"; then rm -f "$gofile.tmp"; else mv -f "$gofile.tmp" "$gofile"; fi
say "$tag ($goos/$goarch, $flags) installed in llama/lib/${goos}_$goarch"
