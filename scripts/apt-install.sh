#!/usr/bin/env bash
# apt-install.sh [--optional] WHO PACKAGE...: install Debian packages that
# a build or test step (WHO, named in the messages) needs, when apt-get
# can run: as root, or through sudo without a password. Otherwise say
# what to install and fail, or with --optional go on (the step that needs
# them then says what is missing).
set -eu
fail=1
if [ "${1:-}" = --optional ]; then
	fail=0
	shift
fi
who=$1
shift
if ! command -v apt-get >/dev/null 2>&1; then
	echo "$who: missing $*; install them (there is no apt-get here)" >&2
	exit "$fail"
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo="sudo -n"
	else
		echo "$who: missing $*; run as root: apt-get install $*" >&2
		exit "$fail"
	fi
fi
echo "$who: installing $* (apt-get)"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
