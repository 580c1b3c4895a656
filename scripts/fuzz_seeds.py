#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs and the constructed crash inputs under
tests/fixtures/fuzz/<target>/ (replayed by tests/fuzz_regressions.rs, and a corpus for
`cargo fuzz run`). Standard library only. Re-run from the repository root:

    python3 scripts/fuzz_seeds.py

`seed-*` files are valid inputs that reach deep into each target; `crash-*` files are inputs
that crashed a target before its fix, each rebuilt here from what fuzzing found so that it
stays small and says what it exercises. (A crash input saved by the fuzzer itself would be
copied into the folder as is.) Inputs of two parts start with the first part's length as a
little-endian u16 (`repohop::fuzzing::split`); `"*"` in a symbol cache stands for this
version and for the source's hash (see `repohop::fuzzing::symbol_cache`).
"""

import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "fuzz")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def join(first, second):
    if isinstance(first, str):
        first = first.encode()
    if isinstance(second, str):
        second = second.encode()
    return struct.pack("<H", len(first)) + first + second


def floats(n, seed=1):
    # Small deterministic values; the models only have to run, not to be right.
    return [((i * 7 + seed * 13) % 17 - 8) / 16.0 for i in range(n)]


# --- GGUF -----------------------------------------------------------------------------------

U32, F32, STRING = 4, 6, 8


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(metadata, tensors, alignment=32):
    """metadata: [(key, type, value)]; tensors: [(name, dims innermost first, data floats or
    None, offset override)] written as F32."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, ty, value in metadata:
        out += gguf_string(key) + struct.pack("<I", ty)
        if ty == U32:
            out += struct.pack("<I", value)
        elif ty == F32:
            out += struct.pack("<f", value)
        else:
            out += gguf_string(value)
    blobs, offset = [], 0
    for name, dims, data, override in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", 0, offset if override is None else override)
        blob = struct.pack(f"<{len(data)}f", *data) if data else b""
        blob += b"\0" * (-len(blob) % alignment)
        blobs.append(blob)
        offset += len(blob)
    out += b"\0" * (-len(out) % alignment)
    return out + b"".join(blobs)


def qwen2_gguf(context=32, edit=None, alignment=32):
    hidden, heads, kv, hd, inter, vocab = 8, 2, 1, 4, 16, 16
    md = [
        ("general.architecture", STRING, "qwen2"),
        ("general.alignment", U32, alignment),
        ("qwen2.embedding_length", U32, hidden),
        ("qwen2.attention.head_count", U32, heads),
        ("qwen2.attention.head_count_kv", U32, kv),
        ("qwen2.block_count", U32, 1),
        ("qwen2.feed_forward_length", U32, inter),
        ("qwen2.context_length", U32, context),
        ("qwen2.rope.freq_base", F32, 10000.0),
        ("qwen2.attention.layer_norm_rms_epsilon", F32, 1e-6),
    ]
    shapes = [
        ("token_embd.weight", [hidden, vocab]),
        ("output_norm.weight", [hidden]),
        ("blk.0.attn_norm.weight", [hidden]),
        ("blk.0.ffn_norm.weight", [hidden]),
        ("blk.0.attn_q.weight", [hidden, heads * hd]),
        ("blk.0.attn_k.weight", [hidden, kv * hd]),
        ("blk.0.attn_v.weight", [hidden, kv * hd]),
        ("blk.0.attn_output.weight", [heads * hd, hidden]),
        ("blk.0.ffn_gate.weight", [hidden, inter]),
        ("blk.0.ffn_up.weight", [hidden, inter]),
        ("blk.0.ffn_down.weight", [inter, hidden]),
    ]
    tensors = []
    for i, (name, dims) in enumerate(shapes):
        n = 1
        for d in dims:
            n *= d
        data = [1.0] * n if "norm" in name else floats(n, i)
        tensors.append([name, dims, data, None])
    if edit:
        edit(tensors)
    return gguf(md, tensors, alignment or 32)


def gguf_seeds():
    t = "gguf_header"
    write(t, "seed-qwen2.gguf", qwen2_gguf())

    # Crashes before the fix:
    # - an offset near 2^64: the end of the tensor overflowed (debug: panic; release: wrapped
    #   past the truncation check, then a huge read).
    def far(ts):
        ts[1][3] = 2**64 - 16

    write(t, "crash-offset-overflow.gguf", qwen2_gguf(edit=far))

    # - dimensions whose product overflows usize inside candle's element count.
    def huge(ts):
        ts[1][1] = [2**40, 2**40]
        ts[1][2] = None

    write(t, "crash-elem-count-overflow.gguf", qwen2_gguf(edit=huge))

    # - a tensor with no elements: candle built an f32 slice on a dangling u8 pointer (UB,
    #   caught by the standard library's debug precondition checks as an abort).
    def empty(ts):
        ts[1][1] = [0]
        ts[1][2] = None

    write(t, "crash-zero-size-tensor.gguf", qwen2_gguf(edit=empty))

    # - a context length of 2^32 - 1: the rotary tables (context × head_dim / 2 floats) were
    #   allocated at load, 32 GiB.
    write(t, "crash-huge-context.gguf", qwen2_gguf(context=2**32 - 1))

    # - an alignment of 0: candle divided the header's end by it.
    write(t, "crash-zero-alignment.gguf", qwen2_gguf(alignment=0))


# --- safetensors ----------------------------------------------------------------------------


def safetensors(tensors):
    """tensors: [(name, shape, floats)] as F32."""
    header, blob = {}, b""
    for name, shape, data in tensors:
        raw = struct.pack(f"<{len(data)}f", *data)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def filled(shapes):
    out = []
    for i, (name, shape) in enumerate(shapes):
        n = 1
        for d in shape:
            n *= d
        data = [1.0] * n if "norm" in name.lower() and "bias" not in name else floats(n, i)
        out.append((name, shape, data))
    return out


def qwen_config(model_type, **kw):
    c = {
        "model_type": model_type,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 4,
        "num_hidden_layers": 1,
        "intermediate_size": 16,
        "vocab_size": 16,
        "max_position_embeddings": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    }
    c.update(kw)
    return json.dumps(c)


def qwen_weights(qk_norm):
    h, q, kv, inter, vocab = 8, 8, 4, 16, 16
    p = "model.layers.0."
    shapes = [
        ("model.embed_tokens.weight", [vocab, h]),
        ("model.norm.weight", [h]),
        (p + "input_layernorm.weight", [h]),
        (p + "post_attention_layernorm.weight", [h]),
        (p + "self_attn.q_proj.weight", [q, h]),
        (p + "self_attn.k_proj.weight", [kv, h]),
        (p + "self_attn.v_proj.weight", [kv, h]),
        (p + "self_attn.o_proj.weight", [h, q]),
        (p + "mlp.gate_proj.weight", [inter, h]),
        (p + "mlp.up_proj.weight", [inter, h]),
        (p + "mlp.down_proj.weight", [h, inter]),
    ]
    if qk_norm:
        shapes += [(p + "self_attn.q_norm.weight", [4]), (p + "self_attn.k_norm.weight", [4])]
    else:
        shapes += [(p + "self_attn.q_proj.bias", [q]), (p + "self_attn.k_proj.bias", [kv]),
                   (p + "self_attn.v_proj.bias", [kv])]
    return safetensors(filled(shapes))


def roberta_config(**kw):
    c = {
        "model_type": "roberta",
        "hidden_size": 8,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 16,
        "vocab_size": 16,
        "max_position_embeddings": 20,
        "type_vocab_size": 1,
        "pad_token_id": 1,
        "layer_norm_eps": 1e-5,
        "hidden_act": "gelu",
    }
    c.update(kw)
    return json.dumps(c)


def roberta_weights():
    h, inter = 8, 16
    p = "encoder.layer.0."
    shapes = [
        ("embeddings.word_embeddings.weight", [16, h]),
        ("embeddings.position_embeddings.weight", [20, h]),
        ("embeddings.token_type_embeddings.weight", [1, h]),
        ("embeddings.LayerNorm.weight", [h]),
        ("embeddings.LayerNorm.bias", [h]),
    ]
    for n in ["query", "key", "value"]:
        shapes += [(p + f"attention.self.{n}.weight", [h, h]), (p + f"attention.self.{n}.bias", [h])]
    shapes += [
        (p + "attention.output.dense.weight", [h, h]),
        (p + "attention.output.dense.bias", [h]),
        (p + "attention.output.LayerNorm.weight", [h]),
        (p + "attention.output.LayerNorm.bias", [h]),
        (p + "intermediate.dense.weight", [inter, h]),
        (p + "intermediate.dense.bias", [inter]),
        (p + "output.dense.weight", [h, inter]),
        (p + "output.dense.bias", [h]),
        (p + "output.LayerNorm.weight", [h]),
        (p + "output.LayerNorm.bias", [h]),
    ]
    return safetensors(filled(shapes))


def safetensors_seeds():
    t = "safetensors_header"
    write(t, "seed-qwen2.bin", join(qwen_config("qwen2"), qwen_weights(False)))
    # Qwen3 names serve both the generator's loader and the Qwen3 embedder's.
    write(t, "seed-qwen3.bin", join(qwen_config("qwen3"), qwen_weights(True)))
    write(t, "seed-roberta.bin", join(roberta_config(), roberta_weights()))

    # Crashes before the fix:
    # - RoBERTa positions start at pad_token_id + 1: u32::MAX overflowed.
    write(t, "crash-roberta-pad-overflow.bin",
          join(roberta_config(pad_token_id=2**32 - 1), roberta_weights()))
    # - the embedders reserved room for num_hidden_layers layers before reading any.
    write(t, "crash-embed-huge-layers.bin",
          join(roberta_config(num_hidden_layers=2**60), roberta_weights()))
    # - the Qwen3 embedder built head_dim / 2 rotary frequencies before reading any weight.
    write(t, "crash-embed-huge-head-dim.bin",
          join(qwen_config("qwen3", head_dim=2**40), qwen_weights(True)))
    # - the generator allocated rotary tables for the whole context at load.
    write(t, "crash-huge-context.bin",
          join(qwen_config("qwen2", max_position_embeddings=2**40), qwen_weights(False)))


# --- tokenizer.json -------------------------------------------------------------------------


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def byte_level_tokenizer(**over):
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab["Ġr"] = 256
    vocab["re"] = 257
    special = [{"id": 258, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                "rstrip": False, "normalized": False, "special": True}]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": ["Ġ r", "r e"]},
    }
    tok.update(over)
    return json.dumps(tok, ensure_ascii=False)


def wordpiece_tokenizer(**over):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "def", "f", "x", "return", "##e", "(", ")", ":"]
    special = [{"id": i, "content": w, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i, w in enumerate(words[:4])]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]},
            },
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {w: i for i, w in enumerate(words)}},
    }
    tok.update(over)
    return json.dumps(tok, ensure_ascii=False)


def tokenizer_seeds():
    t = "tokenizer_json"
    write(t, "seed-byte-level-bpe.json", byte_level_tokenizer())
    write(t, "seed-wordpiece-template.json", wordpiece_tokenizer())

    # Crashes before the fix:
    # - a Strip decoder asked to strip more characters than a token has: index underflow in
    #   the tokenizers crate when decoding a token made only of that character.
    write(t, "crash-strip-decoder.json", wordpiece_tokenizer(
        decoder={"type": "Strip", "content": "f", "start": 0, "stop": 3}))
    # - a template naming a special token it does not define: a map lookup panics on encode.
    pp = json.loads(wordpiece_tokenizer())["post_processor"]
    del pp["special_tokens"]["[SEP]"]
    write(t, "crash-template-undefined-token.json", wordpiece_tokenizer(post_processor=pp))
    # - a single-sequence template that reads the pair's sequence: an index out of bounds.
    pp = json.loads(wordpiece_tokenizer())["post_processor"]
    pp["single"] = pp["pair"]
    write(t, "crash-template-single-reads-pair.json", wordpiece_tokenizer(post_processor=pp))


# --- DevEval tasks --------------------------------------------------------------------------

SOURCE = '''import os


def greet(name):
    """Say hello."""
    prefix = "Hello, "
    return prefix + name


class Box:
    def size(self):
        return 1
'''


def task(**kw):
    t = {
        "namespace": "pkg.mod.greet",
        "type": "function",
        "project_path": "proj",
        "completion_path": "proj/pkg/mod.py",
        "signature_position": [4, 4],
        "body_position": [6, 7],
        "dependency": {"intra_class": [], "intra_file": [], "cross_file": []},
        "requirement": {"Functionality": "Greets.", "Arguments": ":param name: str."},
        "tests": ["tests/test_mod.py::test_greet"],
        "indent": 4,
    }
    t.update(kw)
    return json.dumps(t)


def task_seeds():
    t = "task_jsonl"
    lines = [task(),
             task(namespace="pkg.mod.Box.size", type="method", signature_position=[11, 11],
                  body_position=[12, 12], indent=8),
             json.dumps({"repo": "proj", "file": "pkg/mod.py", "target": "pkg.mod.greet",
                         "tests": ["t.py::t"]}),
             json.dumps({"repo": "proj", "file": "pkg/mod.py", "line": 6,
                         "ground_truth": 'prefix = "Hello, "'})]
    write(t, "seed-deveval.bin", join("\n".join(lines) + "\n", SOURCE))

    # Crashes before the fix:
    # - a body whose lines start with different multi-byte whitespace characters sharing
    #   their first bytes (U+2000, U+2001): the common margin was cut inside a character.
    src = "def greet(name):\n\u2000x = 1\n\u2001return x\n"
    write(t, "crash-reindent-multibyte.bin",
          join(task(signature_position=[1, 1], body_position=[2, 3]) + "\n", src))
    # - an indent of 2^60 spaces: the splice allocated it.
    write(t, "crash-huge-indent.bin", join(task(indent=2**60) + "\n", SOURCE))


# --- Python and Java files ------------------------------------------------------------------


def source_seeds():
    with open(os.path.join(ROOT, "tests/fixtures/dyproj/fspath/path.py"), "rb") as f:
        write("python_repo", "seed-path.py", f.read())
    write("python_repo", "seed-nested.py",
          "import os\nfrom . import text as t\n\n\nclass A(B):\n    '''Doc.'''\n    x = 1\n\n"
          "    @property\n    def m(self, y=2):\n        def inner():\n            return os.sep\n"
          "        return self.x + inner()\n\n\ndef f(*args, **kw):\n    return A().m\n\n\n"
          "def f(a):\n    return a\n")
    # Crash before the fix: a target name longer than a candidate's qualified name, with a
    # multi-byte character where the two tails were aligned (the first line is also tried
    # as a target).
    write("python_repo", "crash-candidates-multibyte.py", "#\u00e9\u00e9\u00e9\u00e9\u00e9\ndef f():\n    pass\n")
    java = os.path.join(ROOT, "tests/fixtures/javaproj/src/main/java/com/acme")
    for name in ["shapes/Circle.java", "App.java"]:
        with open(os.path.join(java, name), "rb") as f:
            write("java_repo", "seed-" + os.path.basename(name), f.read())


# --- symbol cache and vector index ----------------------------------------------------------


CACHED = (
    "import os\nfrom . import util\n\n\nclass A(util.Base):\n    def m(self, x):\n"
    "        return os.sep + x\n\n\ndef f(y):\n    \"\"\"Doc.\"\"\"\n    return A().m(y)\n"
)


def span(text, start, end):
    """Span of text[start:end] (byte offsets of ASCII text)."""
    return {"start_byte": start, "end_byte": end,
            "start_line": text.count("\n", 0, start) + 1,
            "end_line": text.count("\n", 0, end) + 1}


def cached_symbols(text):
    """The symbols the Python front end extracts from CACHED, written as the cache holds them."""
    def at(s, after=0):
        return text.index(s, after)

    def line_end(i):
        return text.index("\n", i)

    m0 = at("def m")
    m_body = at("return os")
    f0 = at("def f")
    f_body = at('"""Doc')
    c0 = at("class A")
    def fn(qual, name, kind, cls, start, sig_end, body, end, doc, params, calls):
        return {"qualname": qual, "name": name, "kind": kind, "path": "pkg/mod.py",
                "class": cls, "span": span(text, start, end),
                "signature": span(text, start, sig_end), "body": span(text, body, end),
                "docstring": doc, "params": params,
                "calls": [{"callee": c, "line": l} for c, l in calls]}
    return {
        "path": "pkg/mod.py", "lang": "python", "module": "pkg.mod",
        "functions": [
            fn("pkg.mod.A.m", "m", "method", "pkg.mod.A", m0, at(":", m0) + 1, m_body,
               line_end(m_body), None, ["self", "x"], []),
            fn("pkg.mod.f", "f", "function", None, f0, at(":", f0) + 1, f_body,
               line_end(at("return A")), "Doc.", ["y"], [("A", 12), ("A().m", 12)]),
        ],
        "classes": [{"qualname": "pkg.mod.A", "name": "A", "path": "pkg/mod.py",
                     "span": span(text, c0, line_end(m_body)), "bases": ["util.Base"],
                     "members": [], "methods": ["pkg.mod.A.m"]}],
        "imports": [
            {"module": "os", "name": None, "alias": None, "level": 0, "is_static": False,
             "is_wildcard": False, "line": 1, "scope": None},
            {"module": "", "name": "util", "alias": None, "level": 1, "is_static": False,
             "is_wildcard": False, "line": 2, "scope": None},
        ],
        "parse_errors": 0,
    }


def cache_seeds():
    t = "symbol_cache"
    header = json.dumps({"format": "repohop-symbols", "version": 1, "repohop": "*"})
    entry = {"hash": "*", "module": "pkg.mod", "symbols": cached_symbols(CACHED)}
    write(t, "seed-entry.bin", join(header + "\n" + json.dumps({"pkg/mod.py": entry}), CACHED))
    # A stale entry (another hash): the file is parsed.
    entry["hash"] = "0" * 64
    write(t, "seed-stale.bin", join(header + "\n" + json.dumps({"pkg/mod.py": entry}), CACHED))


def vector_seeds():
    t = "vector_sidecar"

    def index(rows, dim, values):
        side = {"format": 1, "model_id": "m", "dim": dim, "matrix_sha256": "fuzz",
                "rows": [{"key": f"pkg/mod.py::f{i}", "qualname": f"pkg.mod.f{i}",
                          "path": "pkg/mod.py", "start_line": i + 1, "hash": "00" * 16}
                         for i in range(rows)]}
        return join(json.dumps(side), safetensors([("vectors", [rows, dim], values)]))

    write(t, "seed-two-rows.bin", index(2, 4, floats(8)))
    write(t, "seed-dim-zero.bin", index(3, 0, []))


def main():
    gguf_seeds()
    safetensors_seeds()
    tokenizer_seeds()
    task_seeds()
    source_seeds()
    vector_seeds()
    cache_seeds()


if __name__ == "__main__":
    main()
