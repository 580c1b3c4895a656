#!/usr/bin/env python3
"""Golden fixtures for repohop's embedders (tests/embed_golden.rs).

Re-run (needs torch, transformers, sentence-transformers, tokenizers; versions used:
torch 2.15, transformers 5.24, sentence-transformers 6.2, tokenizers 0.23):

    /work/venv-ref/bin/python scripts/golden_embed.py \
        --minilm /work/models-cache/all-minilm-l6-v2 --out tests/fixtures/embed

Writes, under --out:
  minilm.json              all-MiniLM-L6-v2 vectors of TEXTS (sentence-transformers, from the
                           local model folder; the folder itself is not copied)
  tiny-roberta/            random-weight RoBERTa (seed 0, CLS pooling, 38-token limit) with a
                           tiny byte-level BPE tokenizer, saved as a sentence-transformers folder
  tiny-roberta.json        its reference vectors
  tiny-qwen3/              random-weight Qwen3 decoder (seed 0, last-token pooling, left
                           padding, a query prompt), sentence-transformers folder
  tiny-qwen3.json          its reference vectors for documents and for queries (with prompt)

Every reference vector is computed one text at a time (no padding), so the fixtures are the
reference implementation's own outputs, independent of batching.
"""

import argparse
import json
import os
import shutil

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3Model, RobertaConfig, RobertaModel

SEED = 0

LONG = "\n".join(
    f"def handler_{i}(request, retries={i}):\n"
    f"    \"\"\"Handle request number {i} and retry on failure.\"\"\"\n"
    f"    for attempt in range(retries):\n"
    f"        if request.send(attempt * {i}):\n"
    f"            return attempt\n"
    f"    raise TimeoutError('handler {i} gave up')\n"
    for i in range(40)
)

TEXTS = [
    "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b",
    "Parse a configuration file and return a dictionary of its sections.",
    "public static int max(int[] xs) {\n    int m = Integer.MIN_VALUE;\n    for (int x : xs) m = Math.max(m, x);\n    return m;\n}",
    "class LRUCache:\n    def __init__(self, capacity):\n        self.capacity = capacity\n        self.items = {}",
    "Ünïcödé façade — naïve café: 東京 and emoji 🚀 in a docstring.",
    "x",
    LONG,
]

QUERIES = [
    "def add(a, b):\nReturn the sum of a and b.",
    "find the maximum of an integer array",
]


def reference(model, texts, **kw):
    return [model.encode([t], batch_size=1, convert_to_numpy=True, **kw)[0].tolist() for t in texts]


def token_counts(model, texts, prompt=""):
    tok = model.tokenizer
    return [len(tok(prompt + t, add_special_tokens=True)["input_ids"]) for t in texts]


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
        f.write("\n")


def minilm(folder, out):
    model = SentenceTransformer(folder, device="cpu")
    write_json(
        os.path.join(out, "minilm.json"),
        {
            "model": "sentence-transformers/all-MiniLM-L6-v2",
            "max_seq_length": model.max_seq_length,
            "texts": TEXTS,
            "full_token_counts": token_counts(model, TEXTS),
            "vectors": reference(model, TEXTS),
        },
    )


def bpe_tokenizer(specials, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXTS + QUERIES, trainer)
    return tok


def perturb(model):
    """Random weights far enough from the default init that every parameter matters."""
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.2
            if name.endswith("norm.weight") or "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.5 * noise)
            else:
                p.copy_(noise)


def save_st(model, folder):
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.save(folder)
    for junk in ("README.md",):
        p = os.path.join(folder, junk)
        if os.path.exists(p):
            os.remove(p)


def tiny_roberta(out):
    torch.manual_seed(SEED)
    raw = bpe_tokenizer(["<s>", "<pad>", "</s>", "<unk>", "<mask>"], 400)
    raw.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    max_len = 38
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=max_len,
    )
    config = RobertaConfig(
        vocab_size=raw.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=max_len + 2,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        hidden_act="gelu",
    )
    net = RobertaModel(config, add_pooling_layer=False)
    perturb(net)
    folder = os.path.join(out, "tiny-roberta")
    tmp = folder + ".hf"
    net.save_pretrained(tmp)
    hf_tok.save_pretrained(tmp)
    st = SentenceTransformer(
        modules=[Transformer(tmp, max_seq_length=max_len), Pooling(32, "cls"), Normalize()],
        device="cpu",
    )
    save_st(st, folder)
    shutil.rmtree(tmp)
    st = SentenceTransformer(folder, device="cpu")
    write_json(
        os.path.join(out, "tiny-roberta.json"),
        {
            "max_seq_length": st.max_seq_length,
            "texts": TEXTS,
            "full_token_counts": token_counts(st, TEXTS),
            "vectors": reference(st, TEXTS),
        },
    )


def tiny_qwen3(out):
    torch.manual_seed(SEED)
    raw = bpe_tokenizer(["<|endoftext|>"], 400)
    raw.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>",
        special_tokens=[("<|endoftext|>", raw.token_to_id("<|endoftext|>"))],
    )
    max_len = 64
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        padding_side="left",
        model_max_length=max_len,
    )
    eot = raw.token_to_id("<|endoftext|>")
    config = Qwen3Config(
        vocab_size=raw.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        pad_token_id=eot,
        eos_token_id=eot,
        bos_token_id=eot,
    )
    net = Qwen3Model(config)
    perturb(net)
    folder = os.path.join(out, "tiny-qwen3")
    tmp = folder + ".hf"
    net.save_pretrained(tmp)
    hf_tok.save_pretrained(tmp)
    prompts = {"query": "Instruct: find the code\nQuery:", "document": ""}
    st = SentenceTransformer(
        modules=[
            Transformer(tmp, max_seq_length=max_len, tokenizer_args={"padding_side": "left"}),
            Pooling(32, "lasttoken"),
            Normalize(),
        ],
        prompts=prompts,
        device="cpu",
    )
    save_st(st, folder)
    shutil.rmtree(tmp)
    st = SentenceTransformer(folder, device="cpu")
    write_json(
        os.path.join(out, "tiny-qwen3.json"),
        {
            "max_seq_length": st.max_seq_length,
            "texts": TEXTS,
            "full_token_counts": token_counts(st, TEXTS),
            "vectors": reference(st, TEXTS),
            "queries": QUERIES,
            "query_vectors": reference(st, QUERIES, prompt_name="query"),
        },
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minilm", default="/work/models-cache/all-minilm-l6-v2")
    ap.add_argument("--out", default="tests/fixtures/embed")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(2)
    minilm(args.minilm, args.out)
    tiny_roberta(args.out)
    tiny_qwen3(args.out)


if __name__ == "__main__":
    main()
