#!/usr/bin/env python3
"""Count what an eager training step launches: every ATen op of one step of a framework
(scripts/measure_step.py's torch and hf), with the bytes it reads and writes, and fit those totals
to the model's dimensions.

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
FUSED_OPTIM = {"_fused_adamw_", "_fused_adam_", "_fused_adamw", "_fused_adam"}
FOREACH_CHUNK = 320 * 65536  # elements per multi-tensor launch (320 blocks of 65536) counted for a _foreach op

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

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view or func.namespace == "prim" or func._schema.name == "aten::_unsafe_view":
            return out
        name = func._schema.name.split("::")[-1]
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
        for key, table in ((g, self.groups), (f"{g}:{name}", self.ops)):
            e = table.setdefault(key, {"kernels": 0, "read": 0, "written": 0})
            e["kernels"] += kernels
            e["read"] += read
            e["written"] += written
        return out


def config_dims(layers, batch, seq, hidden, heads, kv, ffn, vocab):
    d = hidden // heads
    return {"L": layers, "B": batch, "S": seq, "T": batch * seq, "H": hidden, "NH": heads, "KV": kv * d, "d": d,
            "F": ffn, "V": vocab, "W": 2 * hidden * hidden + 2 * hidden * kv * d + 3 * hidden * ffn}


def count_one(framework, dims, device):
    import measure_step as ms
    cfg = {"name": "count", "hidden_size": dims["H"], "intermediate_size": dims["F"], "num_hidden_layers": dims["L"],
           "num_attention_heads": dims["NH"], "num_key_value_heads": dims["KV"] // dims["d"],
           "vocab_size": dims["V"], "norm": "rmsnorm", "activation": "swiglu", "tie_word_embeddings": False,
           "norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": dims["S"], "attention_bias": False}
    args = types.SimpleNamespace(framework=framework, checkpointing=False, compile=False, coat=None)
    s = ms.build(args, cfg, device)
    st = ms.Stepper(s, cfg, device)
    inp, tgt = st.batch(dims["B"], dims["S"])
    st.step(inp, tgt)  # the first step creates the gradients and the optimizer states
    st.sync()
    c = Counter(device)
    with c:
        st.step(inp, tgt)
    st.sync()
    return {"groups": c.groups, "ops": c.ops, "versions": s.versions, "training": s.training}


def fit(rows, key):
    """Least-squares coefficients of the features for rows[i]['totals'][key]; largest relative residual."""
    import numpy as np
    names = KERNEL_FEATURES if key.endswith("_kernels") else list(FEATURES)
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
    ap.add_argument("--framework", choices=["torch", "hf"], required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--configs", type=int, default=len(CONFIGS), help=f"how many of the {len(CONFIGS)} configurations")
    ap.add_argument("--out", required=True, help="output JSON path")
    args = ap.parse_args()
    if torch is None:
        sys.exit("count_step_ops.py: error: PyTorch is not installed")
    if args.configs < 1 or args.configs > len(CONFIGS):
        sys.exit(f"count_step_ops.py: error: --configs must be 1..{len(CONFIGS)}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("count_step_ops.py: error: no CUDA device (counts on the CPU differ: pass --device cpu for a smoke test)")
    torch.manual_seed(0)
    rows = []
    for i, c in enumerate(CONFIGS[:args.configs]):
        dims = config_dims(*c)
        r = count_one(args.framework, dims, device)
        totals = {}
        for g in ("elementwise", "optimizer"):
            e = r["groups"].get(g, {"kernels": 0, "read": 0, "written": 0})
            totals[f"{g}_bytes"] = e["read"] + e["written"]
            totals[f"{g}_kernels"] = e["kernels"]
        rows.append({"dims": dims, "totals": totals, "groups": r["groups"], "ops": r["ops"]})
        print(f"[{i + 1}/{args.configs}] {c}: elementwise {totals['elementwise_bytes'] / 1e6:.2f} MB in "
              f"{totals['elementwise_kernels']} kernels", file=sys.stderr)
    doc = {"format": SCHEMA, "framework": args.framework, "device": str(device),
           "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           "versions": r["versions"], "training": r["training"],
           "command": "python3 scripts/count_step_ops.py " + " ".join(sys.argv[1:]),
           "features": list(FEATURES), "kernel_features": KERNEL_FEATURES, "configs": rows}
    if len(rows) >= len(FEATURES):
        doc["fit"] = {k: fit(rows, k) for k in rows[0]["totals"]}
        for k, f in doc["fit"].items():
            print(f"{k}: rank {f['rank']}/{f['features']}, max residual {f['max_relative_residual']:.2e}: "
                  f"{f['coefficients']}", file=sys.stderr)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
