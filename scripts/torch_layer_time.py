#!/usr/bin/env python3
"""Time a real PyTorch BF16 Llama decoder layer (forward + backward), PyTorch SDPA attention,
fused fp32 AdamW and eager per-tensor amax on the GPU, for `fp8sim speed`.

fp8sim speed replays a layer kernel by kernel; this script is the reference it is checked
against (the BF16 layer time must agree within 15%) and the source of the two things fp8sim does
not implement itself: fused causal attention (F.scaled_dot_product_attention, FlashAttention
backend) and torch.optim.AdamW(fused=True) with fp32 states. Its JSON ("fp8sim-torch-times/1")
goes to `fp8sim speed --torch-times FILE`.

The layer is written here from the Llama architecture (pre-norm RMSNorm, separate q/k/v/o
projections, rotate-half RoPE, causal attention, SwiGLU MLP, residual adds), BF16 parameters and
activations, no autocast; shapes come from fp8sim's models/NAME.json.

Examples:
  python scripts/torch_layer_time.py --config llama2-7b:2x2048 --out torch.json
  python scripts/torch_layer_time.py --config llama2-7b:1x2048 --config llama2-13b:1x1024 \
      --adamw-params 268435456 --adamw-model tinyllama-1.1b --elementwise --amax --out torch.json
  python scripts/torch_layer_time.py --device cpu --config tiny-llama:1x64 --reps 2 --out t.json  (smoke test)
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import types
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # --help works without torch; main() says it is missing in one line
    torch = F = None
    nn = types.SimpleNamespace(Module=object)

SCHEMA = "fp8sim-torch-times/1"
FIG4B_SIZES = [(11008, 16384), (11008, 8192), (4096, 16384), (4096, 8192)]


def parse_config(text):
    """'llama2-7b:2x2048' -> ('llama2-7b', 2, 2048)"""
    try:
        name, shape = text.rsplit(":", 1)
        batch, seq = shape.lower().split("x")
        batch, seq = int(batch), int(seq)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--config '{text}' must look like MODEL:BATCHxSEQ (e.g. llama2-7b:2x2048)")
    if batch <= 0 or seq <= 0 or not name:
        raise argparse.ArgumentTypeError(f"--config '{text}': batch and seq must be positive")
    return name, batch, seq


def load_model(models_dir, name):
    path = name if name.endswith(".json") else os.path.join(models_dir, name + ".json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as e:
        sys.exit(f"torch_layer_time.py: error: cannot read model '{name}' ({path}): {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"torch_layer_time.py: error: {path} is not valid JSON: {e}")
    need = ["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"]
    missing = [k for k in need if not isinstance(cfg.get(k), int) or cfg[k] <= 0]
    if missing:
        sys.exit(f"torch_layer_time.py: error: {path}: missing or non-positive {', '.join(missing)}")
    if cfg.get("activation", "swiglu") != "swiglu":
        sys.exit(f"torch_layer_time.py: error: {path}: only SwiGLU models are timed")
    cfg["_head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    return cfg


class Timer:
    """CUDA events on a GPU (device time), perf_counter with a sync on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.sleep_cycles = None

    def _queue_ahead(self):
        """Keeps the GPU busy (torch.cuda._sleep, about 3 ms) while the host queues the timed call,
        so that the events around it measure the kernels alone, not the host's time to launch them."""
        if self.sleep_cycles is None:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda._sleep(1_000_000)
            b.record()
            b.synchronize()
            self.sleep_cycles = int(1_000_000 * 3.0 / max(a.elapsed_time(b), 1e-3))
        torch.cuda._sleep(self.sleep_cycles)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def measure(self, fn, warmup, reps, setup=None, kernels_only=False):
        """Median/min/max ms of fn() over reps runs after warmup runs; setup() runs untimed before each.
        kernels_only: the GPU time of fn's kernels, its launches queued behind a sleep (for calls
        whose host work can exceed their kernels', as SDPA's forward and backward do)."""
        for _ in range(warmup):
            if setup:
                setup()
            fn()
        self.sync()
        times = []
        for _ in range(reps):
            if setup:
                setup()
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if kernels_only:
                    self._queue_ahead()
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return {"median": statistics.median(times), "min": min(times), "max": max(times), "reps": reps}


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(seq, d, theta, device, dtype):
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    pos = torch.arange(seq, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # (seq, d)
    return emb.cos().to(dtype)[None, :, None, :], emb.sin().to(dtype)[None, :, None, :]


class LlamaLayer(nn.Module):
    def __init__(self, cfg, device, dtype):
        super().__init__()
        H, Fd = cfg["hidden_size"], cfg["intermediate_size"]
        self.nh, self.nkv, self.d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["_head_dim"]
        self.eps = float(cfg.get("norm_eps", 1e-5))
        kw = dict(bias=False, device=device, dtype=dtype)
        self.q_proj = nn.Linear(H, self.nh * self.d, **kw)
        self.k_proj = nn.Linear(H, self.nkv * self.d, **kw)
        self.v_proj = nn.Linear(H, self.nkv * self.d, **kw)
        self.o_proj = nn.Linear(self.nh * self.d, H, **kw)
        self.gate_proj = nn.Linear(H, Fd, **kw)
        self.up_proj = nn.Linear(H, Fd, **kw)
        self.down_proj = nn.Linear(Fd, H, **kw)
        self.attn_norm = nn.Parameter(torch.ones(H, device=device, dtype=dtype))
        self.mlp_norm = nn.Parameter(torch.ones(H, device=device, dtype=dtype))
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.o_proj, self.gate_proj, self.up_proj, self.down_proj):
            nn.init.normal_(lin.weight, std=0.02)

    def forward(self, x, cos, sin, attention):
        B, S, H = x.shape
        h = F.rms_norm(x, (H,), self.attn_norm, self.eps)
        q = self.q_proj(h).view(B, S, self.nh, self.d)
        k = self.k_proj(h).view(B, S, self.nkv, self.d)
        v = self.v_proj(h).view(B, S, self.nkv, self.d)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, S, self.nh * self.d))
        h = F.rms_norm(x, (H,), self.mlp_norm, self.eps)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def make_attention(nh, nkv, backend):
    gqa = nh != nkv

    def attention(q, k, v):
        kw = {"enable_gqa": True} if gqa else {}
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)

    return attention


def attention_kernel_names(fn):
    """Names of the GPU kernels fn() launches that look like attention (one profiled run)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type.name == "CUDA"}
    keys = ("flash", "fmha", "attention", "sdpa", "cudnn")
    return sorted(n[:120] for n in names if any(k in n.lower() for k in keys))


def pick_backend(device):
    """FlashAttention (what COAT's models use) when this torch/GPU has it, else torch's default."""
    if device.type != "cuda":
        return None, "default (cpu)"
    try:
        from torch.nn.attention import SDPBackend

        return SDPBackend.FLASH_ATTENTION, "flash"
    except ImportError:
        return None, "default"


def time_config(cfg, name, batch, seq, device, dtype, timer, args, backend, backend_name):
    torch.manual_seed(0)
    H, Fd = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["_head_dim"]
    out = {"model": name, "batch": batch, "seq": seq, "hidden": H, "ffn": Fd, "heads": nh, "kv_heads": nkv,
           "head_dim": d, "sdpa_backend": backend_name}
    attention = make_attention(nh, nkv, backend)
    layer = LlamaLayer(cfg, device, dtype)
    cos, sin = rope_tables(seq, d, float(cfg.get("rope_theta", 10000.0)), device, dtype)
    x = torch.randn(batch, seq, H, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(batch, seq, H, device=device, dtype=dtype)

    def clear_grads():
        x.grad = None
        for p in layer.parameters():
            p.grad = None

    def fwd_bwd():
        layer(x, cos, sin, attention).backward(dy)

    def fwd():
        layer(x, cos, sin, attention)

    out["layer_fwd_bwd_ms"] = timer.measure(fwd_bwd, args.warmup, args.reps, setup=clear_grads)
    out["layer_fwd_ms"] = timer.measure(fwd, args.warmup, args.reps)
    clear_grads()

    # Attention alone at the layer's shapes: (B, S, heads, d) tensors seen as (B, heads, S, d).
    q = torch.randn(batch, seq, nh, d, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(batch, seq, nkv, d, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(batch, seq, nkv, d, device=device, dtype=dtype, requires_grad=True)
    do = torch.randn(batch, nh, seq, d, device=device, dtype=dtype)

    def time_sdpa(fn, k_, v_):
        """fn's forward and backward times on q, k_, v_. SDPA's own host work (cuDNN's graph lookup,
        autograd) exceeds its kernels' time at these shapes; the step models price kernels and the
        host separately, so these are kernel times."""
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k_, v_))
        fwd = timer.measure(lambda: fn(qt, kt, vt), args.warmup, args.reps, kernels_only=True)
        holder = {}

        def setup():
            q.grad = k_.grad = v_.grad = None
            holder["o"] = fn(q.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2))
            timer.sync()

        bwd = timer.measure(lambda: holder["o"].backward(do), args.warmup, args.reps, setup=setup, kernels_only=True)
        holder.clear()
        return fwd, bwd, (lambda: fn(qt, kt, vt).sum().backward())

    out["sdpa_fwd_ms"], out["sdpa_bwd_ms"], _ = time_sdpa(attention, k, v)
    if backend is not None:
        # What a framework that leaves the choice to PyTorch runs (transformers' "sdpa", the
        # project's torch reference): SDPA's default backend order, which on Hopper may pick
        # cuDNN's fused attention over FlashAttention. `fp8sim speed --framework` prices with these.
        out["sdpa_default_fwd_ms"], out["sdpa_default_bwd_ms"], step = time_sdpa(make_attention(nh, nkv, None), k, v)
        out["sdpa_default_kernels"] = attention_kernel_names(step)

        # What transformers 5.x runs under torch.compile: K/V at every head (repeated by the compiled
        # graph before the call) and an explicit boolean (B, 1, S, S) causal mask (is_causal is not
        # used while tracing), so the kernel cannot skip the blocks above the diagonal.
        # `fp8sim speed --framework hf --compile` prices attention with these.
        mask = torch.ones(seq, seq, dtype=torch.bool, device=device).tril().expand(batch, 1, seq, seq)
        kf, vf = (t.detach().repeat_interleave(nh // nkv, dim=2).requires_grad_() for t in (k, v))

        def masked(q_, k_, v_):
            return F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask)

        out["sdpa_masked_fwd_ms"], out["sdpa_masked_bwd_ms"], step = time_sdpa(masked, kf, vf)
        out["sdpa_masked_kernels"] = attention_kernel_names(step)
        del mask, kf, vf, step
    del q, k, v, do

    # The layer's 21 GEMMs as PyTorch runs them for nn.Linear: fprop x W^T, dgrad dY W, wgrad dY^T X.
    T = batch * seq
    gemm = {}
    with torch.no_grad():
        for lname, lin in (("q_proj", layer.q_proj), ("k_proj", layer.k_proj), ("v_proj", layer.v_proj),
                           ("o_proj", layer.o_proj), ("gate_proj", layer.gate_proj), ("up_proj", layer.up_proj),
                           ("down_proj", layer.down_proj)):
            N, K = lin.weight.shape
            xin = torch.randn(T, K, device=device, dtype=dtype)
            gout = torch.randn(T, N, device=device, dtype=dtype)
            W = lin.weight
            gemm[lname + ".fprop"] = timer.measure(lambda: F.linear(xin, W), args.warmup, args.reps)["median"]
            gemm[lname + ".dgrad"] = timer.measure(lambda: gout @ W, args.warmup, args.reps)["median"]
            gemm[lname + ".wgrad"] = timer.measure(lambda: gout.t() @ xin, args.warmup, args.reps)["median"]
            del xin, gout
    out["gemm_ms"] = gemm
    out["gemm_ms_total"] = sum(gemm.values())
    del layer, x, dy, cos, sin
    return out


def time_adamw(sizes, device, timer, args, foreach=False):
    """torch.optim.AdamW over fp32 parameters of these sizes (numels): fused on a GPU, or the
    multi-tensor for-each implementation with `foreach`."""
    ps = [torch.nn.Parameter(torch.empty(n, device=device, dtype=torch.float32).normal_(0, 0.02)) for n in sizes]
    for p in ps:
        p.grad = torch.empty_like(p).normal_(0, 1e-3)
    fused = device.type == "cuda" and not foreach
    opt = torch.optim.AdamW(ps, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            **({"foreach": True} if foreach else {"fused": fused}))
    r = timer.measure(opt.step, args.warmup, args.reps)
    n = sum(sizes)
    r.update(params=n, fused=fused, foreach=foreach, gparams_per_s=n / (r["median"] * 1e6))
    del opt, ps
    return r


def model_param_sizes(cfg):
    """Numels of a Llama model's parameter tensors, in the order a transformers model lists them."""
    h, f, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["_head_dim"]
    kv = cfg["num_key_value_heads"] * d
    layer = [h * h, kv * h, kv * h, h * h, f * h, f * h, h * f, h, h]  # q k v o gate up down, 2 norms
    sizes = [cfg["vocab_size"] * h] + layer * cfg["num_hidden_layers"] + [h]
    if not cfg.get("tie_word_embeddings", False):
        sizes.append(cfg["vocab_size"] * h)
    return sizes


def time_adamw_model(name, cfg, device, timer, args, foreach=False):
    """AdamW over the model's own list of fp32 parameters: the multi-tensor launches and the small
    tensors (norms) of a real step, which one large tensor does not have."""
    sizes = model_param_sizes(cfg)
    return dict(time_adamw(sizes, device, timer, args, foreach), model=name, tensors=len(sizes))


# Eager PyTorch elementwise ops at a size where bandwidth, not launch, decides (ELEMENTWISE_N
# elements), and a burst of tiny ops for the host's issue interval: what `fp8sim speed --framework` prices a
# framework's non-GEMM ops with (bytes / rate; the issue interval bounds the host's side).
ELEMENTWISE_N = 1 << 26
ELEMENTWISE_OPS = [
    # (label, input dtype, function of x and y, bytes per element: inputs read + output written)
    ("add fp32", "fp32", lambda x, y: x + y, 12),
    ("mul bf16", "bf16", lambda x, y: x * y, 6),
    ("cast fp32->bf16", "fp32", lambda x, y: x.to(torch.bfloat16), 6),
    ("cast bf16->fp32", "bf16", lambda x, y: x.float(), 6),
    ("mul fp32 by bf16", "mixed", lambda x, y: x * y, 10),
    ("mean over rows of 2048, fp32", "fp32", lambda x, y: x.view(-1, 2048).mean(-1, keepdim=True), 4),
]


def time_elementwise(device, timer, args):
    n = ELEMENTWISE_N if device.type == "cuda" else 1 << 16
    rows = []
    for label, kind, fn, bpe in ELEMENTWISE_OPS:
        a = torch.randn(n, device=device, dtype=torch.bfloat16 if kind == "bf16" else torch.float32)
        b = torch.randn(n, device=device, dtype=torch.float32 if kind == "fp32" else torch.bfloat16)
        t = timer.measure(lambda: fn(a, b), args.warmup, args.reps)
        rows.append({"op": label, "elements": n, "bytes": n * bpe, "median_ms": t["median"],
                     "gbps": n * bpe / (t["median"] * 1e6)})
        del a, b
    # Back-to-back tiny ops: the GPU waits on the host, so the time per op is eager PyTorch's
    # issue interval (dispatch + launch), the cost that binds a step when its kernels are small.
    small = torch.randn(4096, device=device)

    def burst():
        for _ in range(LAUNCH_BURST):
            small.add_(1.0)

    t = timer.measure(burst, args.warmup, args.reps)
    rates = sorted(r["gbps"] for r in rows)
    return {"ops": rows, "gbps_median": statistics.median(rates), "issue_interval_ms": t["median"] / LAUNCH_BURST,
            "issue_op": f"{LAUNCH_BURST} back-to-back in-place adds of 4096 fp32 elements"}


LAUNCH_BURST = 200


def time_amax(device, dtype, timer, args, sizes):
    rows = []
    for r, c in sizes:
        x = torch.randn(r, c, device=device, dtype=dtype)
        t = timer.measure(lambda: x.abs().max(), args.warmup, args.reps)
        rows.append({"rows": r, "cols": c, "median_ms": t["median"], "min_ms": t["min"], "max_ms": t["max"],
                     "op": "x.abs().max() (eager)"})
        del x
    return rows


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", type=parse_config, required=True,
                    help="MODEL:BATCHxSEQ, repeatable (MODEL = models/MODEL.json or a JSON path)")
    ap.add_argument("--models-dir", default=os.environ.get("FP8SIM_MODELS_DIR", os.path.join(here, "..", "models")))
    ap.add_argument("--out", required=True, help="JSON output file (written atomically)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--adamw-params", type=int, default=1 << 28,
                    help="parameters for the fused AdamW timing (0 skips it; fp8sim's plan uses 2^28)")
    ap.add_argument("--adamw-model", metavar="MODEL",
                    help="also time fused and for-each AdamW over MODEL's own parameter list (models/MODEL.json or a JSON path)")
    ap.add_argument("--elementwise", action="store_true",
                    help="also time eager elementwise ops (bandwidth) and a tiny op (per-kernel floor)")
    ap.add_argument("--amax", action="store_true", help="also time eager x.abs().max() at COAT Fig. 4(b)'s sizes")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    if torch is None:
        sys.exit("torch_layer_time.py: error: PyTorch is not installed (run it where torch is, e.g. the GPU machine)")
    if args.reps <= 0 or args.warmup < 0:
        sys.exit("torch_layer_time.py: error: --reps must be positive and --warmup non-negative")
    if args.adamw_params < 0:
        sys.exit("torch_layer_time.py: error: --adamw-params must be >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_layer_time.py: error: no CUDA device (use --device cpu for a smoke test)")
    device = torch.device(args.device)
    dtype = torch.bfloat16
    timer = Timer(device)
    backend, backend_name = pick_backend(device)

    doc = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch_version": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "sdpa_backend": backend_name,
        "command": " ".join(["python"] + sys.argv),
        "configs": [],
    }
    for name, batch, seq in args.config:
        cfg = load_model(args.models_dir, name)
        label = f"{name} batch {batch} seq {seq}"
        try:
            try:
                row = time_config(cfg, name, batch, seq, device, dtype, timer, args, backend, backend_name)
            except RuntimeError as e:
                if backend is None or "out of memory" in str(e).lower():
                    raise
                # This torch build refused the flash kernel at this shape: time the default backend.
                print(f"torch_layer_time.py: {label}: flash attention unavailable ({e}); using the default",
                      file=sys.stderr)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                row = time_config(cfg, name, batch, seq, device, dtype, timer, args, None, "default")
            doc["configs"].append(row)
            print(f"{label}: layer fwd+bwd {row['layer_fwd_bwd_ms']['median']:.3f} ms, "
                  f"SDPA fwd {row['sdpa_fwd_ms']['median']:.3f} / bwd {row['sdpa_bwd_ms']['median']:.3f} ms, "
                  f"GEMMs {row['gemm_ms_total']:.3f} ms", file=sys.stderr)
        except RuntimeError as e:
            doc["configs"].append({"model": name, "batch": batch, "seq": seq, "error": str(e).splitlines()[0]})
            print(f"torch_layer_time.py: {label}: failed: {str(e).splitlines()[0]}", file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.adamw_params:
        doc["adamw_fused_fp32"] = time_adamw([args.adamw_params], device, timer, args)
        print(f"AdamW fused fp32: {doc['adamw_fused_fp32']['gparams_per_s']:.1f} G params/s", file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.adamw_model:
        doc["adamw_fused_fp32_model"] = time_adamw_model(args.adamw_model, load_model(args.models_dir, args.adamw_model),
                                                         device, timer, args)
        a = doc["adamw_fused_fp32_model"]
        print(f"AdamW fused fp32 over {a['model']} ({a['tensors']} tensors): {a['gparams_per_s']:.1f} G params/s",
              file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        doc["adamw_foreach_fp32_model"] = time_adamw_model(
            args.adamw_model, load_model(args.models_dir, args.adamw_model), device, timer, args, foreach=True)
        a = doc["adamw_foreach_fp32_model"]
        print(f"AdamW for-each fp32 over {a['model']} ({a['tensors']} tensors): {a['gparams_per_s']:.1f} G params/s",
              file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.elementwise:
        doc["elementwise"] = time_elementwise(device, timer, args)
        e = doc["elementwise"]
        print(f"eager elementwise: median {e['gbps_median']:.0f} GB/s, issue interval {e['issue_interval_ms'] * 1e3:.1f} us",
              file=sys.stderr)
    if args.amax:
        doc["amax"] = time_amax(device, dtype, timer, args, FIG4B_SIZES if device.type == "cuda" else [(64, 256)])
    tmp = f"{args.out}.tmp.{os.getpid()}"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    ok = sum(1 for c in doc["configs"] if "error" not in c)
    print(f"wrote {args.out}: {ok}/{len(doc['configs'])} configs timed", file=sys.stderr)
    return 0 if ok == len(doc["configs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
