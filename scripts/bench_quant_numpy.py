#!/usr/bin/env python3
"""Quantize throughput: fp8sim's CPU reference against numpy implementations of the same specs,
measured in the same run, and a check that both give the same codes.

Specs: e4m3:g128 (1x128 groups along the last dim, s = amax/448 in fp32, q = e4m3(x/s)) and
e4m3:g128:de=coat (COAT's dynamic range expansion, docs/numerics.md, in numpy float32 with
np.power / np.log2 in place of fp8sim's deterministic pow/log2). Per core: numpy is single-threaded,
so its CPU time (time.process_time) is compared with fp8sim's single-thread CPU time from Google
Benchmark, the median of --repeats measurements on both sides; on a loaded machine CPU time is the
fair measure. All cores: fp8sim's wall time with
every OpenMP thread (meaningful only on an idle machine).

  .venv/bin/python scripts/bench_quant_numpy.py --bench build/tests/bench/bench_quant \\
      --fp8sim build/fp8sim [--rows 2048 --cols 2048 --repeats 5] [--md OUT.md] [--json OUT.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np

from bench_cast import cpu_name, write_atomic  # this directory (the same machine line as the cast bench)

E4M3 = ml_dtypes.float8_e4m3fn


def make_data(rows, cols, seed=1):
    # Optimizer-state-like magnitudes: log-normal spanning ~10^6, random signs (as bench_quant.cpp).
    rng = np.random.default_rng(seed)
    mag = np.exp(rng.normal(-6.0, 2.0, size=(rows, cols)))
    sign = np.where(rng.integers(0, 2, size=(rows, cols)) == 1, 1.0, -1.0)
    return (mag * sign).astype(np.float32)


def quantize_g128(x):
    g = x.reshape(-1, 128)
    amax = np.abs(g).max(axis=1)
    s = amax / np.float32(448)
    s[s == 0] = np.float32(1)
    q = (g / s[:, None]).astype(E4M3)  # RNE; |x/s| <= 448, so ml_dtypes' NOSAT never overflows
    return q.reshape(x.shape), s


def quantize_coat(x):
    g = x.reshape(-1, 128)
    a = np.abs(g)
    mx = a.max(axis=1)
    mn = np.where(a > 0, a, np.float32(np.inf)).min(axis=1)
    mn[np.isinf(mn)] = 0
    maxv = (mx.astype(np.float64) + 1e-30).astype(np.float32)  # COAT adds 1e-30 in double
    minv = (mn.astype(np.float64) + 1e-30).astype(np.float32)
    r = maxv / minv
    c = np.sqrt(maxv) * np.sqrt(minv)
    with np.errstate(divide="ignore"):
        k = np.floor(np.log2(np.float32(100352)) / np.log2(r) * np.float32(16)) / np.float32(16)
    xe = np.where(np.signbit(g), np.float32(-1), np.float32(1)) * np.power(a / c[:, None], k[:, None])
    s = np.power(maxv / c, k) / np.float32(448)
    q = (xe / s[:, None]).astype(E4M3)
    return q.reshape(x.shape), s, k, c


def time_cpu(fn, x, repeats):
    """Median CPU time of `repeats` calls after a warm-up (the same statistic as fp8sim's side)."""
    fn(x)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn(x)
        times.append(time.process_time() - t0)
    return float(np.median(times))


def run_bench(binary, min_time, repetitions):
    """Google Benchmark's median over `repetitions` repetitions (each at least min_time long)."""
    out = subprocess.run([binary, "--benchmark_format=json", f"--benchmark_min_time={min_time}",
                          f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true",
                          "--benchmark_filter=BM_quantize_g128(_de_coat)?/"],
                         check=True, capture_output=True, text=True).stdout
    res = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name, arg = b["name"].split("/")[0], b["name"].split("/")[1]
        unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
        real_s = b["real_time"] * unit
        # bench_quant's own tensor (2048 x 2048, whatever --rows / --cols give numpy): its elements
        # per call are items/s x seconds per call
        res[(name, arg)] = {"cpu_s": b["cpu_time"] * unit, "real_s": real_s,
                            "elements": b["items_per_second"] * real_s,
                            "threads": int(b.get("threads", 1) if arg == "1" else b.get("threads", 0)),
                            "counter_threads": int(b.get("threads", 0))}
    return res


def check_codes(fp8sim, x, spec, numpy_codes):
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "x.npy"), x)
        subprocess.run([fp8sim, "quantize", "--spec", spec, "--in", os.path.join(d, "x.npy"), "--out",
                        os.path.join(d, "y.npy"), "--codes", os.path.join(d, "c")], check=True, capture_output=True)
        ours = np.load(os.path.join(d, "c.codes.npy"))
    return float((ours == numpy_codes.view(np.uint8)).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="path of the bench_quant Google Benchmark binary")
    ap.add_argument("--fp8sim", help="path of the fp8sim binary (to check the codes agree)")
    ap.add_argument("--rows", type=int, default=2048,
                    help="numpy's tensor (bench_quant's is always 2048 x 2048; ratios compare like sizes at the default)")
    ap.add_argument("--cols", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=9, help="numpy calls timed (median) and Google Benchmark repetitions")
    ap.add_argument("--min-time", type=float, default=0.5, help="Google Benchmark min time per repetition (s)")
    ap.add_argument("--json", help="write the table as JSON here")
    ap.add_argument("--md", help="also write the table to this Markdown file")
    args = ap.parse_args()

    def usage_error(msg):  # one line, exit status 2 (bad usage)
        print(f"bench_quant_numpy.py: error: {msg}", file=sys.stderr)
        sys.exit(2)

    if args.cols % 128:
        usage_error("--cols must be a multiple of 128")
    for flag, path in (("--bench", args.bench), ("--fp8sim", args.fp8sim)):
        if path and not os.access(path, os.X_OK):
            usage_error(f"{flag} '{path}' is not an executable file (build first: cmake --build build)")
    for flag, path in (("--md", args.md), ("--json", args.json)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            usage_error(f"{flag} '{path}': its directory does not exist")

    x = make_data(args.rows, args.cols)
    n = x.size
    rows = []
    bench = run_bench(args.bench, args.min_time, args.repeats)
    for label, bm, fn, spec in [("e4m3:g128", "BM_quantize_g128", quantize_g128, "e4m3:g128"),
                                ("e4m3:g128:de=coat", "BM_quantize_g128_de_coat", quantize_coat, "e4m3:g128:de=coat")]:
        t_np = time_cpu(fn, x, args.repeats)
        one, allc = bench[(bm, "1")], bench[(bm, "0")]
        row = {"spec": label, "elements": n,
               "numpy_melem_s": n / t_np / 1e6,
               "fp8sim_1core_melem_s": one["elements"] / one["cpu_s"] / 1e6,
               "fp8sim_all_melem_s": allc["elements"] / allc["real_s"] / 1e6,
               "all_threads": allc["counter_threads"]}
        row["ratio_per_core"] = row["fp8sim_1core_melem_s"] / row["numpy_melem_s"]
        if args.fp8sim:
            row["codes_equal_frac"] = check_codes(args.fp8sim, x, spec, fn(x)[0])
        rows.append(row)

    lines = [f"{args.rows} x {args.cols} float32, log-normal magnitudes; numpy {np.__version__}, "
             f"ml_dtypes {ml_dtypes.__version__}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
             f"({cpu_name()}). Command: `scripts/bench_quant_numpy.py`, medians of {args.repeats}.", "",
             "| spec | numpy, 1 core (Melem/s) | fp8sim, 1 core (Melem/s) | ratio per core | "
             "fp8sim, all cores (Melem/s, wall) | codes equal to numpy |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        eq = f"{100 * r['codes_equal_frac']:.4f}%" if "codes_equal_frac" in r else "-"
        lines.append(f"| {r['spec']} | {r['numpy_melem_s']:.1f} | {r['fp8sim_1core_melem_s']:.1f} | "
                     f"{r['ratio_per_core']:.1f}x | {r['fp8sim_all_melem_s']:.1f} ({r['all_threads']} threads) | {eq} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        write_atomic(args.md, text)
    if args.json:
        write_atomic(args.json, json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
