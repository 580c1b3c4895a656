#!/usr/bin/env python3
"""A safetensors file of random values in another file's layout, for GPU speed checks where the
weights cannot travel (`scripts/gpu_check.sh`): only the source's header does.

    python3 scripts/synth_safetensors.py HEADER OUT

HEADER: the first bytes of a safetensors file, at least up to the end of its header (8 + the
length it names). OUT gets the same header and random data: norm weights 1, biases 0, integer
tensors 0..n-1 along their last axis (position ids), other floats N(0, 0.02). Needs numpy.
"""

import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64, "I32": np.int32}


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        raw = f.read(8)
        (n,) = struct.unpack("<Q", raw)
        header_bytes = f.read(n)
    header = json.loads(header_bytes)
    rng = np.random.default_rng(7)
    tensors = sorted(
        ((k, v) for k, v in header.items() if k != "__metadata__"),
        key=lambda kv: kv[1]["data_offsets"][0],
    )
    with open(out, "wb") as f:
        f.write(raw + header_bytes)
        at = 0
        for name, t in tensors:
            start, end = t["data_offsets"]
            if start != at or DTYPES.get(t["dtype"]) is None:
                sys.exit(f"{name}: unsupported layout or dtype {t['dtype']}")
            dtype, shape = DTYPES[t["dtype"]], t["shape"]
            if np.issubdtype(dtype, np.integer):
                a = np.broadcast_to(np.arange(shape[-1] if shape else 1), shape)
            elif name.endswith("bias"):
                a = np.zeros(shape)
            elif "norm" in name.lower():
                a = np.ones(shape)
            else:
                a = rng.normal(0.0, 0.02, shape)
            data = np.ascontiguousarray(a, dtype=dtype).tobytes()
            if len(data) != end - start:
                sys.exit(f"{name}: {len(data)} bytes for {end - start}")
            f.write(data)
            at = end


if __name__ == "__main__":
    main()
