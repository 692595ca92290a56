#!/usr/bin/env python3
"""Writes the small HDF5 files tests/test_trace_reader.cpp reads (tests/data/trace_*.h5).

They are written by h5py, not by fp8sim's own writer, so the C++ reader is tested against a
foreign producer: every stored dtype (float32 little and big endian, bfloat16 as uint16 and as
int16, float16 as an HDF5 float and as uint16) with bit patterns from a formula the C++ test
recomputes, plus one file per way a trace can be wrong.

Usage: .venv/bin/python scripts/make_trace_test_files.py [OUT_DIR]   (default tests/data)
Needs numpy and h5py only.
"""
import argparse
import os

import h5py
import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data")  # main() sets it from the arguments


def pattern32(n):
    """bits[i] = (i * 0x9E3779B1 + 0x7F4A7C15) mod 2^32 (every exponent), except every 4th element:
    a NaN with payload 1 + i * 0x1000 (signalling ones included), negative when i & 8."""
    i = np.arange(n, dtype=np.uint64)
    b = ((i * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF).astype(np.uint64)
    nan = (0x7F800001 + i * 0x1000) | ((i & 8) << 28)
    return np.where(i % 4 == 0, nan, b).astype(np.uint32)


def pattern16(n):
    """The top halves of the formula, except every 4th element: 0x7C01 + i (an fp16 NaN with a
    payload), negative when i & 8."""
    i = np.arange(n, dtype=np.uint64)
    b = (((i * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF) >> 16).astype(np.uint64)
    nan = (0x7C01 + i) | ((i & 8) << 12)
    return np.where(i % 4 == 0, nan, b).astype(np.uint16)


def new_trace(path, **root):
    f = h5py.File(path, "w", libver=("v110", "v110"))
    f.attrs["format"] = "fp8sim-trace"
    f.attrs["format_version"] = np.int64(1)
    f.attrs["producer"] = "scripts/make_trace_test_files.py"
    for k, v in root.items():
        f.attrs[k] = v
    g = f.create_group("steps/step_000007")
    g.attrs["step"] = np.int64(7)
    return f, g


def add(g, role, name, data, **attrs):
    rg = g.require_group(role)
    kw = dict(chunks=True, shuffle=True, compression="gzip", fletcher32=True) if data.size else {}
    ds = rg.create_dataset(name, data=data, **kw)
    ds.attrs["role"] = role
    for k, v in attrs.items():
        ds.attrs[k] = v
    return ds


def main():
    global OUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?", default=OUT, help="where to write the files (default tests/data)")
    OUT = ap.parse_args().out_dir
    os.makedirs(OUT, exist_ok=True)
    p = lambda name: os.path.join(OUT, name)

    # 1. Every dtype, bit patterns from the formula, plus things a reader must ignore.
    f, g = new_trace(p("trace_h5py_dtypes.h5"), model_kind="generic",
                     model_config='{"name": "dtype-test"}', lr=np.float64(0.001), beta1=np.float64(0.9),
                     beta2=np.float64(0.95), eps=np.float64(1e-8), weight_decay=np.float64(0.1),
                     optimizer="torch.optim.AdamW", some_future_attribute="ignored")
    g.attrs["lr"] = np.float64(0.001)
    g.attrs["adamw_step"] = np.int64(6)
    g.attrs["an_unknown_step_attribute"] = np.int32(3)
    add(g, "weight", "f32_le", pattern32(15).view(np.float32).reshape(3, 5), dtype="float32", op="linear",
        module="m.a", layer=np.int64(0), unknown_attr="ignored")
    add(g, "weight", "f32_be", pattern32(7).view(np.float32).astype(">f4"), dtype="float32", op="linear",
        module="m.b", layer=np.int64(1))
    add(g, "activation", "bf16_u16", pattern16(16).reshape(4, 4), dtype="bfloat16", op="linear_input",
        module="m.a", modules="m.a,m.b", layer=np.int64(0))
    add(g, "activation", "bf16_i16", pattern16(5).view(np.int16), dtype="bfloat16", op="norm_input",
        module="m.n", layer=np.int64(0))
    add(g, "activation_grad", "f16_float", pattern16(24).view(np.float16).reshape(2, 3, 4), dtype="float16",
        op="linear_output_grad", module="m.a", layer=np.int64(0))
    add(g, "activation_grad", "f16_u16", pattern16(6), dtype="float16", op="linear_output_grad",
        module="m.b", layer=np.int64(1))
    g.create_group("notes_from_the_future")  # unknown group inside a step: ignored
    g["weight"]["a_soft_link"] = h5py.SoftLink("/steps/step_000007/weight/f32_le")  # not followed
    f.create_dataset("train/loss", data=np.array([3.0, 2.5], dtype=np.float32))  # outside /steps
    f.close()

    # 2. Not a trace: an HDF5 file without the root attributes.
    with h5py.File(p("trace_bad_no_attrs.h5"), "w") as f:
        f.create_dataset("x", data=np.zeros(4, dtype=np.float32))

    # 3. Wrong format name, 4. newer version, 5. no /steps group.
    with h5py.File(p("trace_bad_format_name.h5"), "w") as f:
        f.attrs["format"] = "some-other-format"
        f.attrs["format_version"] = np.int64(1)
    with h5py.File(p("trace_bad_version.h5"), "w") as f:
        f.attrs["format"] = "fp8sim-trace"
        f.attrs["format_version"] = np.int64(99)
        f.create_group("steps")
    with h5py.File(p("trace_bad_no_steps.h5"), "w") as f:
        f.attrs["format"] = "fp8sim-trace"
        f.attrs["format_version"] = np.int64(1)

    # 6.-11. One bad dataset each.
    bad = {
        "trace_bad_int32.h5": (np.arange(6, dtype=np.int32), {"dtype": "float32"}),
        "trace_bad_float64.h5": (np.arange(6, dtype=np.float64), {}),
        "trace_bad_u16_no_dtype.h5": (np.arange(6, dtype=np.uint16), {}),
        "trace_bad_zero_size.h5": (np.zeros((0, 4), dtype=np.float32), {"dtype": "float32"}),
        "trace_bad_dtype_mismatch.h5": (np.arange(6, dtype=np.float32), {"dtype": "bfloat16"}),
    }
    for name, (data, attrs) in bad.items():
        f, g = new_trace(p(name))
        add(g, "weight", "w", data, **attrs)
        f.close()
    f, g = new_trace(p("trace_bad_missing_role.h5"))
    rg = g.create_group("weight")
    rg.create_dataset("w", data=np.ones(4, dtype=np.float32))
    f.close()
    f, g = new_trace(p("trace_bad_unwritten.h5"))
    ds = g.create_group("grad").create_dataset("w", shape=(64, 64), dtype=np.float32, chunks=(16, 64))
    ds.attrs["role"] = "grad"
    f.close()
    f, g = new_trace(p("trace_bad_lzf.h5"))
    ds = g.create_group("grad").create_dataset("w", data=np.ones((8, 8), dtype=np.float32), compression="lzf")
    ds.attrs["role"] = "grad"
    f.close()
    for name in sorted(os.listdir(OUT)):
        if name.startswith("trace_") and name.endswith(".h5"):
            print(f"{os.path.join(OUT, name)}: {os.path.getsize(os.path.join(OUT, name))} bytes")


if __name__ == "__main__":
    main()
