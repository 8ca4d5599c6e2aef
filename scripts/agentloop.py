#!/usr/bin/env python3
"""agentloop.py: an agent loop against one running server (corral serve or
llama-server), for issue 33's per-turn row: a system prompt of about
2,000 tokens, then TURNS turns, each appending the previous answer and
about NEW tokens of new text (a tool result), sent as one /v1/completions
prompt at temperature 0 with 24 tokens out. Prints per turn the prompt's
tokens, how many the server evaluated (corral: prompt - cached_tokens;
llama-server: timings.prompt_n) and the request's time.

usage: scripts/agentloop.py URL corral|llama [TURNS] [NEW]

The row in the closing note of 2026-12-03 ran it on
  corral synth --arch qwen35 --shape embd=1024,layers=12,heads=8,kv=2,ff=2816,vocab=512,ctx=32768,type=q8_0
served by `corral serve -np 1 -c 32768 -t 2` and `llama-server -np 1 -c 32768 -t 2`."""
import json, random, sys, time, urllib.request
url, kind = sys.argv[1], sys.argv[2]
turns = int(sys.argv[3]) if len(sys.argv) > 3 else 10
new = int(sys.argv[4]) if len(sys.argv) > 4 else 300
rnd = random.Random(7)
words = ["alpha","bravo","tool","call","result","file","line","read","write","grep","test","pass","fail","fix","code","go","run","make"]
def text(n): return " ".join(rnd.choice(words) for _ in range(n))
prompt = "System: " + text(400)
rows = []
for turn in range(1, turns + 1):
    prompt += "\nUser: " + text(new // 5)
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": False, "cache_prompt": True}
    path = "/v1/completions"
    t0 = time.time()
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    d = json.load(urllib.request.urlopen(req, timeout=600))
    dt = time.time() - t0
    u = d.get("usage", {})
    ptoks = u.get("prompt_tokens", 0)
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    if kind == "llama":
        evald = d.get("timings", {}).get("prompt_n", ptoks - cached)
    else:
        evald = ptoks - cached
    ans = d["choices"][0]["text"]
    prompt += "\nAssistant:" + ans
    rows.append((turn, ptoks, evald, dt))
    print(f"{kind} turn {turn:2d}: prompt {ptoks:5d} evaluated {evald:5d} time {dt*1000:7.0f} ms", flush=True)
