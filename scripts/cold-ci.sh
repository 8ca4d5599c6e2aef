#!/usr/bin/env bash
# cold-ci.sh: times a cold CI run as CI makes it: a fresh clone of this
# repository's HEAD beside ../shared, every cache empty (HOME, the Go
# build and module caches, XDG's, so llama.cpp and the backends build
# from source), then .ci/run's stages one by one. Prints each stage's
# exit code and seconds, and the total; the logs are in DIR. It takes
# the machine for about an hour on 2 cores: run nothing else meanwhile.
#
# usage: scripts/cold-ci.sh [DIR]   (default /tmp/cold-ci)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-/tmp/cold-ci}
rm -rf "$root" && mkdir -p "$root/home"
git clone -q "$here" "$root/corral"
ln -s "$(cd "$here/../shared" && pwd)" "$root/shared"
cd "$root/corral"
export HOME=$root/home XDG_CACHE_HOME=$root/home/.cache GOCACHE=$root/home/gocache GOMODCACHE=$root/home/gomod GOFLAGS=-modcacherw
t0=$(date +%s)
for stage in check-builds test test-gpu; do # .ci/run's
	s=$(date +%s)
	make "$stage" >"$root/$stage.log" 2>&1
	rc=$?
	echo "$stage rc=$rc $(($(date +%s) - s)) s" | tee -a "$root/times"
	[ "$rc" = 0 ] || break
done
echo "total $(($(date +%s) - t0)) s" | tee -a "$root/times"
