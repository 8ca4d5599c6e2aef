#!/usr/bin/env python3
"""agentloop.py: agent loops against one running server (corral serve or
llama-server), for issue 33's rows: a system prompt of about 2,000
tokens, then TURNS turns, each appending the previous answer and about
NEW tokens of new text (a tool result), sent as one /v1/completions
prompt at temperature 0 with 24 tokens out. CONVS conversations run at
once (default 1), sharing the system prompt and each with its own turns.

With one conversation it prints per turn the prompt's tokens, how many
the server evaluated (corral: prompt - cached_tokens; llama-server:
timings.prompt_n) and the request's time. With more it prints one line
per request as it ends and then a summary: the prompt tokens sent, the
tokens the server evaluated, the tokens that were new to it (the first
turn's whole prompt, then each turn's new text and previous answer),
and the requests' times (median and p99; 24 tokens out each).

usage: scripts/agentloop.py URL corral|llama [TURNS] [NEW] [CONVS]

The rows in the closing notes of 2026-12-03 and 2026-12-04 ran it on
  corral synth --arch qwen35 --shape embd=1024,layers=12,heads=8,kv=2,ff=2816,vocab=512,ctx=32768,type=q8_0
served by `corral serve -np 1 -c 32768 -t 2` and `llama-server -np 1 -c 32768 -t 2`
(one conversation: agentloop.py URL KIND), and by -np 4 for 16 conversations at
once (agentloop.py URL KIND 4 300 16), one server at a time."""
import json, random, sys, threading, time, urllib.request

url, kind = sys.argv[1], sys.argv[2]
turns = int(sys.argv[3]) if len(sys.argv) > 3 else 10
new = int(sys.argv[4]) if len(sys.argv) > 4 else 300
convs = int(sys.argv[5]) if len(sys.argv) > 5 else 1
words = ["alpha", "bravo", "tool", "call", "result", "file", "line", "read", "write", "grep", "test", "pass", "fail", "fix", "code", "go", "run", "make"]


def text(rnd, n):
    return " ".join(rnd.choice(words) for _ in range(n))


system = "System: " + text(random.Random(7), 400)
rows = []  # (conversation, turn, prompt tokens, evaluated, new tokens, seconds)
lock = threading.Lock()


def conversation(c):
    rnd = random.Random(7 + c)
    prompt, prev = system, 0
    for turn in range(1, turns + 1):
        prompt += "\nUser: " + text(rnd, new // 5)
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": False, "cache_prompt": True}
        t0 = time.time()
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        d = json.load(urllib.request.urlopen(req, timeout=3600))
        dt = time.time() - t0
        u = d.get("usage", {})
        ptoks = u.get("prompt_tokens", 0)
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        evald = d.get("timings", {}).get("prompt_n", ptoks - cached) if kind == "llama" else ptoks - cached
        prompt += "\nAssistant:" + d["choices"][0]["text"]
        with lock:
            rows.append((c, turn, ptoks, evald, ptoks - prev, dt))
            if convs == 1:
                print(f"{kind} turn {turn:2d}: prompt {ptoks:5d} evaluated {evald:5d} time {dt*1000:7.0f} ms", flush=True)
            else:
                print(f"{kind} conversation {c:2d} turn {turn:2d}: prompt {ptoks:5d} evaluated {evald:5d} time {dt*1000:7.0f} ms", flush=True)
        prev = ptoks


threads = [threading.Thread(target=conversation, args=(c,)) for c in range(convs)]
t0 = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.time() - t0
if convs > 1:
    times = sorted(r[5] for r in rows)
    p = lambda q: times[min(len(times) - 1, int(q * len(times)))]
    sent, evald, fresh = sum(r[2] for r in rows), sum(r[3] for r in rows), sum(r[4] for r in rows)
    print(f"{kind}: {convs} conversations x {turns} turns in {wall:.0f} s: prompt tokens {sent}, evaluated {evald}, new {fresh} "
          f"(evaluated/new {evald/fresh:.2f}); request time median {p(0.5)*1000:.0f} ms, p99 {p(0.99)*1000:.0f} ms", flush=True)
