#!/usr/bin/env python3
"""Writes fixture.safetensors: one small tensor of every dtype rumus reads,
laid out as Python's `safetensors` writes files (compact JSON header with
__metadata__, tensors ordered by alignment then name, header padded with
spaces to 8 bytes, little-endian data). Standard library only.

    python3 make_safetensors_fixture.py fixture.safetensors
"""
import json
import struct
import sys

tensors = {
    # name: (dtype, shape, struct format, values)
    "f32": ("F32", [2, 3], "f", [0.5, -1.25, 3.0, 1e-3, -0.0, 7.5]),
    "f64": ("F64", [3], "d", [1.0 / 3.0, -2.5, 1e10]),
    "f16": ("F16", [2, 2], "e", [0.5, -2.0, 65504.0, 6.103515625e-05]),
    "i32": ("I32", [2], "i", [-7, 2147483647]),
    "i64": ("I64", [2, 1], "q", [-9007199254740993, 42]),
    "u8": ("U8", [4], "B", [0, 1, 128, 255]),
    "scalar": ("F32", [], "f", [2.5]),
}
# bf16: the top 16 bits of exactly representable float32 values.
bf16_values = [1.0, -0.5, 3.140625]
bf16_bytes = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in bf16_values)

payload = {name: struct.pack("<%d%s" % (len(v), fmt), *v) for name, (_, _, fmt, v) in tensors.items()}
payload["bf16"] = bf16_bytes
dtypes = {name: (dt, shape) for name, (dt, shape, _, _) in tensors.items()}
dtypes["bf16"] = ("BF16", [3])

size = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "U8": 1}
order = sorted(payload, key=lambda n: (-size[dtypes[n][0]], n))
header = {"__metadata__": {"producer": "make_safetensors_fixture.py"}}
offset = 0
for name in order:
    header[name] = {"dtype": dtypes[name][0], "shape": dtypes[name][1],
                    "data_offsets": [offset, offset + len(payload[name])]}
    offset += len(payload[name])
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(payload[n] for n in order))
