#!/bin/bash
# The development set's function tasks on a lent GPU with the real weights. Those reach the device
# machine only in pieces (a call carries at most 64 MiB, the working tree included), one call per
# piece while the machine stays warm:
#   here:    bash scripts/gpu_eval.sh prepare DEVEVAL_SOURCE_CODE DEV_TASKS   -> .devcarry/, .dv/cNN
#   device:  bash scripts/gpu_eval.sh setup .devcarry $OUT   (carry .devcarry, .dv/c00): unpack, check
#            that the reference bodies pass there, run the pipeline once on random weights
#            bash scripts/gpu_eval.sh part .dv/cNN           (carry .dv/cNN), for each later piece
#            bash scripts/gpu_eval.sh pipeline $OUT: join and hash-check the pieces, time `index
#            --embed`, `search` and `generate` on the GPU
#            bash scripts/gpu_eval.sh run $OUT NAME METHOD [EVAL OPTIONS]: time `repohop eval` on
#            the GPU, bring back its summary and run folder
# .devcarry/ and .dv/ must be in .git/info/exclude. Needs a `--features cuda` release build.
set -uo pipefail
W=/var/tmp/repohop-gpu # not /tmp: the test sandbox gives each test a private one
GGUF=qwen2.5-coder-1.5b-instruct-q4_k_m
MINI=all-minilm-l6-v2
GGUF_BYTES=1117320768
GGUF_SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
MINI_SHA=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
FIRST_PIECE=34000000 # the first call also carries the binary and the small files
PIECE=62000000       # 64 MiB less the working tree

source "$(dirname "$0")/device_env.sh"

# The weights joined from the pieces (once) and hash-checked; the GPU libraries and models found.
ready() {
  if [ ! -f $W/models/$MINI/model.safetensors ]; then
    cat $W/parts/c* | python3 -c '
import hashlib, sys
size, a, b, sha_a, sha_b = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
ha, hb = hashlib.sha256(), hashlib.sha256()
with open(a, "wb") as fa, open(b, "wb") as fb:
    left = size
    while True:
        data = sys.stdin.buffer.read(1 << 24)
        if not data:
            break
        head, tail = data[:left], data[left:]
        left -= len(head)
        fa.write(head); ha.update(head)
        fb.write(tail); hb.update(tail)
ok = ha.hexdigest() == sha_a and hb.hexdigest() == sha_b
print("weights", "ok" if ok else "CORRUPT")
sys.exit(0 if ok else 1)' $GGUF_BYTES $W/models/$GGUF/model.gguf $W/models/$MINI/model.safetensors $GGUF_SHA $MINI_SHA ||
      return 1
    rm -rf $W/parts
  fi
  gpu_env
  export REPOHOP_MODELS=$W/models
}

# timed OUT NAME COMMAND...: stdout to OUT/NAME.json, stderr to OUT/NAME.err, seconds printed.
timed() {
  local out=$1 name=$2 start
  shift 2
  start=$(date +%s.%N)
  "$@" >"$out/$name.json" 2>"$out/$name.err"
  echo "$name: exit $? in $(python3 -c "import time; print(round(time.time() - $start, 1))") s"
}

# summary FILE: an eval summary's top-level figures.
summary() {
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print({k: v for k, v in r.items() if not isinstance(v, (list, dict))})' "$1" 2>&1 | cut -c1-900
}

case "${1:-}" in
prepare)
  src=$2 tasks=$3 models=${REPOHOP_MODELS:-$HOME/.cache/repohop/models}
  # A CPU build would run there, but on the CPU: refuse it here.
  objdump -p target/release/repohop 2>/dev/null | grep -q 'NEEDED.*libcuda' ||
    { echo "target/release/repohop is not a --features cuda build" >&2; exit 1; }
  rm -rf .devcarry .dv && mkdir -p .devcarry .dv
  cp target/release/repohop /tmp/repohop.strip && strip /tmp/repohop.strip
  xz -T2 -6 -c /tmp/repohop.strip >.devcarry/repohop.xz
  tar -C "$models" --exclude=model.gguf --exclude=model.safetensors -cJf .devcarry/models-small.tar.xz $GGUF $MINI
  tar -C "$src" --exclude=.git -cJf .devcarry/src.tar.xz Utilities/boltons Database/bplustree
  cp "$tasks" .devcarry/dev-tasks.jsonl
  head -c 6000000 "$models/$GGUF/model.gguf" | xz -T2 -c >.devcarry/header.gguf.xz
  head -c 12000 "$models/$MINI/model.safetensors" >.devcarry/mini-header.safetensors
  # The projects' test dependencies (DevEval's: pytest 7.4.0 and its own, rwlock, cachetools), pure Python.
  rm -rf /tmp/gpu-site && python3 -m pip download -q --no-deps -d /tmp/gpu-site/dl pytest==7.4.0 pluggy==1.5.0 iniconfig==2.0.0 packaging==24.1 rwlock cachetools &&
    python3 -m pip install -q --no-deps --no-compile --target /tmp/gpu-site/site /tmp/gpu-site/dl/* &&
    tar -C /tmp/gpu-site/site -cJf .devcarry/site.tar.xz . || exit 1
  cat "$models/$GGUF/model.gguf" "$models/$MINI/model.safetensors" |
    python3 -c '
import sys
first, rest = int(sys.argv[1]), int(sys.argv[2])
i, size = 0, first
while True:
    data = sys.stdin.buffer.read(size)
    if not data:
        break
    open(".dv/c%02d" % i, "wb").write(data)
    i, size = i + 1, rest
print(i, "pieces")' $FIRST_PIECE $PIECE
  du -sh .devcarry .dv
  ;;
setup)
  d=$(realpath "$2") out=$(realpath "$3")
  rm -rf $W && mkdir -p $W/models $W/src $W/site $W/runs $W/parts
  unxz_to "$d/repohop.xz" $W/repohop && chmod +x $W/repohop
  tar -C $W/models -xJf "$d/models-small.tar.xz"
  tar -C $W/src -xJf "$d/src.tar.xz"
  tar -C $W/site -xJf "$d/site.tar.xz"
  cp "$d/dev-tasks.jsonl" $W/
  # Tests get a cleared environment: this wrapper puts pytest 7.4 ahead of the image's own.
  printf '#!/bin/sh\nPYTHONPATH=%s PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 exec %s "$@"\n' $W/site "$(command -v python3)" >$W/py
  chmod +x $W/py
  gpu_env
  timed "$out" reference $W/repohop eval --tasks $W/dev-tasks.jsonl --source-root $W/src --method reference \
    --python $W/py --jobs 16 --quiet --json --out $W/runs/reference
  summary "$out/reference.json"
  # The pipeline on random weights of both models' layouts: it must run end to end on the GPU.
  mkdir -p $W/synth-mini && cp $W/models/$MINI/*.json $W/models/$MINI/vocab.txt $W/synth-mini/ &&
    cp -r $W/models/$MINI/1_Pooling $W/synth-mini/ &&
    python3 scripts/synth_safetensors.py "$d/mini-header.safetensors" $W/synth-mini/model.safetensors &&
    mkdir -p $W/like && xz -dc "$d/header.gguf.xz" >$W/like/model.gguf && cp $W/models/$GGUF/tokenizer.json $W/like/ &&
    $W/repohop models synth --like $W/like/model.gguf --out $W/synth >/dev/null || exit 1
  timed "$out" smoke timeout 150 $W/repohop eval --tasks $W/dev-tasks.jsonl --source-root $W/src --method dense \
    --model $W/synth/model.gguf --embed-model $W/synth-mini --device cuda --concurrency 4 --limit 4 \
    --python $W/py --jobs 4 --json --out $W/runs/smoke
  tail -n 5 "$out/smoke.err"
  ;;
part)
  cp "$2" $W/parts/ && echo "$(ls $W/parts | wc -l) pieces, $(du -cb $W/parts/* | tail -n 1 | cut -f1) bytes"
  ;;
pipeline)
  # The user's commands on the GPU with the real weights, on a copy of boltons: index with
  # embeddings, search, one function regenerated.
  out=$(realpath "$2")
  ready || exit 1
  rm -rf $W/boltons && cp -r $W/src/Utilities/boltons $W/boltons
  timed "$out" index $W/repohop index --embed --device cuda --json $W/boltons
  timed "$out" search $W/repohop search --device cuda --json $W/boltons "parse a query string into pairs"
  timed "$out" generate $W/repohop generate --device cuda --json $W/boltons --target boltons.strutils.slugify
  python3 -c 'import json, sys; print(str(json.load(open(sys.argv[1])))[:600])' "$out/generate.json"
  ;;
run)
  out=$(realpath "$2") name=$3 method=$4
  shift 4
  ready || exit 1
  timed "$out" "$name" $W/repohop eval --tasks $W/dev-tasks.jsonl --source-root $W/src --method "$method" \
    --device cuda --python $W/py --jobs 16 --json --out $W/runs/"$name" "$@"
  tar -C $W/runs -cJf "$out/$name-run.tar.xz" "$name"
  summary "$out/$name.json"
  tail -n 3 "$out/$name.err"
  ;;
*)
  sed -n 2,14p "$0"
  exit 2
  ;;
esac
