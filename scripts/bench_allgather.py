#!/usr/bin/env python3
"""Time FSDP's collectives for one decoder layer: BF16 vs FP8 weight all-gather, gradient reduce-scatter.

Runs under torchrun, one process per GPU (NCCL), or on the CPU with gloo (for checking the script;
the numbers mean nothing there). For each model (models/NAME.json, read by scripts/measure_memory.py's
load_config) the FSDP unit is --layers decoder layers (default 1), flattened and sharded as FSDP
does: P parameters (q, k, v, o with the GQA widths, gate/up/down, the norms' weights and biases),
shard = ceil(P/N) elements per rank. Per unit it times:

  all_gather/bfloat16      all_gather_into_tensor of the bf16 shard (2 B/element): the BF16 step
  all_gather/fp8           the FP8-LM / COAT all-gather: the shard's uint8 codes (1 B/element) plus
                           the fp32 scales, sharded the same way: ceil(S/N) per rank, S = one per
                           tensor (--scales tensor, default: FP8-LM's and COAT's weight scaling) or
                           one per 1x128 group of each tensor's rows (--scales g128)
  reduce_scatter/bfloat16  reduce_scatter_tensor of the unit's gradient in bf16
  reduce_scatter/float32   ... in fp32 (FSDP's reduce_dtype=float32)

The FP8 codes and scales go in one call by default (--scale-call packed: the rank's codes then its
scales' bytes in one uint8 buffer), as FSDP2 does: it copies all of a unit's all-gather inputs into
one buffer, viewed as uint8 when their dtypes differ, and issues one all_gather_into_tensor, so the
scales cost bytes but no second latency. --scale-call separate gathers the scales in a second call.
Every norm weight and bias is counted as FP8 codes with its own scale (their 2-4 x hidden elements
are under 0.01% of a layer).

Then a sweep of message sizes (--sizes, bytes of each rank's shard: the all-gather's input, the
reduce-scatter's output) for all_gather in bfloat16 and uint8 and reduce_scatter in bfloat16 and
float32, and a least-squares line per collective and dtype through the sweep's medians,
    time_us = latency_us + bus_bytes / (bus_gbps * 1e3),
minimising relative errors (every size weighs the same; a negative latency is refitted as 0).

Bytes and bandwidths follow nccl-tests' conventions: bytes_total = N x shard bytes (the all-gather's
output, the reduce-scatter's input), algbw = bytes_total / time, busbw = algbw * (N-1)/N, and
bus_bytes = bytes_total * (N-1)/N, what each rank sends over the ring, so the fitted bus_gbps is a
bus bandwidth, what `fp8sim speed --link-gbps` assumes (docs/dev-notes/allgather-bench.md).

Timing: every item runs --warmup calls, then --iters calls with a CUDA event pair around each, all
enqueued behind a sleep kernel so that the GPU runs them back to back (the host's launch time is
not timed); a barrier between items. The time of call i is the slowest rank's; an item reports the
median, min and max over the calls, and each rank's median. On the CPU: time.perf_counter around
each call. NCCL_NVLS_ENABLE=0 (NVLink multicast off) is set before the process group starts unless
the environment already sets it; the JSON records its value. Buffers hold constants: their values
do not change a collective's time. An item a rank cannot allocate is skipped on every rank.

Rank 0 writes the JSON (--json, format "fp8sim-allgather-bench"), the Markdown tables (--md) and
one progress line per item to stderr.

Usage:
  torchrun --standalone --nproc_per_node 4 scripts/bench_allgather.py --model llama2-7b,llama3-8b \\
      --json allgather.json --md allgather.md
  python3 -m torch.distributed.run --standalone --nproc_per_node 2 scripts/bench_allgather.py \\
      --device cpu --model tiny-llama --sizes 4K,64K --iters 3 --json cpu.json   # CPU smoke run
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
PROG = "bench_allgather.py"
FORMAT = "fp8sim-allgather-bench"
NORMS = ("rmsnorm", "layernorm", "layernorm_nonparam")
ACTIVATIONS = ("swiglu", "gelu")
GROUP = 128  # the 1x128 group of --scales g128
SWEEP = (("all_gather", "bfloat16"), ("all_gather", "uint8"), ("reduce_scatter", "bfloat16"),
         ("reduce_scatter", "float32"))
ELEM_BYTES = {"bfloat16": 2, "uint8": 1, "float32": 4}
DEFAULT_SIZES = {"cuda": "1M:1G", "cpu": "64K:1M"}
LEAD_CYCLES = 200_000  # sleep-kernel cycles per timed call: ~100 us at an H100/H200's ~2 GHz


def die(msg, code=1):
    """One line on stderr (from rank 0 only under torchrun) and exit: 2 for usage, 1 for bad data."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        die(message, 2)


try:
    import torch
    import torch.distributed as dist
except ImportError:  # --help works without torch; main() says it is missing in one line
    torch = dist = None

import measure_memory as ref  # noqa: E402  (the config loader; it imports without torch)

ref.die = lambda msg: die(msg, 1)  # load_config's messages come out under this script's name


# ---- what one FSDP unit holds --------------------------------------------------------------------

def load_model(name):
    """models/NAME.json (or a path to a config): the config dict and its path relative to the repo."""
    models = os.path.join(REPO, "models")
    path = name if (name.endswith(".json") or "/" in name) else os.path.join(models, name + ".json")
    if not os.path.isfile(path):
        known = sorted(f[:-5] for f in os.listdir(models) if f.endswith(".json"))
        die(f"--model: no model config '{name}' (models/: {', '.join(known)}; or a path to a .json)", 2)
    try:
        cfg, path = ref.load_config(name, models)
    except ValueError as e:  # json.JSONDecodeError
        die(f"model config {path}: not valid JSON ({e})")
    for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"):
        if not isinstance(cfg[k], int) or isinstance(cfg[k], bool) or cfg[k] <= 0:
            die(f"model config {path}: '{k}' must be a positive integer, not {cfg[k]!r}")
    if cfg["num_attention_heads"] % cfg["num_key_value_heads"]:
        die(f"model config {path}: num_key_value_heads does not divide num_attention_heads")
    if cfg["norm"] not in NORMS:
        die(f"model config {path}: unknown norm '{cfg['norm']}' (valid: {', '.join(NORMS)})")
    if cfg["activation"] not in ACTIVATIONS:
        die(f"model config {path}: unknown activation '{cfg['activation']}' (valid: {', '.join(ACTIVATIONS)})")
    return cfg, os.path.relpath(os.path.abspath(path), REPO)


def layer_tensors(cfg):
    """One decoder layer's parameters as (name, shape), laid out as scripts/measure_memory.py's Block
    (and transformers' Llama): Linear weights are [out, in]."""
    h, f = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = int(cfg.get("head_dim") or h // nh)
    bias = bool(cfg.get("attention_bias", False))
    out = []

    def norm(name):
        if cfg["norm"] in ("rmsnorm", "layernorm"):
            out.append((name + ".weight", (h,)))
        if cfg["norm"] == "layernorm":
            out.append((name + ".bias", (h,)))

    def linear(name, n_out, n_in, with_bias=False):
        out.append((name + ".weight", (n_out, n_in)))
        if with_bias:
            out.append((name + ".bias", (n_out,)))

    norm("attn_norm")
    linear("q_proj", nh * hd, h, bias)
    linear("k_proj", nkv * hd, h, bias)
    linear("v_proj", nkv * hd, h, bias)
    linear("o_proj", h, nh * hd, bias)
    norm("mlp_norm")
    if cfg["activation"] == "swiglu":
        linear("gate_proj", f, h)
    linear("up_proj", f, h)
    linear("down_proj", h, f)
    return out


def scale_count(shape, scales):
    """fp32 scales of one tensor: one per tensor, or one per 1x128 group along its last dimension."""
    if scales == "tensor":
        return 1
    return math.prod(shape[:-1]) * -(-shape[-1] // GROUP)


def unit_layout(cfg, layers, scales, world):
    """Element and byte counts of an FSDP unit of `layers` decoder layers sharded over `world` ranks."""
    tensors = [{"name": n, "shape": list(s), "numel": math.prod(s), "scales": scale_count(s, scales)}
               for n, s in layer_tensors(cfg)]
    params = layers * sum(t["numel"] for t in tensors)
    n_scales = layers * sum(t["scales"] for t in tensors)
    shard = -(-params // world)
    scale_shard = -(-n_scales // world)
    return {"layer_tensors": tensors, "params": params, "scales": n_scales, "shard_elements": shard,
            "scale_shard_elements": scale_shard,
            "fp8_payload": {"codes_bytes_per_rank": shard, "scale_bytes_per_rank": 4 * scale_shard,
                            "bytes_per_rank": shard + 4 * scale_shard}}


# ---- sizes ---------------------------------------------------------------------------------------

def parse_size(text):
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMG" else t
    if not num.isdigit() or int(num) * mult <= 0:
        raise ValueError(f"'{text}' is not a size (bytes, or with K, M, G: 64K, 1M)")
    return int(num) * mult


def parse_sizes(text):
    """'none', 'LO:HI' (LO, 2 LO, 4 LO, ... up to HI) or a comma list; multiples of 4 bytes."""
    if text.strip().lower() in ("none", "0", ""):
        return []
    if ":" in text:
        lo, hi = (parse_size(p) for p in text.split(":", 1))
        if hi < lo:
            raise ValueError(f"'{text}': LO:HI needs LO <= HI")
        sizes = []
        while lo <= hi:
            sizes.append(lo)
            lo *= 2
    else:
        sizes = sorted({parse_size(p) for p in text.split(",")})
    for s in sizes:
        if s % 4:
            raise ValueError(f"{s} bytes is not a multiple of 4 (a float32 element)")
    return sizes


def human(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m:
            return f"{n / m:.4g} {unit}"
    return f"{n} B"


# ---- the fit -------------------------------------------------------------------------------------

def fit_line(xs, ts):
    """time = latency + x * inv_bw, minimising sum(((fit - t) / t)^2); latency >= 0. Returns
    (latency, inv_bw) or None with fewer than 2 distinct x."""
    if len(set(xs)) < 2:
        return None
    w = [1.0 / (t * t) for t in ts]
    sw = sum(w)
    sx = sum(wi * x for wi, x in zip(w, xs))
    sxx = sum(wi * x * x for wi, x in zip(w, xs))
    st = sum(wi * t for wi, t in zip(w, ts))
    sxt = sum(wi * x * t for wi, x, t in zip(w, xs, ts))
    det = sw * sxx - sx * sx
    lat = (sxx * st - sx * sxt) / det
    slope = (sw * sxt - sx * st) / det
    if lat < 0:
        lat, slope = 0.0, sxt / sxx
    return lat, slope


def make_fit(points, world):
    """The fit of one collective and dtype over its sweep points (dicts with bus_bytes, median_us)."""
    pts = [p for p in points if p.get("median_us")]
    xs, ts = [p["bus_bytes"] for p in pts], [p["median_us"] for p in pts]
    line = fit_line(xs, ts)
    if line is None:
        return {"points": len(pts), "latency_us": None, "bus_gbps": None, "alg_gbps": None,
                "note": "fewer than 2 sizes measured"}
    lat, slope = line
    fit = {"points": len(pts), "latency_us": lat, "bus_gbps": None, "alg_gbps": None}
    if slope > 0:
        fit["bus_gbps"] = 1.0 / (slope * 1e3)
        fit["alg_gbps"] = fit["bus_gbps"] * world / (world - 1)
    else:
        fit["note"] = "time does not grow with size over these sizes: no bandwidth"
    errs = [abs(fit_time(fit, x) - t) / t for x, t in zip(xs, ts)]
    fit["max_rel_err"] = max(errs)
    return fit


def fit_time(fit, bus_bytes, calls=1):
    """The fitted time (us) of `calls` collectives moving bus_bytes in all."""
    if not fit or fit.get("latency_us") is None:
        return None
    t = calls * fit["latency_us"]
    if fit.get("bus_gbps"):
        t += bus_bytes / (fit["bus_gbps"] * 1e3)
    return t


# ---- timing --------------------------------------------------------------------------------------

class Bench:
    def __init__(self, args, dev):
        self.args, self.dev = args, dev
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.cuda = dev.type == "cuda"

    def progress(self, msg):
        if self.rank == 0:
            print(f"bench_allgather: {msg}", file=sys.stderr, flush=True)

    def all_ok(self, ok):
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=self.dev)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def buffers(self, specs):
        """Allocate (numel, dtype, fill) buffers on every rank; None on every rank if one cannot."""
        try:
            bufs = [torch.full((n,), fill, dtype=getattr(torch, dt), device=self.dev) for n, dt, fill in specs]
            ok = True
        except (torch.OutOfMemoryError, RuntimeError):  # RuntimeError: the CPU allocator's
            bufs, ok = None, False
            if self.cuda:
                torch.cuda.empty_cache()
        return bufs if self.all_ok(ok) else None

    def samples(self, fn):
        """Per-call times (us) of fn() on this rank: --warmup calls, then --iters timed calls."""
        a = self.args
        for _ in range(a.warmup):
            fn()
        if not self.cuda:
            out = []
            for _ in range(a.iters):
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e6)
            return out
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.iters)]
        torch.cuda._sleep(int(a.iters * LEAD_CYCLES))  # the host enqueues every call before the GPU runs one
        for s, e in ev:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in ev]

    def run(self, label, specs, make_call):
        """Time one item on every rank; rank 0 gets the stats (others None). specs: its buffers;
        make_call(bufs) -> the call to time."""
        dist.barrier()
        bufs = self.buffers(specs)
        if bufs is None:
            self.progress(f"{label}: skipped (a rank could not allocate its buffers)")
            return {"status": "skipped: out of memory on a rank"}
        mine = torch.tensor(self.samples(make_call(bufs)), dtype=torch.float64, device=self.dev)
        del bufs
        every = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(every, mine)
        if self.rank != 0:
            return None
        per_rank = [t.cpu().tolist() for t in every]
        calls = [max(r[i] for r in per_rank) for i in range(self.args.iters)]  # the slowest rank's
        st = {"status": "ok", "median_us": statistics.median(calls), "min_us": min(calls), "max_us": max(calls),
              "rank_median_us": [statistics.median(r) for r in per_rank]}
        return st

    # The collectives: bufs are (input, output) pairs in order.
    @staticmethod
    def all_gather(bufs):
        def call():
            for i in range(0, len(bufs), 2):
                dist.all_gather_into_tensor(bufs[i + 1], bufs[i])
        return call

    @staticmethod
    def reduce_scatter(bufs):
        def call():
            dist.reduce_scatter_tensor(bufs[1], bufs[0])
        return call


def rates(item, world):
    """algbw / busbw (GB/s) of a timed item with bytes_total."""
    if item.get("status") == "ok" and item["median_us"] > 0:
        item["algbw_gbps"] = item["bytes_total"] / (item["median_us"] * 1e3)
        item["busbw_gbps"] = item["algbw_gbps"] * (world - 1) / world
    return item


def unit_items(b, lay):
    """The unit's four items: (name, collective, dtype, calls, bytes per rank, buffer specs, call maker)."""
    n, shard, sc = b.world, lay["shard_elements"], lay["scale_shard_elements"]
    ag8 = lay["fp8_payload"]["bytes_per_rank"]
    if b.args.scale_call == "packed":
        fp8 = [(ag8, "uint8", 1), (n * ag8, "uint8", 0)]
    else:
        fp8 = [(shard, "uint8", 1), (n * shard, "uint8", 0), (sc, "float32", 1), (n * sc, "float32", 0)]
    return [
        ("all_gather/bfloat16", "all_gather", "bfloat16", 1, 2 * shard,
         [(shard, "bfloat16", 1), (n * shard, "bfloat16", 0)], Bench.all_gather),
        ("all_gather/fp8", "all_gather", "uint8" if b.args.scale_call == "packed" else "uint8+float32",
         1 if b.args.scale_call == "packed" else 2, ag8, fp8, Bench.all_gather),
        ("reduce_scatter/bfloat16", "reduce_scatter", "bfloat16", 1, 2 * shard,
         [(n * shard, "bfloat16", 1), (shard, "bfloat16", 0)], Bench.reduce_scatter),
        ("reduce_scatter/float32", "reduce_scatter", "float32", 1, 4 * shard,
         [(n * shard, "float32", 1), (shard, "float32", 0)], Bench.reduce_scatter),
    ]


def speed_model_terms(items_by_name, params, world):
    """The link bandwidth `fp8sim speed --fsdp-comm serial --link-gbps X` would need to reproduce the
    measured per-unit time of its three collectives (two all-gathers, one reduce-scatter; it counts
    6 B x params x (N-1)/N), each pairing of all-gather and reduce-scatter dtype."""
    out = {}
    bus = 6.0 * params * (world - 1) / world
    for ag in ("bfloat16", "fp8"):
        for rs in ("bfloat16", "float32"):
            a, r = items_by_name.get(f"all_gather/{ag}"), items_by_name.get(f"reduce_scatter/{rs}")
            if a and r and a.get("status") == "ok" and r.get("status") == "ok":
                t = 2 * a["median_us"] + r["median_us"]
                out[f"{ag}_all_gather+{rs}_reduce_scatter"] = {"step_us": t, "link_gbps": bus / (t * 1e3)}
    return out


# ---- output --------------------------------------------------------------------------------------

def fmt(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def markdown(doc):
    m = doc["machine"]
    lines = [f"# FSDP collectives: {m.get('gpu') or m['device']} x {m['world_size']} ({m['backend']})", "",
             f"torch {m['torch']}"
             + (f", NCCL {m['nccl']}, NCCL_NVLS_ENABLE={m['nccl_nvls_enable']}" if m.get("nccl") else "") + "; "
             f"scales {doc['options']['scales']}, scale call {doc['options']['scale_call']}, "
             f"{doc['options']['iters']} calls per item; times in us (median, min-max over calls, the slowest "
             "rank's); GB/s: nccl-tests' algbw and busbw", ""]
    for mod in doc["models"]:
        lines += [f"## {mod['model']}: {mod['layers']} layer(s) per unit, {mod['params']:,} parameters, "
                  f"{mod['scales']:,} scales", "",
                  "| item | bytes/rank | median us | min-max us | algbw GB/s | busbw GB/s | fit us |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for it in mod["items"]:
            lines.append(f"| {it['name']} | {it['bytes_per_rank']:,} | {fmt(it.get('median_us'))} | "
                         f"{fmt(it.get('min_us'))}-{fmt(it.get('max_us'))} | {fmt(it.get('algbw_gbps'))} | "
                         f"{fmt(it.get('busbw_gbps'))} | {fmt(it.get('fit_us'))} |")
        r = mod.get("fp8_vs_bf16", {})
        lines += ["", f"FP8 / BF16 all-gather: bytes {fmt(r.get('bytes'), 3)}, time {fmt(r.get('time'), 3)}", ""]
        for k, v in mod.get("speed_model", {}).items():
            lines.append(f"- {k}: {fmt(v['step_us'])} us per unit, as `fp8sim speed --fsdp-comm serial "
                         f"--link-gbps {v['link_gbps']:.4g}`")
        lines.append("")
    if doc["sweep"]:
        keys = [f"{c}/{d}" for c, d in SWEEP]
        lines += ["## Sweep (median us)", "", "| bytes/rank | " + " | ".join(keys) + " |",
                  "|---:|" + "---:|" * len(keys)]
        for size in doc["options"]["sizes"]:
            row = {f"{p['collective']}/{p['dtype']}": p for p in doc["sweep"] if p["bytes_per_rank"] == size}
            lines.append(f"| {human(size)} | " + " | ".join(fmt(row.get(k, {}).get("median_us")) for k in keys) + " |")
        lines += ["", "## Fits: time_us = latency_us + bus_bytes / (bus_gbps * 1e3)", "",
                  "| collective/dtype | points | latency us | bus GB/s | alg GB/s | max rel err |",
                  "|---|---:|---:|---:|---:|---:|"]
        for f in doc["fits"]:
            lines.append(f"| {f['collective']}/{f['dtype']} | {f['points']} | {fmt(f['latency_us'])} | "
                         f"{fmt(f['bus_gbps'])} | {fmt(f['alg_gbps'])} | {fmt(f.get('max_rel_err'), 3)} |")
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # never a partial file


# ---- main ----------------------------------------------------------------------------------------

def parse_args(argv):
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama2-7b",
                    help="model config(s), comma-separated: names in models/ or paths to .json (default llama2-7b)")
    ap.add_argument("--layers", type=int, default=1, help="decoder layers per FSDP unit (default 1)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per item (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    ap.add_argument("--sizes", help="sweep: bytes of each rank's shard, LO:HI (powers of 2), a comma list (K, M, G "
                    "suffixes) or none; default 1M:1G on cuda, 64K:1M on cpu")
    ap.add_argument("--scales", choices=("tensor", "g128"), default="tensor",
                    help="FP8 scale layout: one fp32 per tensor (default) or per 1x128 group")
    ap.add_argument("--scale-call", choices=("packed", "separate"), default="packed",
                    help="FP8 scales in the codes' call (default, as FSDP2 packs a unit) or a second call")
    ap.add_argument("--device", choices=("cuda", "cpu"), help="cuda (NCCL; the default when CUDA is available) or "
                    "cpu (gloo)")
    ap.add_argument("--json", metavar="OUT", help="write the results here (rank 0)")
    ap.add_argument("--md", metavar="OUT", help="also write Markdown tables here (rank 0)")
    a = ap.parse_args(argv)
    if a.layers < 1:
        die("--layers must be at least 1", 2)
    if a.iters < 1:
        die("--iters must be at least 1", 2)
    if a.warmup < 0:
        die("--warmup must be 0 or more", 2)
    for out in (a.json, a.md):
        if out and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            die(f"no folder for '{out}'", 2)
    names = [m.strip() for m in a.model.split(",") if m.strip()]
    if not names:
        die("--model names no config", 2)
    if a.sizes is not None:
        try:
            a.sizes = parse_sizes(a.sizes)
        except ValueError as e:
            die(f"--sizes: {e}", 2)
    a.models = [(name,) + load_model(name) for name in names]  # config errors before any process starts
    return a


def nccl_version():
    v = torch.cuda.nccl.version()
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def machine_info(b, nvls_set):
    info = {"device": b.dev.type, "backend": dist.get_backend(), "world_size": b.world,
            "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", b.world)), "torch": torch.__version__,
            "host": platform.node(), "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    if b.cuda:
        info.update(gpu=torch.cuda.get_device_name(b.dev), gpus_per_host=torch.cuda.device_count(),
                    cuda=torch.version.cuda, nccl=nccl_version(),
                    nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"), nccl_nvls_set_by_script=nvls_set)
    return info


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if torch is None:
        die("PyTorch is not importable here (scripts/install_torch.sh installs it)")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        die("run under torchrun: torchrun --standalone --nproc_per_node N scripts/bench_allgather.py ... (N >= 2)", 2)
    if int(os.environ["WORLD_SIZE"]) < 2:
        die("needs at least 2 processes (torchrun --nproc_per_node 2 or more)", 2)
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if a.device == "cuda" and not torch.cuda.is_available():
        die("--device cuda: no CUDA device here (--device cpu runs on gloo)", 2)
    sizes = a.sizes if a.sizes is not None else parse_sizes(DEFAULT_SIZES[a.device])
    world = int(os.environ["WORLD_SIZE"])

    nvls_set = "NCCL_NVLS_ENABLE" not in os.environ
    import dist_start
    dev = dist_start.start(a.device, die)
    try:
        b = Bench(a, dev)
        doc = run_all(a, b, sizes, world, nvls_set)
    finally:
        dist.destroy_process_group()
    if doc is not None:
        text = json.dumps(doc, indent=2) + "\n"
        if a.json:
            write_atomic(a.json, text)
        if a.md:
            write_atomic(a.md, markdown(doc))
        b.progress(f"done: {len(doc['models'])} model(s), {len(doc['sweep'])} sweep points"
                   + (f" -> {a.json}" if a.json else ""))
    return 0


def run_all(a, b, sizes, world, nvls_set):
    doc = {"format": FORMAT, "version": 1, "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "command": [PROG] + sys.argv[1:], "machine": machine_info(b, nvls_set),
        "options": {"iters": a.iters, "warmup": a.warmup, "layers": a.layers, "scales": a.scales,
                    "scale_group": GROUP if a.scales == "g128" else None, "scale_call": a.scale_call,
                    "sizes": sizes,
                    "timing": ("cuda events around each call, enqueued behind a sleep kernel; the slowest rank's "
                               "time per call" if b.cuda else "time.perf_counter around each call; the slowest "
                               "rank's time per call")},
        "conventions": {"bytes_per_rank": "each rank's shard: the all-gather's input, the reduce-scatter's output",
                        "bytes_total": "world_size x bytes_per_rank",
                        "bus_bytes": "bytes_total x (world_size-1)/world_size",
                        "algbw_gbps": "bytes_total / median time",
                        "busbw_gbps": "algbw_gbps x (world_size-1)/world_size",
                        "fit": "time_us = latency_us + bus_bytes / (bus_gbps x 1e3), relative least squares"},
        "models": [], "sweep": [], "fits": []}
    # The sweep first: its fits give the units' predicted times.
    for i, size in enumerate(sizes):
        for coll, dt in SWEEP:
            n = size // ELEM_BYTES[dt]
            specs = ([(n, dt, 1), (world * n, dt, 0)] if coll == "all_gather" else [(world * n, dt, 1), (n, dt, 0)])
            label = f"sweep {i + 1}/{len(sizes)} {coll} {dt} {human(size)}/rank"
            st = b.run(label, specs, Bench.all_gather if coll == "all_gather" else Bench.reduce_scatter)
            if st is None:
                continue
            p = rates({"collective": coll, "dtype": dt, "bytes_per_rank": size, "bytes_total": world * size,
                       "bus_bytes": (world - 1) * size, **st}, world)
            doc["sweep"].append(p)
            if st["status"] == "ok":
                b.progress(f"{label}: {p['median_us']:.1f} us, busbw {p['busbw_gbps']:.1f} GB/s")
    if b.rank == 0 and sizes:
        for coll, dt in SWEEP:
            pts = [p for p in doc["sweep"] if p["collective"] == coll and p["dtype"] == dt and p["status"] == "ok"]
            f = {"collective": coll, "dtype": dt, **make_fit(pts, world)}
            doc["fits"].append(f)
            b.progress(f"fit {coll} {dt}: latency {fmt(f['latency_us'])} us, bus {fmt(f['bus_gbps'])} GB/s over "
                       f"{f['points']} sizes")
    fits = {(f["collective"], f["dtype"]): f for f in doc["fits"]}
    for _, cfg, path in a.models:
        lay = unit_layout(cfg, a.layers, a.scales, world)
        mod = {"model": cfg["name"], "config": path, "layers": a.layers, **lay, "items": []}
        for item, coll, dt, calls, per_rank, specs, maker in unit_items(b, lay):
            label = f"{cfg['name']} {item} {human(per_rank)}/rank"
            st = b.run(label, specs, maker)
            if st is None:
                continue
            it = rates({"name": item, "collective": coll, "dtype": dt, "calls": calls, "bytes_per_rank": per_rank,
                        "bytes_total": world * per_rank, "bus_bytes": (world - 1) * per_rank, **st}, world)
            fit = fits.get((coll, "uint8" if item == "all_gather/fp8" else dt))
            it["fit_us"] = fit_time(fit, it["bus_bytes"], calls)
            mod["items"].append(it)
            if st["status"] == "ok":
                b.progress(f"{label}: {it['median_us']:.1f} us, busbw {it['busbw_gbps']:.1f} GB/s")
        if b.rank == 0:
            by = {it["name"]: it for it in mod["items"]}
            a16, a8 = by["all_gather/bfloat16"], by["all_gather/fp8"]
            mod["fp8_vs_bf16"] = {"bytes": a8["bytes_per_rank"] / a16["bytes_per_rank"],
                                  "time": (a8["median_us"] / a16["median_us"]
                                           if a8["status"] == a16["status"] == "ok" else None)}
            mod["speed_model"] = speed_model_terms(by, lay["params"], world)
            doc["models"].append(mod)
    return doc if b.rank == 0 else None


if __name__ == "__main__":
    code = main()
    import dist_start
    dist_start.leave(code)
