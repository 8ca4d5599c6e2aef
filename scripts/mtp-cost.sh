#!/usr/bin/env bash
# mtp-cost.sh: what speculation with a model's MTP head costs or gains,
# against no speculation and against the recurrent copies alone: for each
# round, corral serve with --spec-type none, ngram --spec-recurrent and
# draft-mtp in turn (one server at a time), each measured by corral bench
# at one stream (16 requests) and 16 (48), 10-token prompts, 64 out.
# Prints output tok/s per configuration, concurrency and round, and the
# spec_decode counters after each run. Run nothing else meanwhile.
# CONFIGS picks the configurations (default "none copies draft-mtp");
# "perslot" is none with --kv-per-slot, which a hybrid keeping the
# copies always has.
#
# usage: scripts/mtp-cost.sh MODEL.gguf [ROUNDS] [OUT_DIR]
#   MODEL  a model with an MTP head, e.g. corral synth --arch qwen35 --shape
#          embd=512,layers=24,heads=8,kv=2,ff=1536,vocab=32000,ctx=4096,type=q8_0,mtp=1
set -u
model=$1
rounds=${2:-3}
out=${3:-/tmp/mtp-cost}
here=$(cd "$(dirname "$0")/.." && pwd)
corral=$here/bin/corral
port=18931
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
	for cfg in ${CONFIGS:-none copies draft-mtp}; do
		case $cfg in
		none) flags=(--spec-type none) ;;
		perslot) flags=(--spec-type none --kv-per-slot) ;;
		copies) flags=(--spec-type ngram --spec-recurrent) ;;
		draft-mtp) flags=(--spec-type draft-mtp) ;;
		esac
		"$corral" serve -m "$model" -np 16 -t 2 -c 16384 --port $port "${flags[@]}" >"$out/serve-$cfg-$round.log" 2>&1 &
		pid=$!
		for _ in $(seq 1 120); do curl -sf localhost:$port/v1/models >/dev/null && break; sleep 0.5; done
		for c in 1 16; do
			n=16
			[ $c = 16 ] && n=48
			"$corral" bench -url http://127.0.0.1:$port --api completions --input-len 10 --output-len 64 --ignore-eos \
				--concurrency $c --num-requests $n >"$out/$cfg-c$c-r$round.txt" 2>&1
			tps=$(awk '/Output token throughput/ {print $NF}' "$out/$cfg-c$c-r$round.txt")
			spec=$(curl -s localhost:$port/metrics | grep -E '^vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total' |
				sed -E 's/^vllm:spec_decode_num_([a-z_]+)_total[^ ]* /\1=/' | tr '\n' ' ')
			echo "round $round $cfg c=$c: $tps tok/s; $spec(cumulative)"
		done
		kill $pid
		wait $pid 2>/dev/null
	done
done
