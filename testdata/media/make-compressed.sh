#!/bin/sh
# Writes the MP3 and FLAC test media beside this script from sine-440-1s.wav
# (see README.md), with LAME 3.100 and flac 1.4.2 (Debian's lame and flac
# packages) and Python 3's standard library. Their output is committed, so
# nothing runs this.
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import random, struct, sys, wave
tmp = sys.argv[1]
with wave.open("sine-440-1s.wav") as w:
    s = struct.unpack("<16000h", w.readframes(16000))
def write(name, channels, width, frames):
    with wave.open(f"{tmp}/{name}", "wb") as o:
        o.setnchannels(channels)
        o.setsampwidth(width)
        o.setframerate(16000)
        o.writeframes(b"".join(frames))
# Left the sine, right silent.
write("left.wav", 2, 2, (struct.pack("<hh", x, 0) for x in s))
# The sine in 24 bits: its 8 low bits are zero (FLAC's wasted bits).
write("sine24.wav", 1, 3, (struct.pack("<i", x << 8)[:3] for x in s))
# 4608 stereo frames, left the sine, right in four blocks of 1152: half
# the sine, noise, the sine, minus the sine.
random.seed(1)
def right(i, x):
    return [x // 2, random.randint(-30000, 30000), x, -x][i // 1152]
write("mix.wav", 2, 2, (struct.pack("<hh", x, right(i, x)) for i, x in enumerate(s[:4608])))
PY
lame --quiet -b 32 sine-440-1s.wav sine-440-1s.mp3
lame --quiet -m s -b 32 --resample 44.1 "$tmp/left.wav" sine-440-1s-left-44k.mp3
flac -s -8 --no-padding -f -o sine-440-1s.flac sine-440-1s.wav
flac -s -8 --no-padding -f -o sine-440-1s-24bit.flac "$tmp/sine24.wav"
flac -s -l 0 -b 1152 -m --no-padding -f -o stereo-mix.flac "$tmp/mix.wav"
