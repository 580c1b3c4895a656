#!/bin/bash
# The GPU checks, on a machine with an NVIDIA GPU, from binaries of a `cuda` release build made
# elsewhere (a lent GPU machine has no registry to build from):
#   - tests/llm_cuda.rs (our decode kernels against candle's ops, graph replay, the CPU) and
#     tests/llm_tiny.rs (the reference models) on GPU 0, failing if no GPU is found;
#   - `repohop bench llm` on a model of the 1.5B model's layout with random weights (`repohop
#     models synth`: only the GGUF header and tokenizer.json travel), at two prompt lengths;
#   - the same at 2,048 tokens with every matrix dequantized to f16 (cuBLAS prompt products);
#   - `repohop bench llm --concurrency 1,8,64` on that model: answers decoded together (our
#     batch kernels) against one at a time;
#   - with DIR/minilm and DIR/repo: `repohop bench embed` of the repository's functions on the
#     GPU against sentence-transformers on the same GPU, with random weights in the embedder's
#     layout (scripts/synth_safetensors.py; DIR/minilm holds its small files and
#     header.safetensors, the first bytes of model.safetensors).
#
# Usage: scripts/gpu_check.sh DIR OUT
#   DIR: repohop, llm_cuda, llm_tiny (each plain or .xz), header.gguf (the model's first bytes,
#        up to the end of its header) and tokenizer.json; optionally minilm/ and repo/ (above).
#   OUT: where the logs and JSON go.
set -uo pipefail
DIR=$(realpath "${1:?usage: $0 DIR OUT}")
OUT=$(realpath "${2:?usage: $0 DIR OUT}")
source "$(dirname "$0")/device_env.sh"
for f in "$DIR"/*.xz; do
  [ -e "$f" ] || continue
  unxz_to "$f" "${f%.xz}" && chmod +x "${f%.xz}"
done
gpu_env
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
# The test binaries read their fixtures from the folder they were built in.
ROOT=$(sed -n 's/^root=//p' "$DIR/built_at" 2>/dev/null)
if [ -n "$ROOT" ] && [ ! -e "$ROOT" ]; then mkdir -p "$(dirname "$ROOT")" && ln -s "$PWD" "$ROOT"; fi
export REPOHOP_REQUIRE_GPU=1
"$DIR/llm_cuda" --nocapture --test-threads 1 > "$OUT/llm_cuda.log" 2>&1; echo "llm_cuda: exit $?"
"$DIR/llm_tiny" --test-threads 1 > "$OUT/llm_tiny.log" 2>&1; echo "llm_tiny: exit $?"
tail -n 4 "$OUT/llm_cuda.log" "$OUT/llm_tiny.log"
grep -h "max abs diff" "$OUT/llm_cuda.log"
if [ -d "$DIR/minilm" ] && [ -d "$DIR/repo" ]; then
  rm -rf /tmp/minilm && cp -r "$DIR/minilm" /tmp/minilm
  python3 scripts/synth_safetensors.py /tmp/minilm/header.safetensors /tmp/minilm/model.safetensors &&
    rm /tmp/minilm/header.safetensors &&
    "$DIR/repohop" bench embed --repo "$DIR/repo" --embed-model /tmp/minilm --device cuda --runs 3 \
      --peer-python python3 --json > "$OUT/embed.json" 2> "$OUT/embed.err"
  echo "bench embed: exit $?"
  python3 - "$OUT/embed.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r.get("peer") or {}
print("embed: texts", r["texts"], "ours f/s", round(r["cold"]["functions_per_s"]), "tok/s",
      round(r["cold"]["tokens_per_s"]), "| peer f/s", round(p.get("functions_per_s", 0)),
      "ratio", round(p.get("ratio_ours_over_peer", 0), 2), p.get("engine"))
PY
fi
"$DIR/repohop" models synth --like "$DIR/header.gguf" --out /tmp/synth || exit 1
for n in 512 2048; do
  "$DIR/repohop" bench llm --model /tmp/synth/model.gguf --runs 3 --prompt-tokens $n \
    --gen-tokens 128 --hops 0 --json > "$OUT/bench-$n.json" 2> "$OUT/bench-$n.err"
  echo "bench $n: exit $?"
  python3 - "$OUT/bench-$n.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print({k: r.get(k) for k in ("device", "device_kernels", "prompt_tokens", "prefill_tokens_per_s", "decode_tokens_per_s")})
print("peer:", {k: (r["peer"] or {}).get(k) for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "decode_ratio")})
for name, v in (r.get("device_variants") or {}).items():
    print(name, "decode", round(v["decode_tokens_per_s"], 1), "ours/this", round(v["ours_over_this"], 2),
          "prefill", round(v["prefill_tokens_per_s"]), "ours/this", round(v["prefill_ours_over_this"], 2))
PY
done
# The other prompt GEMM to weigh against candle's int8 MMQ: every matrix dequantized to f16 at
# load (candle's CANDLE_DEQUANTIZE_ALL_F16), products on cuBLAS (decode then runs candle's ops).
CANDLE_DEQUANTIZE_ALL_F16=1 "$DIR/repohop" bench llm --model /tmp/synth/model.gguf --runs 3 \
  --prompt-tokens 2048 --gen-tokens 16 --hops 0 --no-peer --json > "$OUT/bench-2048-f16.json" 2> "$OUT/bench-2048-f16.err"
echo "bench 2048, f16 weights on cuBLAS: exit $?"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("f16 prefill", round(r["prefill_tokens_per_s"]))' \
  "$OUT/bench-2048-f16.json"
"$DIR/repohop" bench llm --model /tmp/synth/model.gguf --concurrency 1,8,64 --answer-tokens 128 \
  --runs 2 --json > "$OUT/concurrency.json" 2> "$OUT/concurrency.err"
echo "bench concurrency: exit $?"
python3 - "$OUT/concurrency.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("one at a time", round(r["one_at_a_time_decode_tokens_per_s"], 1), "differing", r["answers_differing"])
for l in r["levels"]:
    print(l["concurrency"], "at once:", round(l["aggregate_decode_tokens_per_s"]), "tok/s together,",
          round(l["per_answer_decode_tokens_per_s"], 1), "per answer,", round(l["speedup_over_one_at_a_time"], 2), "x")
PY
