#!/usr/bin/env bash
# goldens.sh: the greedy continuations of internal/testmodel's goldens as
# llama.cpp's own server gives them, built from the same source as corral's
# engine (../shared/peers/build-llama-server.sh). For each golden prompt of
# each test model: temperature 0, BOS added, n tokens, end of generation
# ignored; once alone (-np 1) and once with all of the model's prompts sent
# at the same time (-np 4, batched in the same steps). Prints them as Go
# literals for internal/testmodel/golden.go, and exits 1 when the alone
# and batched outputs differ.
#
# The same for a synthetic model (gguf.Shapes["tiny"], seed 1, GPT-2's
# tokenizer from ../shared/vocab, written by
# corral synth: $CORRAL_BIN, default bin/corral), printed as the token ids
# of internal/testmodel's SynthGoldens.
#
# usage: scripts/goldens.sh LLAMA_SERVER > /tmp/goldens.txt
set -euo pipefail
peer=${1:?usage: scripts/goldens.sh LLAMA_SERVER}
cd "$(dirname "$0")/.."
. scripts/lib.sh
port=18432
models=../shared/models
trap stop EXIT
# The prompts and lengths of internal/testmodel/golden.go.
cases=(
	"Stories260K stories260K.gguf|Once upon a time|60"
	"Stories260K stories260K.gguf|Hello|16"
	"Stories260K stories260K.gguf|The little dog|48"
	"TinyStories656K tinystories-656k-q8_0.gguf|Once upon a time|32"
	"TinyStories656K tinystories-656k-q8_0.gguf|Hello|16"
	"TinyStories656K tinystories-656k-q8_0.gguf|The little dog|48"
)
ask() { # ask PROMPT N: the content of one /completion
	python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "n_predict": int(sys.argv[2]), "temperature": 0, "ignore_eos": True, "cache_prompt": False}))' "$1" "$2" |
		curl -sf "http://127.0.0.1:$port/completion" -d @- | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["content"]))'
}
tmp=$(mktemp -d)
status=0
for file in stories260K.gguf tinystories-656k-q8_0.gguf; do
	for np in 1 4; do
		"$peer" -m "$models/$file" -np "$np" -c $((np * 512)) -t 2 --port "$port" >"$tmp/server.log" 2>&1 &
		server=$!
		healthy llama-server "$port" "$tmp/server.log"
		i=0
		for c in "${cases[@]}"; do
			i=$((i + 1))
			[[ "$c" == *" $file|"* ]] || continue
			IFS='|' read -r _ prompt n <<<"$c"
			if [ "$np" = 1 ]; then ask "$prompt" "$n" >"$tmp/$i.alone"; else ask "$prompt" "$n" >"$tmp/$i.batched" & fi
		done
		wait_jobs=$(jobs -p | grep -v "^$server$" || true)
		for j in $wait_jobs; do wait "$j"; done
		stop
	done
done
# The synthetic model: token ids (return_tokens), its prompts batched too.
synth_cases=("Once upon a time|32" "Hello|16" "The little dog|48")
"${CORRAL_BIN:-bin/corral}" synth --shape tiny --seed 1 --vocab ../shared/vocab/ggml-vocab-gpt-2.gguf -o "$tmp/synth-tiny.gguf" >/dev/null
ask_tokens() { # ask_tokens PROMPT N: the token ids one /completion generates
	python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "n_predict": int(sys.argv[2]), "temperature": 0, "ignore_eos": True, "cache_prompt": False, "return_tokens": True}))' "$1" "$2" |
		curl -sf "http://127.0.0.1:$port/completion" -d @- | python3 -c 'import json,sys; print(", ".join(str(t) for t in json.load(sys.stdin)["tokens"]))'
}
for np in 1 4; do
	"$peer" -m "$tmp/synth-tiny.gguf" -np "$np" -c $((np * 256)) -t 2 --port "$port" >"$tmp/server.log" 2>&1 &
	server=$!
	healthy llama-server "$port" "$tmp/server.log"
	ask_each "$np" "$tmp/s" ask_tokens "${synth_cases[@]}"
	stop
done
i=0
for c in "${cases[@]}"; do
	i=$((i + 1))
	IFS='|' read -r head prompt n <<<"$c"
	name=${head%% *}
	if ! cmp -s "$tmp/$i.alone" "$tmp/$i.batched"; then
		echo "goldens: $name \"$prompt\": alone $(cat "$tmp/$i.alone"), batched $(cat "$tmp/$i.batched")" >&2
		status=1
	fi
	printf '\t{%s, "%s", %s, %s},\n' "$name" "$prompt" "$n" "$(cat "$tmp/$i.alone")"
done
i=0
for c in "${synth_cases[@]}"; do
	i=$((i + 1))
	IFS='|' read -r prompt n <<<"$c"
	if ! cmp -s "$tmp/s$i.alone" "$tmp/s$i.batched"; then
		echo "goldens: synthetic \"$prompt\": alone $(cat "$tmp/s$i.alone"), batched $(cat "$tmp/s$i.batched")" >&2
		status=1
	fi
	printf '\t{"tiny", "%s", %s, []int32{%s}},\n' "$prompt" "$n" "$(cat "$tmp/s$i.alone")"
done
rm -rf "$tmp"
exit $status
