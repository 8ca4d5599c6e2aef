#!/bin/sh
# Remakes the reference decodes beside the inputs in this folder, with
# llama.cpp's own stb_image and miniaudio (refdecode.cpp makes the mtmd
# helper's calls). Needs g++ and the llama.cpp tarball:
#
#   media/testdata/ref/goldens.sh [TARBALL]   (default ../shared/llama.cpp/llama.cpp-b10573.tar.gz
#                                              from the repository root)
#
# Write the inputs first: go test ./media -run TestWriteRefInputs -media.write-ref
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tarball=${1:-$here/../../../../shared/llama.cpp/llama.cpp-b10573.tar.gz}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
top=$(tar tzf "$tarball" | head -1 | cut -d/ -f1)
tar xzf "$tarball" -C "$tmp" "$top/vendor/stb/stb_image.h" "$top/vendor/miniaudio/miniaudio.h"
g++ -O3 -DNDEBUG -w -I "$tmp/$top/vendor" -o "$tmp/refdecode" "$here/refdecode.cpp" -lm -lpthread
cd "$here"
for f in *.png *.gif *.jpg; do
	"$tmp/refdecode" image "$f" >"$f.rgb" 2>"$f.size"
done
while read -r name rate; do
	"$tmp/refdecode" audio "$name.wav" "$rate" >"$name.wav.f32" 2>/dev/null
done <rates.txt
