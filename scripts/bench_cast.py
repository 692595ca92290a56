#!/usr/bin/env python3
"""fp8sim bulk cast vs ml_dtypes astype, measured in the same run on the same machine.

Runs build/tests/bench/bench_cast (Google Benchmark, median of 5 repetitions) and times
ml_dtypes' `x.astype(float8_e4m3fn)` / `float8_e5m2` on the same 16M-element float32 input
(median of 5), then prints a Markdown table of elements/s, GB/s (4 B read + 1 B written per
element) and the ratio per core. ml_dtypes' astype is single-threaded, so the per-core ratio
compares one thread with one thread; the all-cores row uses every core for fp8sim.

Usage: .venv/bin/python scripts/bench_cast.py [--bench build/tests/bench/bench_cast] [--md OUT.md]
"""
import argparse
import json
import os
import platform
import subprocess
import time

import ml_dtypes
import numpy as np

N = 1 << 24


def make_input(n):
    rng = np.random.default_rng(0x1234567)
    u = rng.uniform(size=n)
    return (rng.standard_normal(n) * 10.0 ** (6 * u - 3)).astype(np.float32)


def time_mldtypes(x, dtype, reps=5):
    x.astype(dtype)  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        x.astype(dtype)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_atomic(path, text):
    """Writes text to path through a temporary file renamed over it (no partial file)."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(root, "build", "tests", "bench", "bench_cast"))
    ap.add_argument("--md", help="also write the table to this Markdown file")
    a = ap.parse_args()
    if not os.path.exists(a.bench):
        raise SystemExit(f"bench_cast: '{a.bench}' not found: build first (cmake --build build --target bench_cast)")

    out = subprocess.run([a.bench, "--benchmark_format=json", "--benchmark_filter=rne"],
                         check=True, capture_output=True, text=True).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"]  # BM_cast_e4m3_rne/16777216/1/...
        fmt = "e4m3" if "e4m3" in name else "e5m2"
        threads = int(b["threads"])
        rows[(fmt, threads)] = b["real_time"] / 1e3  # ms -> s

    x = make_input(N)
    ml = {"e4m3": time_mldtypes(x, ml_dtypes.float8_e4m3fn), "e5m2": time_mldtypes(x, ml_dtypes.float8_e5m2)}
    lines = [f"Machine: {cpu_name()}, {os.cpu_count()} cores; N = {N} fp32 elements; medians of 5.",
             f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}. Command: `scripts/bench_cast.py`.", "",
             "| format | implementation | threads | time (ms) | Melem/s | GB/s | ratio vs ml_dtypes (1 core) |",
             "|---|---|---|---|---|---|---|"]
    for fmt in ("e4m3", "e5m2"):
        t_ml = ml[fmt]
        lines.append(f"| {fmt} | ml_dtypes astype | 1 | {t_ml*1e3:.1f} | {N/t_ml/1e6:.0f} | {5*N/t_ml/1e9:.2f} | 1.0x |")
        for (f, th), t in sorted(rows.items()):
            if f == fmt:
                lines.append(f"| {fmt} | fp8sim bulk cast | {th} | {t*1e3:.1f} | {N/t/1e6:.0f} | {5*N/t/1e9:.2f} | {t_ml/t:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.md:
        write_atomic(a.md, text)


if __name__ == "__main__":
    main()
