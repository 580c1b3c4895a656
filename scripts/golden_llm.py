#!/usr/bin/env python3
"""Write tiny random-weight Qwen2 and Qwen3 checkpoints plus golden logits for tests/llm_*.rs.

Run with the reference venv: /work/venv-ref/bin/python scripts/golden_llm.py
Output: tests/fixtures/llm/{tokenizer.json, qwen2/, qwen3/} — each model folder holds
config.json, model.safetensors, tokenizer.json and golden.json (token ids, the reference
implementation's logits for every position, and its greedy continuation).
"""
import json
import os
import shutil

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "llm")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>",
            "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"]
VOCAB = 384  # model vocabulary (>= tokenizer vocabulary, as in real Qwen checkpoints)
CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "def load_config(path):\n    with open(path) as f:\n        return json.load(f)\n",
    "class Parser:\n    def parse(self, text):\n        return self.tokens(text)\n",
    "import os\nimport sys\nfrom collections import defaultdict\n",
    "The answer is one of the candidate functions listed above.\n",
    '["parse_args", "main", "run_server", "handle_request"]\n',
] * 20


def tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 64, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


def randomize(model, seed):
    """Default init leaves biases at 0 and norms at 1; perturb everything so each path counts."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def write(name, model, tok, seed, cfg):
    randomize(model, seed)
    model.eval()
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        p = os.path.join(d, extra)
        if os.path.exists(p):
            os.remove(p)
    tok.save(os.path.join(d, "tokenizer.json"))
    ids = tok.encode("def add(a, b):\n    return").ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
        greedy = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    golden = {
        "tokens": ids,
        "logits": [[round(x, 6) for x in row] for row in logits.tolist()],
        "greedy": greedy,
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f)
    gd = os.path.join(OUT, name + "-gguf")
    shutil.rmtree(gd, ignore_errors=True)
    os.makedirs(gd)
    write_gguf(os.path.join(gd, "model.gguf"), name, model, cfg)
    tok.save(os.path.join(gd, "tokenizer.json"))


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def write_gguf(path, arch, model, cfg):
    """The same weights as a llama.cpp-style GGUF (f32, so results match the safetensors)."""
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    if "head_dim" in cfg:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    for name, t in model.state_dict().items():
        if name in GGUF_NAMES:
            out = GGUF_NAMES[name]
        else:
            _, _, i, rest = name.split(".", 3)
            out = f"blk.{i}.{LAYER_NAMES[rest]}"
        w.add_tensor(out, t.detach().numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_foreign_gguf(path):
    """A llama-architecture GGUF: loading it must fail with a clear error."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    torch.manual_seed(0)
    tok = tokenizer()
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  bos_token_id=0, eos_token_id=2, torch_dtype="float32")
    write("qwen2", Qwen2ForCausalLM(Qwen2Config(**common)), tok, 1, common)
    q3 = dict(common, head_dim=16)
    write("qwen3", Qwen3ForCausalLM(Qwen3Config(**q3)), tok, 2, q3)
    write_foreign_gguf(os.path.join(OUT, "llama.gguf"))
    # More tokens than the tiny models' vocabulary: a tokenizer that does not fit them.
    tok.add_tokens([f"<extra_{i}>" for i in range(VOCAB)])
    tok.save(os.path.join(OUT, "tokenizer-too-big.json"))


if __name__ == "__main__":
    main()
