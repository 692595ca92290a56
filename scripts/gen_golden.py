#!/usr/bin/env python3
"""Golden FP8 conversion vectors from ml_dtypes: a second, independent oracle.

Writes (committed, read by tests/test_cast_golden.cpp, which needs no Python):
  tests/data/golden_fp8_edges.txt   one line per input: fp32 bits and four codes
                                    (e4m3 sat, e4m3 nosat, e5m2 sat, e5m2 nosat) in hex
                                    - every edge case of docs/numerics.md, "Formats"
                                    - all 256 codes of each format, their fp32 neighbours
                                      (nextafter up/down) and the midpoints between consecutive codes
                                      and the midpoints' neighbours
  tests/data/golden_fp8_random.bin.gz  codes for N random finite inputs (same 4 codes per input);
                                    the inputs are not stored: both sides regenerate them with
                                    splitmix64(seed + i) -> sign, exponent in [-24, 18], 23 random
                                    mantissa bits.

ml_dtypes' astype is non-saturating (overflow -> NaN for e4m3fn, Inf for e5m2). The saturating
codes are ml_dtypes' astype of the input clipped to +-max, which is SATFINITE's definition:
clipping maps exactly the inputs that would overflow to max and leaves all others alone.

Usage: .venv/bin/python scripts/gen_golden.py [--count 1048576] [--out tests/data]
"""
import argparse
import gzip
import os

import ml_dtypes
import numpy as np

SEED = 0x5EED_F8F8
FORMATS = [(ml_dtypes.float8_e4m3fn, 448.0), (ml_dtypes.float8_e5m2, 57344.0)]


def splitmix64(x):
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def random_inputs(n):
    with np.errstate(over="ignore"):
        r = splitmix64(np.uint64(SEED) + np.arange(n, dtype=np.uint64))
    sign = (r >> np.uint64(63)).astype(np.uint32)
    exp = ((r >> np.uint64(32)) % np.uint64(43)).astype(np.int64) - 24  # unbiased exponent in [-24, 18]
    mant = (r & np.uint64(0x7FFFFF)).astype(np.uint32)
    bits = (sign << np.uint32(31)) | ((exp + 127).astype(np.uint32) << np.uint32(23)) | mant
    return bits.view(np.float32)


def codes(x):
    out = []
    for dtype, fmax in FORMATS:
        with np.errstate(invalid="ignore", over="ignore"):
            sat = np.clip(x, -fmax, fmax).astype(dtype).view(np.uint8)  # NaN passes through clip
            nosat = x.astype(dtype).view(np.uint8)
        out += [sat, nosat]
    return np.stack(out, axis=1)  # (n, 4)


def f32(v):
    return np.array(v, dtype=np.float32)


def edge_inputs():
    vals = [0.0, -0.0, 1.0, -1.0, 448.0, 464.0, 465.0, 480.0, 500.0, -464.0, -465.0,
            57344.0, 61439.0, 61440.0, 65536.0, -61440.0, 2.0**-10, 1.5 * 2.0**-10, -(2.0**-11),
            2.0**-9, 2.0**-6, 2.0**-14, 2.0**-16, 2.0**-17, 1.5 * 2.0**-17, 2.0**-149, -(2.0**-149),
            np.inf, -np.inf, np.nan, -np.nan, float(np.float32(3.4028235e38)), 1.1865234375,
            1.0e-30, -1.0e-30, 1e10, -1e10]
    xs = [f32(v) for v in vals]
    xs.append(np.array([0x3F97E000], dtype=np.uint32).view(np.float32)[0])  # REFERENCE: double rounding case
    xs.append(np.array([0xFFC00000], dtype=np.uint32).view(np.float32)[0])  # -NaN
    xs.append(np.array([0x7F800001], dtype=np.uint32).view(np.float32)[0])  # signalling NaN
    for dtype, _ in FORMATS:
        allc = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
        finite = np.sort(allc[np.isfinite(allc)])
        for v in finite:
            xs += [v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))]
        mids = (finite[:-1].astype(np.float64) + finite[1:].astype(np.float64)) / 2
        for m in mids:
            mf = np.float32(m)
            assert float(mf) == m, "fp8 midpoints are exact in fp32"
            xs += [mf, np.nextafter(mf, np.float32(np.inf)), np.nextafter(mf, np.float32(-np.inf))]
    arr = np.array(xs, dtype=np.float32)
    _, idx = np.unique(arr.view(np.uint32), return_index=True)
    return arr[np.sort(idx)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1 << 20)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    e = edge_inputs()
    c = codes(e)
    with open(os.path.join(a.out, "golden_fp8_edges.txt"), "w") as f:
        f.write(f"# fp32_bits e4m3_sat e4m3_nosat e5m2_sat e5m2_nosat  (ml_dtypes {ml_dtypes.__version__})\n")
        for x, row in zip(e.view(np.uint32), c):
            f.write(f"{x:08x} {row[0]:02x} {row[1]:02x} {row[2]:02x} {row[3]:02x}\n")

    r = random_inputs(a.count)
    assert np.all(np.isfinite(r))
    rc = codes(r)
    payload = np.array([a.count, SEED], dtype=np.uint64).tobytes() + rc.tobytes()
    with open(os.path.join(a.out, "golden_fp8_random.bin.gz"), "wb") as f:
        f.write(gzip.compress(payload, compresslevel=9, mtime=0))  # mtime=0: reproducible bytes
    print(f"wrote {len(e)} edge vectors and {a.count} random vectors (ml_dtypes {ml_dtypes.__version__})")


if __name__ == "__main__":
    main()
