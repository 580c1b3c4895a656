#!/usr/bin/env python3
"""Peer for `repohop bench embed`: sentence-transformers on PyTorch over the same texts, on the
same device (f32, as ours).

    /work/venv-ref/bin/python benches/embed_peer.py --texts texts.json \
        --model /work/models-cache/all-minilm-l6-v2 --threads 2 --runs 3

`texts.json` is a JSON list of strings (embed-bench writes it and runs this script itself with
`--peer-python`). Prints one JSON object: seconds per run, median, sequences/s and tokens/s
(tokens after truncation at the model's max_seq_length, special tokens included).
"""

import argparse
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer

    with open(args.texts) as f:
        texts = json.load(f)
    t0 = time.perf_counter()
    model = SentenceTransformer(args.model, device=args.device).float()
    load_s = time.perf_counter() - t0
    tok = model.tokenizer
    tokens = sum(
        len(ids)
        for ids in tok(texts, truncation=True, max_length=model.max_seq_length, add_special_tokens=True)["input_ids"]
    )
    model.encode(texts[:32], batch_size=args.batch_size)  # warm-up
    runs = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)
        if args.device != "cpu":
            torch.cuda.synchronize()
        runs.append(time.perf_counter() - t0)
    med = statistics.median(runs)
    print(
        json.dumps(
            {
                "engine": f"sentence-transformers {__import__('sentence_transformers').__version__} / torch {torch.__version__}",
                "threads": args.threads,
                "device": args.device,
                "batch_size": args.batch_size,
                "load_s": load_s,
                "texts": len(texts),
                "tokens": tokens,
                "runs_s": runs,
                "median_s": med,
                "seq_per_s": len(texts) / med,
                "tok_per_s": tokens / med,
            }
        )
    )


if __name__ == "__main__":
    main()
