#!/usr/bin/env python3
"""Writes the small test media beside this script (standard library only):
gradient-64.png, a 64x64 RGB gradient (lossless, so every decoder gives the
same pixels), gradient-96x64.png, a 96x64 one (wider than high: M-RoPE's
two image axes differ), and sine-440-1s.wav, one second of a 440 Hz sine at half
scale, 16 kHz mono signed 16-bit."""
import math, os, struct, wave, zlib

here = os.path.dirname(os.path.abspath(__file__))

def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

def row(y, w):  # PNG filter 1 (Sub): each byte less the one a pixel to its left
    raw = [v for x in range(w) for v in ((x * 4) % 256, y * 4, (x + y) * 2 % 256)]
    return b"\x01" + bytes((raw[i] - (raw[i - 3] if i >= 3 else 0)) % 256 for i in range(len(raw)))

def gradient(name, w, h):
    rows = b"".join(row(y, w) for y in range(h))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))
    with open(os.path.join(here, name), "wb") as f:
        f.write(png)

gradient("gradient-64.png", 64, 64)
gradient("gradient-96x64.png", 96, 64)

with wave.open(os.path.join(here, "sine-440-1s.wav"), "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(16000)
    w.writeframes(b"".join(struct.pack("<h", round(16384 * math.sin(2 * math.pi * 440 * i / 16000))) for i in range(16000)))
