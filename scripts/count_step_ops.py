#!/usr/bin/env python3
"""Count what an eager training step launches: every ATen op of one step of a framework
(scripts/measure_step.py's torch, hf and coat), with the bytes it reads and writes, and fit those
totals to the model's dimensions.

`fp8sim speed --framework` prices a framework's step from this inventory: the GEMMs and the
attention at their calibrated rates, and everything else (casts, norms, RoPE, residual adds, the
loss, the weight casts and gradient accumulation, the optimizer's passes) by its bytes and kernel
count. Counted on the GPU the framework runs on, because autocast and SDPA choose their ops by
device (on a CPU-only machine autocast("cuda") is disabled and SDPA falls back to its math path).

How it counts: a TorchDispatchMode sees each ATen op after autograd and autocast have decided it.
View ops (func.is_view, and _unsafe_view, a view that autograd does not track) move no data and
launch nothing. For every other op on the device, bytes
read = the inputs' distinct elements (a broadcast dimension, stride 0, is read once; a tensor
passed twice is read once) and bytes
written = the outputs (for an in-place op, the tensor it mutates). Ops are grouped as
  gemm        mm, addmm, bmm, baddbmm
  attention   the fused SDPA kernels, forward and backward
  optimizer   the fused AdamW step, and the _foreach_ ops of the non-fused one (one op = one
              multi-tensor launch per 320 x 65536 elements of its first tensor list, or part)
  elementwise everything else (casts, pointwise, reductions, copies, fills, embedding, loss)

COAT (--framework coat, COAT's own model and optimizer from its sdist, --coat) launches most of its
work outside ATen: Triton kernels called from its autograd functions, and its optimizer's CUDA
extension. Those launches are counted where they are made: every Triton launch
(JITFunction.run) and every call of the optimizer extension (qoptim_cuda) is one kernel whose bytes
are the distinct bytes of its tensor arguments (read and written together: an argument updated in
place counts once). Triton kernels named *matmul* are COAT's FP8 GEMMs (group gemm, priced from
the model's shapes, not from bytes); the others are elementwise; the extension is the optimizer.
Counting runs COAT's autotuned kernels with their first configuration only: the launches are the
same, and autotuning each small shape would take minutes (docs/dev-notes/coat-speed-profile.md).

Host time (every framework): after counting, the script times the step's two phases with the GPU
synchronised after each (zero_grad + forward + loss + backward, then the optimizer step), median
of HOST_REPS steps. At these small shapes every kernel takes a few microseconds, so the wall time
is what the host spends issuing the phase: Python, autograd, autocast and the launches. Fitted to
L and 1 like the kernel counts, it is the host cost `fp8sim speed --framework` compares with the
GPU time. For COAT the script also times its optimizer step over one 2^26-element parameter
(coat_optimizer: COAT's DE AdamW kernel is compute-bound, so its bytes do not give its time).
Allocations (empty, empty_like, ...) launch nothing and are not counted.

The fit: the step's elementwise and optimizer bytes and kernel counts are linear in a few products
of the dimensions (FEATURES below; L layers, T = batch x seq tokens, H hidden, KV = kv_heads x
head_dim, F ffn, NH heads, d head_dim, V vocabulary, W = one layer's Linear weights); the script
measures a set of small configurations chosen so those products are independent, solves for the
coefficients by least squares and reports the largest residual, which is zero when the features
describe the framework's code exactly.

Usage (on the GPU machine):
  python3 scripts/count_step_ops.py --framework hf --out ops_hf.json
  python3 scripts/count_step_ops.py --framework torch --device cpu --configs 2 --out /tmp/t.json  (smoke test)
"""
import argparse
import json
import math
import os
import sys
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
SCHEMA = "fp8sim-step-ops/1"

try:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # --help works without torch; main() says it is missing in one line
    torch = None
    TorchDispatchMode = object

GEMM = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm"}
ATTENTION_PREFIX = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                    "_scaled_dot_product_cudnn_attention", "_flash_attention", "_efficient_attention")
# Allocations without a fill launch nothing (COAT allocates its kernels' outputs this way).
NO_LAUNCH = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
FUSED_OPTIM = {"_fused_adamw_", "_fused_adam_", "_fused_adamw", "_fused_adam"}
FOREACH_CHUNK = 320 * 65536  # elements per multi-tensor launch (320 blocks of 65536) counted for a _foreach op
HOST_REPS = 5  # timed steps per configuration for the host time (median)

# name -> function of the configuration dict (whole step). Bytes are fitted to all of them (S*d: the
# RoPE tables, one row per position); kernel counts to KERNEL_FEATURES (per layer and per step).
FEATURES = {
    "L*T*H": lambda c: c["L"] * c["T"] * c["H"],
    "L*T*KV": lambda c: c["L"] * c["T"] * c["KV"],
    "L*T*F": lambda c: c["L"] * c["T"] * c["F"],
    "L*T*NH": lambda c: c["L"] * c["T"] * c["NH"],
    "L*T*d": lambda c: c["L"] * c["T"] * c["d"],
    "L*T": lambda c: c["L"] * c["T"],
    "T*H": lambda c: c["T"] * c["H"],
    "T*V": lambda c: c["T"] * c["V"],
    "S*d": lambda c: c["S"] * c["d"],
    "T": lambda c: c["T"],
    "L*W": lambda c: c["L"] * c["W"],
    "L*H": lambda c: c["L"] * c["H"],
    "V*H": lambda c: c["V"] * c["H"],
    "H": lambda c: c["H"],
    "L": lambda c: c["L"],
    "1": lambda c: 1,
}
KERNEL_FEATURES = ["L", "1"]

# Small configurations, varied so that the features above are linearly independent over the set
# and the fit has twice as many rows as unknowns (a residual that can show a missing feature):
# (layers, batch, seq, hidden, heads, kv_heads, ffn, vocab), deterministic.
def make_configs(n=36):
    import random
    rnd = random.Random(20261202)
    out = []
    while len(out) < n:
        d = rnd.choice([16, 32, 64])
        heads = rnd.randint(2, 8)
        kv = rnd.choice([k for k in range(1, heads + 1) if heads % k == 0])
        hidden = heads * d
        ffn = 32 * rnd.randint(max(1, hidden // 16), max(2, hidden // 8))
        c = (rnd.randint(1, 4), rnd.randint(1, 4), 16 * rnd.randint(2, 12), hidden, heads, kv, ffn,
             128 * rnd.randint(4, 16))
        if c not in out:
            out.append(c)
    return out


CONFIGS = make_configs()


def group(name):
    if name in GEMM:
        return "gemm"
    if name.startswith(ATTENTION_PREFIX):
        return "attention"
    if name in FUSED_OPTIM or name.startswith("_foreach_"):
        return "optimizer"
    return "elementwise"


def distinct_bytes(t):
    """Bytes of the distinct elements a tensor view addresses (stride-0 dimensions once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size() if t.numel() else 0


def view_key(t):
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from tensors(y)


class Counter(TorchDispatchMode):
    """Totals per group: ops (kernels), bytes read, bytes written; and per op name."""

    def __init__(self, device):
        super().__init__()
        self.device = device
        self.groups = {}
        self.ops = {}

    def launch(self, group_name, name, args):
        """One launch made outside ATen (a Triton kernel, an extension call) with tensor `args`."""
        ins = list({view_key(t): t for t in tensors(args) if t.device.type == self.device.type}.values())
        self.add(group_name, name, 1, sum(distinct_bytes(t) for t in ins), 0)

    def add(self, group_name, name, kernels, read, written):
        """Adds to the group's totals and to the op's."""
        for key, table in ((group_name, self.groups), (f"{group_name}:{name}", self.ops)):
            e = table.setdefault(key, {"kernels": 0, "read": 0, "written": 0})
            e["kernels"] += kernels
            e["read"] += read
            e["written"] += written

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view or func.namespace == "prim" or func._schema.name == "aten::_unsafe_view":
            return out
        name = func._schema.name.split("::")[-1]
        if name in NO_LAUNCH:
            return out
        # A tensor passed twice (x * x, addcmul(g, g)) is read from memory once.
        ins = list({view_key(t): t for t in tensors((args, kwargs)) if t.device.type == self.device.type}.values())
        if not ins and not any(t.device.type == self.device.type for t in tensors(out)):
            return out
        read = sum(distinct_bytes(t) for t in ins)
        mutable = [a for a, arg in zip(args, func._schema.arguments) if arg.is_write]
        if mutable:  # in-place: what it writes is what it mutates
            written = sum(distinct_bytes(t) for t in tensors(mutable) if t.device.type == self.device.type)
        else:
            written = sum(distinct_bytes(t) for t in tensors(out) if t.device.type == self.device.type)
        g = group(name)
        if name.startswith("_foreach_"):
            kernels = max(1, math.ceil(sum(t.numel() for t in tensors(args[0])) / FOREACH_CHUNK))
        else:
            kernels = 1
        self.add(g, name, kernels, read, written)
        return out


ACTIVE = []  # the Counter that launch hooks report to, while one counts


def install_launch_hooks(first_config=True):
    """Counts COAT's launches made outside ATen: every Triton kernel run and every call into its
    optimizer extension, while a Counter is active. With `first_config`, also runs autotuned Triton
    kernels with their first configuration: the same launches without per-shape benchmarking, so
    the host times leave out the autotuner's per-launch key lookup."""
    import triton
    from triton.runtime import autotuner, jit

    if getattr(jit.JITFunction, "_fp8sim_hooked", False):
        return
    run = jit.JITFunction.run

    def counted_run(self, *args, **kwargs):
        if ACTIVE:
            name = getattr(self.fn, "__name__", "triton")
            ACTIVE[-1].launch("gemm" if "matmul" in name else "elementwise", name, (args, kwargs))
        return run(self, *args, **kwargs)

    jit.JITFunction.run = counted_run
    jit.JITFunction._fp8sim_hooked = True
    if first_config:
        import measure_step as ms
        ms.triton_first_config()
    del triton, autotuner


def hook_extension(module):
    """Wraps every function of COAT's optimizer extension module so that a call counts as one
    optimizer launch."""
    for name in dir(module):
        f = getattr(module, name)
        if name.startswith("_") or not callable(f) or getattr(f, "_fp8sim_hooked", False):
            continue

        def counted(*args, _f=f, _name=name, **kwargs):
            if ACTIVE:
                ACTIVE[-1].launch("optimizer", _name, (args, kwargs))
            return _f(*args, **kwargs)

        counted._fp8sim_hooked = True
        setattr(module, name, counted)


def config_dims(layers, batch, seq, hidden, heads, kv, ffn, vocab):
    d = hidden // heads
    return {"L": layers, "B": batch, "S": seq, "T": batch * seq, "H": hidden, "NH": heads, "KV": kv * d, "d": d,
            "F": ffn, "V": vocab, "W": 2 * hidden * hidden + 2 * hidden * kv * d + 3 * hidden * ffn}


def host_times(st, inp, tgt, reps=HOST_REPS):
    """Median wall milliseconds of the two phases of a step, the GPU synchronised after each."""
    import statistics
    import time
    fb, opt = [], []
    for _ in range(reps):
        st.sync()
        t0 = time.perf_counter()
        st.s.opt.zero_grad(set_to_none=st.s.set_to_none)
        loss, held = st.forward_loss(inp, tgt)
        loss.backward()
        del loss, held
        st.sync()
        t1 = time.perf_counter()
        st.s.opt.step()
        st.sync()
        t2 = time.perf_counter()
        fb.append((t1 - t0) * 1e3)
        opt.append((t2 - t1) * 1e3)
    return statistics.median(fb), statistics.median(opt)


def stepper(framework, dims, device, coat=None):
    """measure_step.py's setup and stepper for a Llama of `dims`, and a batch of its shape."""
    import measure_step as ms
    cfg = {"name": "count", "hidden_size": dims["H"], "intermediate_size": dims["F"], "num_hidden_layers": dims["L"],
           "num_attention_heads": dims["NH"], "num_key_value_heads": dims["KV"] // dims["d"],
           "vocab_size": dims["V"], "norm": "rmsnorm", "activation": "swiglu", "tie_word_embeddings": False,
           "norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": dims["S"], "attention_bias": False}
    args = types.SimpleNamespace(framework=framework, checkpointing=False, compile=False, coat=coat,
                                 coat_first_config=False)  # install_launch_hooks decides
    s = ms.build(args, cfg, device)
    st = ms.Stepper(s, cfg, device)
    return s, st, st.batch(dims["B"], dims["S"])


def host_ms(fb, opt):
    return {"forward_backward": round(fb, 4), "optimizer": round(opt, 4)}


def count_one(framework, dims, device, coat=None):
    s, st, (inp, tgt) = stepper(framework, dims, device, coat)
    if framework == "coat":
        hook_extension(sys.modules["qoptim_cuda"])
    st.step(inp, tgt)  # the first step creates the gradients and the optimizer states
    st.sync()
    c = Counter(device)
    ACTIVE.append(c)
    try:
        with c:
            st.step(inp, tgt)
    finally:
        ACTIVE.pop()
    st.sync()
    return {"groups": c.groups, "ops": c.ops, "versions": s.versions, "training": s.training,
            "host_ms": host_ms(*host_times(st, inp, tgt)) if device.type == "cuda" else None}


def totals_of(ops, host=None):
    """A row's totals from its per-op table (group:name -> kernels, read, written), allocations
    that launch nothing left out; the host times (host_ms()) where measured."""
    totals = {}
    for g in ("elementwise", "optimizer"):
        es = [e for k, e in ops.items() if k.split(":", 1)[0] == g and k.split(":", 1)[1] not in NO_LAUNCH]
        totals[f"{g}_bytes"] = sum(e["read"] + e["written"] for e in es)
        totals[f"{g}_kernels"] = sum(e["kernels"] for e in es)
    if host:
        totals["host_forward_backward_ms"] = host["forward_backward"]
        totals["host_optimizer_ms"] = host["optimizer"]
    return totals


def fit(rows, key):
    """Least-squares coefficients of the features for rows[i]['totals'][key]; largest relative residual."""
    import numpy as np
    names = KERNEL_FEATURES if key.endswith(("_kernels", "_ms")) else list(FEATURES)
    a = np.array([[float(FEATURES[f](r["dims"])) for f in names] for r in rows])
    y = np.array([float(r["totals"][key]) for r in rows])
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1
    coef, *_ = np.linalg.lstsq(a / scale, y, rcond=None)
    coef = coef / scale
    rank = int(np.linalg.matrix_rank(a / scale))
    pred = a @ coef
    resid = float(np.max(np.abs(pred - y) / np.maximum(np.abs(y), 1)))
    return {"coefficients": {f: round(float(c), 4) for f, c in zip(names, coef) if abs(c) > 1e-6},
            "max_relative_residual": resid, "rank": rank, "features": len(names)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--framework", choices=["torch", "hf", "coat"])
    ap.add_argument("--refit", metavar="IN", help="re-derive the totals and the fit of a counted file (no GPU)")
    ap.add_argument("--coat", help="fp8-coat sdist (.tar.gz) or unpacked directory (framework coat)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--host-probe", action="store_true",
                    help="coat: also time the host phases at one and two layers of a small, a 1 B and a "
                         "Llama-2-7B-sized layer, with the GPU time and a cProfile (host_probe)")
    ap.add_argument("--probe-only", action="store_true",
                    help="coat: run only the host probe (no count, no optimizer rate); implies --host-probe")
    ap.add_argument("--probe-shapes", default=",".join(n for n, *_ in PROBE_SHAPES),
                    help="comma-separated probe shapes (default: %(default)s)")
    ap.add_argument("--probe-layers", default="1,2", help="comma-separated layer counts of the probe (default: %(default)s)")
    ap.add_argument("--autotune", action="store_true",
                    help="coat: keep COAT's Triton autotuning (default: each autotuned kernel runs its first "
                         "configuration, as the count does)")
    ap.add_argument("--configs", type=int, default=len(CONFIGS), help=f"how many of the {len(CONFIGS)} configurations")
    ap.add_argument("--out", required=True, help="output JSON path")
    args = ap.parse_args()
    if args.refit:
        return refit(args.refit, args.out)
    if not args.framework:
        ap.error("--framework is required (or --refit)")
    if args.framework == "coat" and not args.coat:
        ap.error("--framework coat needs --coat SDIST_OR_DIR")
    if args.framework != "coat" and (args.host_probe or args.probe_only or args.autotune):
        ap.error("--host-probe, --probe-only and --autotune are for --framework coat")
    shapes = [sh for sh in PROBE_SHAPES if sh[0] in args.probe_shapes.split(",")]
    if len(shapes) != len(set(args.probe_shapes.split(","))):
        ap.error(f"--probe-shapes: choose from {','.join(n for n, *_ in PROBE_SHAPES)}")
    try:
        layers = sorted({int(x) for x in args.probe_layers.split(",")})
    except ValueError:
        layers = [0]
    if not layers or layers[0] < 1:
        ap.error("--probe-layers: comma-separated positive layer counts")
    if torch is None:
        sys.exit("count_step_ops.py: error: PyTorch is not installed")
    if args.configs < 1 or args.configs > len(CONFIGS):
        sys.exit(f"count_step_ops.py: error: --configs must be 1..{len(CONFIGS)}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("count_step_ops.py: error: no CUDA device (counts on the CPU differ: pass --device cpu for a smoke test)")
    torch.manual_seed(0)
    if args.framework == "coat":
        install_launch_hooks(first_config=not args.autotune)
    probe = (host_probe(args.coat, device, layers=layers, shapes=shapes)
             if args.framework == "coat" and (args.host_probe or args.probe_only) else None)
    if args.probe_only:
        doc = {"format": SCHEMA + "+host-probe", "framework": "coat", "device_name": torch.cuda.get_device_name(),
               "autotune": args.autotune, "host_probe": probe["rows"], "versions": probe["versions"],
               "command": "python3 scripts/count_step_ops.py " + " ".join(
                   os.path.basename(a) if os.path.isabs(a) else a for a in sys.argv[1:])}
        return write(doc, [], args.out)
    rows = []
    for i, c in enumerate(CONFIGS[:args.configs]):
        dims = config_dims(*c)
        r = count_one(args.framework, dims, device, args.coat)
        totals = totals_of(r["ops"], r["host_ms"])
        rows.append({"dims": dims, "totals": totals, "groups": r["groups"], "ops": r["ops"], "host_ms": r["host_ms"]})
        print(f"[{i + 1}/{args.configs}] {c}: elementwise {totals['elementwise_bytes'] / 1e6:.2f} MB in "
              f"{totals['elementwise_kernels']} kernels; host {r['host_ms']}", file=sys.stderr, flush=True)
    doc = {"format": SCHEMA, "framework": args.framework, "device": str(device),
           "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           "versions": r["versions"], "training": r["training"],
           "command": "python3 scripts/count_step_ops.py " + " ".join(
               os.path.basename(a) if os.path.isabs(a) else a for a in sys.argv[1:]),
           "features": list(FEATURES), "kernel_features": KERNEL_FEATURES, "configs": rows}
    if args.framework == "coat" and device.type == "cuda":
        doc["coat_optimizer"] = coat_optimizer_rate(device)
        print(f"COAT optimizer: {doc['coat_optimizer']}", file=sys.stderr, flush=True)
        if probe:
            doc["host_probe"] = probe["rows"]
    write(doc, rows, args.out)


def write(doc, rows, out):
    """Fits the totals (when there are enough rows) and writes `doc` atomically."""
    if len(rows) >= len(FEATURES):
        doc["fit"] = {k: fit(rows, k) for k in rows[0]["totals"]}
        for k, f in doc["fit"].items():
            print(f"{k}: rank {f['rank']}/{f['features']}, max residual {f['max_relative_residual']:.2e}: "
                  f"{f['coefficients']}", file=sys.stderr)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, out)


def refit(src, out):
    """Re-derives every row's totals from its stored per-op table under this script's rules, and the
    fit; no GPU needed."""
    try:
        with open(src) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"count_step_ops.py: error: cannot read {src}: {e.strerror if isinstance(e, OSError) else e}")
    if not isinstance(doc, dict) or doc.get("format") != SCHEMA or not isinstance(doc.get("configs"), list):
        sys.exit(f"count_step_ops.py: error: {src} is not an {SCHEMA} file")
    for row in doc["configs"]:
        host = {k: v for k, v in row["totals"].items() if k.startswith("host_")}  # measured, not derived
        row["totals"] = {**totals_of(row["ops"]), **host}
    doc["refit"] = "python3 scripts/count_step_ops.py --refit " + os.path.basename(src)
    write(doc, doc["configs"], out)


# The host probe's shapes: (name, hidden, heads, kv_heads, ffn), each at 1 x 2048 tokens, vocabulary
# 32000, one and two layers: a small layer, a 1 B model's and Llama-2-7B's.
PROBE_SHAPES = [("small", 256, 4, 4, 704), ("h2048", 2048, 32, 4, 5632), ("h4096", 4096, 32, 32, 11008)]


def host_probe(coat, device, layers=(1, 2), shapes=PROBE_SHAPES, profile_top=25):
    """COAT's host time per phase at one and two layers of each probe shape, with the GPU time of
    the same phases (CUDA events), and a cProfile of one forward+backward at two layers (the top
    functions by own time): whether the host's cost per layer grows with the layer's width, and
    where. The difference between the one- and two-layer times is one layer's host cost."""
    import cProfile
    import pstats
    out, versions = [], {}
    for name, hidden, heads, kv, ffn in shapes:
        for L in layers:
            dims = config_dims(L, 1, 2048, hidden, heads, kv, ffn, 32000)
            s, st, (inp, tgt) = stepper("coat", dims, device, coat)
            versions = s.versions
            for _ in range(3):  # the first steps create the states and autotune the shapes
                st.step(inp, tgt)
            st.sync()
            row = {"shape": name, "dims": dims, "host_ms": host_ms(*host_times(st, inp, tgt, reps=9)),
                   "gpu_forward_backward_ms": gpu_forward_backward_ms(st, inp, tgt)}
            if L == max(layers):
                prof = cProfile.Profile()
                st.sync()
                prof.enable()
                st.s.opt.zero_grad(set_to_none=st.s.set_to_none)
                loss, held = st.forward_loss(inp, tgt)
                loss.backward()
                prof.disable()
                del loss, held
                st.sync()
                stats = pstats.Stats(prof)
                top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:profile_top]
                row["profile_top"] = [{"function": f"{os.path.basename(f)}:{line}({fn})", "calls": nc,
                                       "own_ms": round(tt * 1e3, 3), "cumulative_ms": round(ct * 1e3, 3)}
                                      for (f, line, fn), (cc, nc, tt, ct, _) in top]
                row["profile_total_ms"] = round(sum(v[2] for v in stats.stats.values()) * 1e3, 3)
            out.append(row)
            print(f"host probe {name} L={L}: {row['host_ms']}, GPU forward+backward "
                  f"{row['gpu_forward_backward_ms']:.2f} ms", file=sys.stderr, flush=True)
            del s, st, inp, tgt
            torch.cuda.empty_cache()
    return {"rows": out, "versions": versions}


def gpu_forward_backward_ms(st, inp, tgt, reps=5):
    """Median GPU milliseconds (CUDA events) of zero_grad + forward + loss + backward."""
    import statistics
    times = []
    for _ in range(reps):
        st.sync()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        st.s.opt.zero_grad(set_to_none=st.s.set_to_none)
        loss, held = st.forward_loss(inp, tgt)
        loss.backward()
        b.record()
        del loss, held
        b.synchronize()
        times.append(a.elapsed_time(b))
    return round(statistics.median(times), 4)


def coat_optimizer_rate(device, numel=1 << 26, reps=10):
    """COAT's optimizer step (CoatAdamW, its DE kernel) over one fp32 parameter of `numel`
    elements: median milliseconds, and per 2^28 parameters. The optimizer's one launch per
    parameter tensor is the host side (host_optimizer_ms); this is the GPU's rate."""
    import statistics
    import measure_coat
    p = torch.nn.Parameter(torch.randn(numel, device=device) * 0.02)
    p.grad = torch.randn_like(p) * 1e-3
    model = torch.nn.Module()
    model.w = p
    opt = measure_coat.build_optimizer(model, 1e-4)
    opt.step()  # creates the state
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        opt.step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    ms = statistics.median(times)
    return {"params": numel, "median_ms": ms, "ms_per_2p28_params": ms * (1 << 28) / numel, "reps": reps}


if __name__ == "__main__":
    main()
