#!/usr/bin/env python3
"""Peer timings for `fp8sim bench`: the same ops in PyTorch (eager and torch.compile),
torch.optim.AdamW(fused=True), torch._scaled_mm / torch.matmul, and COAT's own FP8 AdamW kernels
when the `coat` package is importable. Runs on the GPU machine beside the bench.

The plan (which kernels, shapes and specs) comes from the C++ side so both sides time the same
thing under the same key:

    fp8sim bench --write-plan plan.json [--smoke]
    python3 scripts/bench_peers.py --plan plan.json --json peers.json
    fp8sim bench --peers peers.json --json bench.json --md bench.md

Output JSON: {"device": ..., "torch": ..., "complete": ..., "entries": [{"key", "peer", "median_ms",
"min_ms", "max_ms", "reps", "status"}, ...]}, written at the start and again after every entry, with
"complete" false until the plan's last entry has been tried. Every entry is independent: a failure
(an op this torch does not support, an out-of-memory, a compile error) is recorded as status
"error: ..." and the run goes on. Timing: warm-up calls, then each timed call preceded by an L2 flush (a 256 MiB read, as
fp8sim bench does: a write would leave a whole L2 of dirty lines to be written back inside the
timed call), repeated until the flushes last the plan's launch_lead_us (as fp8sim bench does),
then CUDA events around the call only, median / min / max. The lead lets Python enqueue the call's
kernels before the GPU reaches the start event, so host-side work (torch.compile's guards and
launchers, eager op dispatch) is not timed, as fp8sim bench does not time its own
(docs/benchmarks.md).

--device cpu runs tiny shapes on the CPU (for checking this script without a GPU; the numbers
mean nothing there).
"""
import argparse
import json
import math
import os
import sys
import time
import traceback


# The spec aliases of the 4-bit and 6-bit quantizers the plan names (sim/quant/spec.cpp).
LOWBIT_ALIASES = {  # NOT-RECIPES: spec aliases, not training recipes.
    "nvfp4": "e2m1:g16:scale=e4m3",
    "nvfp4-w": "e2m1:b16x16:scale=e4m3",
    "mxfp4": "e2m1:g32:scale=e8m0:mx=floor",
    "mxfp6-e2m3": "e2m3:g32:scale=e8m0:mx=floor",
    "mxfp6-e3m2": "e3m2:g32:scale=e8m0:mx=floor",
}
# bits, mantissa bits, smallest normal exponent, largest value, largest exponent
LOWBIT_FORMATS = {"e2m1": (4, 1, 0, 6.0, 2), "e2m3": (6, 3, 0, 7.5, 2), "e3m2": (6, 2, -2, 28.0, 4)}


def parse_spec(spec):
    """The subset of fp8sim's QuantSpec text form the peers implement."""
    head, _, tail = spec.partition(":")
    if head in LOWBIT_ALIASES:
        spec = LOWBIT_ALIASES[head] + (":" + tail if tail else "")
    parts = spec.split(":")
    out = {"format": parts[0], "gran": parts[1], "scale": "fp32", "de": "none", "eps": 0.0, "rht": 0, "mx": "rceil"}
    for kv in parts[2:]:
        if "=" not in kv:
            continue
        k, v = kv.split("=", 1)
        if k in ("scale", "de", "mx"):
            out[k] = v
        elif k == "eps":
            out["eps"] = float(v)
        elif k == "rht":
            out["rht"] = int(v)
    return out


def make_lowbit_quantizer(torch, p):
    """E2M1 / E2M3 / E3M2 codes (nearest even, saturating) with NVFP4's two-level scales
    (scale=e4m3) or E8M0 scales (mx=floor, the OCP MX rule), 1xG groups or RxC blocks, the
    16-element random Hadamard transform first (rht=16), codes packed as fp8sim stores them
    (little-endian bit stream: two 4-bit codes per byte, four 6-bit codes per three bytes)."""
    bits, mb, emin, fmax, emax = LOWBIT_FORMATS[p["format"]]
    gran = p["gran"]
    if gran.startswith("g"):
        br, bc = 1, int(gran[1:])
    elif gran.startswith("b"):
        br, bc = (int(t) for t in gran[1:].split("x"))
    else:
        raise ValueError(f"peer quantizer: unsupported granularity {gran}")
    if p["scale"] not in ("e4m3", "e8m0") or (p["scale"] == "e8m0" and p["mx"] != "floor"):
        raise ValueError(f"peer quantizer: unsupported scale {p['scale']} mx={p['mx']}")
    hmat = None
    if p["rht"]:
        if p["rht"] != 16:
            raise ValueError("peer quantizer: rht=16 only")
        n = 16
        h = torch.ones(1, 1)
        while h.shape[0] < n:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        signs = torch.tensor([1.0 if not (0xD7E8 >> i) & 1 else -1.0 for i in range(n)])
        hmat = (signs[:, None] * h) / 4.0  # y = (D v) H / sqrt(16), H symmetric

    def encode(y):
        a = y.abs().clamp(max=fmax)
        e = torch.floor(torch.log2(a)).clamp(min=emin)
        r = torch.round(a * torch.exp2(mb - e))
        code = (e - emin + 1) * (2 ** mb) + r - 2 ** mb
        return code.to(torch.uint8) | (torch.signbit(y).to(torch.uint8) << (bits - 1))

    def pack(codes):
        c = codes.reshape(-1).to(torch.int32)
        if bits == 4:
            c = c.reshape(-1, 2)
            return (c[:, 0] | (c[:, 1] << 4)).to(torch.uint8)
        c = c.reshape(-1, 4)
        b0 = (c[:, 0] | (c[:, 1] << 6)) & 0xFF
        b1 = ((c[:, 1] >> 2) | (c[:, 2] << 4)) & 0xFF
        b2 = (c[:, 2] >> 4) | (c[:, 3] << 2)
        return torch.stack([b0, b1, b2], 1).to(torch.uint8).reshape(-1)

    def q(x):
        r, c = x.shape
        xf = x.float()
        if hmat is not None:
            xf = (xf.reshape(-1, 16) @ hmat.to(xf.device)).reshape(r, c)
        xb = xf.reshape(r // br, br, c // bc, bc)
        amax = xb.abs().amax(dim=(1, 3), keepdim=True)
        if p["scale"] == "e4m3":
            # tensor / tensor: torch's scalar / tensor is reciprocal() * scalar, a second rounding
            amax_t = xf.abs().amax()
            s_enc = torch.full_like(amax_t, 448.0 * fmax) / amax_t
            s_enc = torch.where(s_enc > 0, s_enc, torch.ones_like(s_enc))
            s_dec = 1.0 / s_enc
            e4 = ((amax / fmax) * s_enc).clamp(max=448.0).to(torch.float8_e4m3fn)
            stored = e4.float() * s_dec
            y = xb * (1.0 / stored).clamp(max=torch.finfo(torch.float32).max)  # an all-zero group: 0 * FLT_MAX
            scale_out = e4
        else:
            e = (torch.floor(torch.log2(amax)) - emax).clamp(-127, 127)  # E8M0's range; zero groups
            y = xb * torch.exp2(-e)
            scale_out = (e + 127).clamp(0, 254).to(torch.uint8)
        return pack(encode(y).reshape(r, c)), scale_out

    return q


def fresh_compiler(torch):
    """Forget every earlier torch.compile before compiling the next peer. The quantizers of all
    items share a few Python code objects, and Dynamo stops recompiling a code object after its
    recompile limit (8 by default): later items would silently run eagerly under the
    torch.compile label. A reset per item compiles each one for its own shape and dtype."""
    torch._dynamo.reset()


class Bencher:
    def __init__(self, torch, device, warmup, reps):
        self.torch = torch
        self.device = device
        self.warmup = warmup
        self.reps = reps
        self.flush = None
        self.gemm_cooldown_s = 0.0  # idle before each GEMM peer (the plan sets it on the GPU)
        self.lead_us = 0.0  # GPU work before each timed call (the plan's launch_lead_us)
        self.lead_flushes = 1  # flushes before each timed call (together at least lead_us)
        if device == "cuda":
            self.flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
            self.flush.fill_(0x5A)  # written once; each flush reads it (see the module docstring)
            self.flush_words = self.flush.view(torch.int32)

    def set_lead(self, lead_us):
        """How many flushes make the lead: one flush timed after a warm one."""
        self.lead_us = lead_us
        if self.device != "cuda" or lead_us <= 0:
            return
        torch = self.torch
        self.flush_sink = self.flush_words.amax()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        self.flush_sink = self.flush_words.amax()
        stop.record()
        stop.synchronize()
        us = start.elapsed_time(stop) * 1e3
        self.lead_flushes = max(1, int(math.ceil(lead_us / max(us, 1.0))))

    def time(self, fn):
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        if self.device == "cuda":
            torch.cuda.synchronize()
        times = []
        for i in range(self.reps):
            if self.device == "cuda":
                for _ in range(self.lead_flushes):  # fn() is enqueued while these run
                    self.flush_sink = self.flush_words.amax()
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        n = len(times)
        med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
        return {"median_ms": med, "min_ms": times[0], "max_ms": times[-1], "reps": n}


def make_quantizer(torch, spec):
    """Returns f(x_bf16) -> (codes, scales) implementing the spec in plain torch ops."""
    p = parse_spec(spec)
    if p["format"] in LOWBIT_FORMATS:
        return make_lowbit_quantizer(torch, p)
    fdt = torch.float8_e4m3fn if p["format"] == "e4m3" else torch.float8_e5m2
    fmax = 448.0 if p["format"] == "e4m3" else 57344.0
    gran = p["gran"]
    eps = p["eps"]

    def scale_from_amax(amax):
        s = (amax + eps) / fmax
        if p["scale"] in ("pow2", "e8m0"):
            s = torch.exp2(torch.ceil(torch.log2(s)))
        s = torch.where(s > 0, s, torch.ones_like(s))
        return s

    def encode(xf, s):
        return (xf / s).clamp(-fmax, fmax).to(fdt)

    def store_scale(s):
        return s.to(torch.bfloat16) if p["scale"] == "bf16" else s

    if p["de"] == "coat":
        bound = math.log2(fmax * fmax / 2.0)

        def q_de(x):
            xg = x.float().reshape(-1, 128)
            a = xg.abs()
            mx = a.amax(-1, keepdim=True) + 1e-30
            mn = torch.where(a > 0, a, torch.full_like(a, float("inf"))).amin(-1, keepdim=True) + 1e-30
            c = torch.sqrt(mx) * torch.sqrt(mn)
            k = torch.floor(bound / torch.log2(mx / mn) * 16.0) / 16.0
            xe = torch.sign(xg) * torch.pow(a / c, k)
            s = torch.pow(mx / c, k) / fmax
            return encode(xe, s), s, k, c

        return q_de
    if gran == "tensor":
        def q(x):
            s = scale_from_amax(x.abs().amax().float())
            return encode(x.float(), s), store_scale(s)
        return q
    if gran == "row":
        def q(x):
            s = scale_from_amax(x.abs().amax(-1, keepdim=True).float())
            return encode(x.float(), s), store_scale(s)
        return q
    if gran.startswith("g"):
        g = int(gran[1:])

        def q(x):
            r, c = x.shape
            xg = x.float().reshape(r, c // g, g)
            s = scale_from_amax(xg.abs().amax(-1, keepdim=True))
            return encode(xg, s).reshape(r, c), store_scale(s)
        return q
    if gran.startswith("b"):
        br, bc = (int(t) for t in gran[1:].split("x"))

        def q(x):
            r, c = x.shape
            xb = x.float().reshape(r // br, br, c // bc, bc)
            s = scale_from_amax(xb.abs().amax(dim=(1, 3), keepdim=True))
            return encode(xb, s).reshape(r, c), store_scale(s)
        return q
    raise ValueError(f"peer quantizer: unsupported spec {spec}")


def make_cast_transpose(torch, spec, variant):
    """Per-tensor FP8 codes row-major and transposed (TransformerEngine's cast_transpose): with a
    scale from the amax history (variant "delayed": a multiplier, the tensor amax computed for the
    history in the same function) or just in time (the quantizer of the spec, then the transpose)."""
    if variant == "delayed":
        p = parse_spec(spec)
        fdt = torch.float8_e4m3fn if p["format"] == "e4m3" else torch.float8_e5m2
        fmax = 448.0 if p["format"] == "e4m3" else 57344.0

        def f(x):
            q = (x.float() * 64.0).clamp(-fmax, fmax).to(fdt)
            return q, q.t().contiguous(), x.abs().amax()
        return f
    quant = make_quantizer(torch, spec)

    def g(x):
        q, s = quant(x)
        return q, q.t().contiguous(), s
    return g


def randn_bf16(torch, shape, device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(torch.bfloat16)


# ---- COAT's own kernels (optional peer) ---------------------------------------------------------
# The sdist of PyPI `fp8-coat` is carried in the bundle (never part of the project) and compiled
# here with PyTorch's extension builder. Its kernels/ folder lacks the two headers bindings.cpp
# includes; they only declare the two entry points, so we write those declarations ourselves
# (signatures as defined in fp8_adamw_cuda.cpp and fp8_adamw_expand_cuda.cpp).
_DECL_ADAMW = """#pragma once
#include <torch/extension.h>
void FP8_AdamW(torch::Tensor params, torch::Tensor grads, torch::Tensor exp_avg, torch::Tensor scale_exp_avg,
               torch::Tensor exp_avg_sq, torch::Tensor scale_exp_avg_sq, float beta1, float beta2, float lr,
               float wd, float eps, int step, int qgroup_size);
"""
_DECL_EXPAND = """#pragma once
#include <torch/extension.h>
void FP8_AdamW_expand(torch::Tensor params, torch::Tensor grads, torch::Tensor exp_avg, torch::Tensor scale_exp_avg,
                      torch::Tensor expand_exp_avg, torch::Tensor sqrtminmax_exp_avg, torch::Tensor exp_avg_sq,
                      torch::Tensor scale_exp_avg_sq, torch::Tensor expand_exp_avg_sq,
                      torch::Tensor sqrtminmax_exp_avg_sq, float beta1, float beta2, float lr, float wd, float eps,
                      int step, int qgroup_size, int expand_min);
"""


def build_coat(sdist, workdir):
    import glob
    import tarfile
    from torch.utils import cpp_extension
    os.makedirs(workdir, exist_ok=True)
    with tarfile.open(sdist) as t:
        try:
            t.extractall(workdir, filter="data")
        except TypeError:
            t.extractall(workdir)
    kdirs = glob.glob(os.path.join(workdir, "*", "coat", "optimizer", "kernels"))
    if not kdirs:
        raise RuntimeError(f"no coat/optimizer/kernels in {sdist}")
    kdir = kdirs[0]
    os.makedirs(os.path.join(kdir, "include"), exist_ok=True)
    for name, text in (("fp8_adamw.h", _DECL_ADAMW), ("fp8_adamw_expand.h", _DECL_EXPAND)):
        path = os.path.join(kdir, "include", name)
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(text)
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 8))
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    srcs = [os.path.join(kdir, f) for f in ("fp8_adamw_cuda.cpp", "fp8_adamw_cuda_kernel.cu", "fp8_adamw_expand_cuda.cpp",
                                            "fp8_adamw_expand_cuda_kernel.cu", "bindings.cpp")]
    bdir = os.path.join(workdir, "build")
    os.makedirs(bdir, exist_ok=True)
    t0 = time.time()
    mod = cpp_extension.load(name="qoptim_cuda", sources=srcs, extra_include_paths=[kdir], build_directory=bdir,
                             extra_cflags=["-O3"],
                             extra_cuda_cflags=["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                                                "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"],
                             verbose=False)
    print(f"bench_peers.py: built COAT's kernels in {time.time() - t0:.0f} s", flush=True)
    return mod


class CoatState:
    """COAT's FP8 optimizer state for n parameters, initialised as COAT's optimizer does (codes 0,
    scales 0, expand 1, sqrt-min-max 1)."""

    def __init__(self, torch, n, device, expand):
        groups = (n + 127) // 128
        f8 = torch.float8_e4m3fn
        self.m = torch.zeros(n, dtype=f8, device=device)
        self.v = torch.zeros(n, dtype=f8, device=device)
        self.sm = torch.zeros(groups, device=device)
        self.sv = torch.zeros(groups, device=device)
        self.expand = expand
        if expand:
            self.km = torch.ones(groups, device=device)
            self.kv = torch.ones(groups, device=device)
            self.cm = torch.ones(groups, device=device)
            self.cv = torch.ones(groups, device=device)

    def step(self, mod, p, g, step, hp):
        if self.expand:
            mod.fp8_adamw_expand_step(p, g, self.m, self.sm, self.km, self.cm, self.v, self.sv, self.kv, self.cv,
                                      hp["beta1"], hp["beta2"], hp["lr"], hp["wd"], hp["eps"], step, 128, 16)
        else:
            mod.fp8_adamw_step(p, g, self.m, self.sm, self.v, self.sv, hp["beta1"], hp["beta2"], hp["lr"], hp["wd"],
                               hp["eps"], step, 128)


HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 0.01}


def coat_dump(torch, mod, n, out_dir, device):
    """Two COAT expand steps from COAT's initial state on random data, saved as .npy for
    `fp8sim bench --coat-states DIR` (which runs fp8sim's kernel on the same inputs and counts
    equal codes)."""
    import numpy as np
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator(device=device)
    g.manual_seed(1234)
    p = torch.randn(n, generator=g, device=device) * 0.02
    g1 = torch.randn(n, generator=g, device=device) * 1e-3
    g2 = torch.randn(n, generator=g, device=device) * 1e-3

    def save(name, t):
        a = t.detach().cpu()
        if a.dtype == torch.float8_e4m3fn:
            a = a.view(torch.uint8)
        np.save(os.path.join(out_dir, name + ".npy"), a.numpy())

    save("p0", p)
    save("g1", g1)
    save("g2", g2)
    st = CoatState(torch, n, device, True)
    for step, grad in ((1, g1), (2, g2)):
        st.step(mod, p, grad, step, HYPER)
        torch.cuda.synchronize()
        for name, t in (("p", p), ("m_codes", st.m), ("m_scale", st.sm), ("m_k", st.km), ("m_c", st.cm),
                        ("v_codes", st.v), ("v_scale", st.sv), ("v_k", st.kv), ("v_c", st.cv)):
            save(f"s{step}_{name}", t)
    meta = dict(HYPER, n=n, steps=2, group_size=128, expand_min=16, torch=torch.__version__,
                note="COAT fp8_adamw_expand_step from COAT's initial state; s1_* after step 1, s2_* after step 2")
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(f"bench_peers.py: wrote COAT's states for {n} parameters to {out_dir}", flush=True)


def gemm_cooldown(torch, b):
    """Idle as `fp8sim bench` does before timing each GEMM (the plan's gemm_cooldown_s)."""
    if b.gemm_cooldown_s > 0:
        torch.cuda.synchronize()
        time.sleep(b.gemm_cooldown_s)


def run_entry(torch, b, item, compile_ok, entries, device, coat_mod=None):
    op = item["op"]
    key = item["key"]

    def record(peer, fn):
        rec = {"key": key, "peer": peer}
        try:
            t0 = time.time()
            rec.update(b.time(fn))
            rec["status"] = "ok"
            rec["wall_s"] = round(time.time() - t0, 2)
        except Exception as e:  # one failing peer never stops the run
            rec["status"] = "error: " + (str(e).splitlines() or ["?"])[0][:300]
        entries.append(rec)
        print(f"  {key:60s} {peer:22s} {rec.get('median_ms', float('nan')):10.4f} ms  {rec['status'][:60]}",
              flush=True)

    def eager_and_compiled(f, x):
        """The peer f(x) eager, and under torch.compile unless the plan leaves compiling out."""
        record("torch-eager", lambda: f(x))
        if compile_ok and item.get("compile", True):
            fresh_compiler(torch)
            cf = torch.compile(f, dynamic=False)
            record("torch.compile", lambda: cf(x))

    if op == "copy":
        n = int(item["bytes"])
        src = torch.full((n,), 0x5A, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        record("torch.copy_", lambda: dst.copy_(src))
        del src, dst
    elif op in ("quantize", "cast"):
        shape = item["shape"]
        # The same input dtype as the fp8sim kernel of this item (fp32 casts and DE quantizers
        # read fp32: a bf16 peer would move half the bytes).
        x = randn_bf16(torch, shape, device, 1)
        if item.get("dtype") == "f32":
            x = x.float()
        if op == "cast":
            fdt = torch.float8_e4m3fn if item["spec"].startswith("e4m3") else torch.float8_e5m2
            f = lambda t: t.to(fdt)  # noqa: E731
        else:
            f = make_quantizer(torch, item["spec"])
        eager_and_compiled(f, x)
        del x
    elif op == "cast-transpose":
        x = randn_bf16(torch, item["shape"], device, 1)
        eager_and_compiled(make_cast_transpose(torch, item["spec"], item.get("variant", "jit")), x)
        del x
    elif op == "amax":
        x = randn_bf16(torch, item["shape"], device, 2)
        f = lambda t: t.abs().amax()  # noqa: E731
        record("torch-eager", lambda: f(x))
        if compile_ok:
            fresh_compiler(torch)
            cf = torch.compile(f, dynamic=False)
            record("torch.compile", lambda: cf(x))
        del x
    elif op == "adamw":
        n = int(item["n"])
        recipe = item.get("recipe", "fp32")
        if recipe == "fp32":
            p = torch.nn.Parameter(torch.randn(n, device=device) * 0.02)
            p.grad = torch.randn(n, device=device) * 1e-3
            fused = device == "cuda"
            opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, fused=fused)
            opt.step()  # creates the states outside the timing
            record("torch.optim.AdamW(fused)" if fused else "torch.optim.AdamW", lambda: opt.step())
            del opt, p
        elif recipe in ("coat", "coat-noexpand"):
            if coat_mod is None:
                entries.append({"key": key, "peer": "coat-kernel",
                                "status": "skipped: COAT's kernels were not built (run with --coat-sdist, which "
                                          "needs the fp8-coat sdist carried in .bundle/peers/)"})
            else:
                p = torch.randn(n, device=device) * 0.02
                g = torch.randn(n, device=device) * 1e-3
                st = CoatState(torch, n, device, recipe == "coat")
                st.step(coat_mod, p, g, 1, HYPER)  # non-trivial states before timing
                counter = [1]

                def one():
                    counter[0] += 1
                    st.step(coat_mod, p, g, counter[0], HYPER)
                record("coat-kernel" if recipe == "coat" else "coat-kernel(noexpand)", one)
                del st, p, g
    elif op == "gemm":
        m, n, k = int(item["m"]), int(item["n"]), int(item["k"])
        if item["x_format"] == "bf16":
            x = randn_bf16(torch, (m, k), device, 3)
            w = randn_bf16(torch, (n, k), device, 4)
            gemm_cooldown(torch, b)
            record("torch.matmul", lambda: torch.matmul(x, w.t()))
            del x, w
        else:
            fx = torch.float8_e4m3fn if item["x_format"] == "e4m3" else torch.float8_e5m2
            fw = torch.float8_e4m3fn if item["w_format"] == "e4m3" else torch.float8_e5m2
            x = randn_bf16(torch, (m, k), device, 3).to(fx)
            w = randn_bf16(torch, (n, k), device, 4).to(fw)
            fast = item.get("accum") == "fast"
            scaling = item.get("scaling", "tensor")
            if scaling == "tensor":
                sa = torch.tensor(1.0, device=device)
                sb = torch.tensor(1.0, device=device)
            elif scaling == "row":
                sa = torch.ones(m, 1, device=device)
                sb = torch.ones(1, n, device=device)
            else:  # DeepSeek 1x128 activations x 128x128 weights (torch's layouts)
                kb = (k + 127) // 128
                sa = torch.ones(kb, m, device=device).t()  # (M, K/128), stride (1, M)
                kb4 = (kb + 3) // 4 * 4
                sb = torch.ones((n + 127) // 128, kb4, device=device).t()[:kb4]  # (K/128 padded, N/128)
            gemm_cooldown(torch, b)
            record("torch._scaled_mm", lambda: torch._scaled_mm(x, w.t(), scale_a=sa, scale_b=sb,
                                                                 out_dtype=torch.bfloat16, use_fast_accum=fast))
            del x, w
    else:
        entries.append({"key": key, "peer": "?", "status": f"error: unknown op {op}"})
    if device == "cuda":
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", required=True, help="plan written by `fp8sim bench --write-plan`")
    ap.add_argument("--json", required=True, help="output file")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile peers")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--coat-sdist", help="fp8-coat sdist (.tar.gz): build COAT's kernels and time them as peers")
    ap.add_argument("--coat-dump", help="with --coat-sdist: also write COAT's states after two steps here "
                                        "(for `fp8sim bench --coat-states`)")
    ap.add_argument("--coat-dump-n", type=int, default=1 << 22, help="parameters in the COAT dump (default 4M)")
    args = ap.parse_args()

    try:
        import torch
    except Exception as e:
        print(f"bench_peers.py: error: PyTorch is not importable: {e}", file=sys.stderr)
        return 1
    try:
        with open(args.plan) as f:
            plan = json.load(f)
    except Exception as e:
        print(f"bench_peers.py: error: cannot read plan '{args.plan}': {e}", file=sys.stderr)
        return 1
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("bench_peers.py: error: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1

    warmup = args.warmup if args.warmup is not None else int(plan.get("warmup", 5))
    reps = args.reps if args.reps is not None else int(plan.get("reps", 20))
    b = Bencher(torch, device, warmup, reps)
    b.gemm_cooldown_s = float(plan.get("gemm_cooldown_s", 0.0)) if device == "cuda" else 0.0
    b.set_lead(float(plan.get("launch_lead_us", 0.0)) if device == "cuda" else 0.0)
    compile_ok = not args.no_compile and not plan.get("no_compile", False)
    entries = []
    doc = {
        "tool": "scripts/bench_peers.py",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "warmup": warmup,
        "reps": reps,
        "compile": compile_ok,
        "gemm_cooldown_s": b.gemm_cooldown_s,
        "launch_lead_us": b.lead_us,
        "launch_lead_flushes": b.lead_flushes,
        "entries": entries,
        "complete": False,  # true once every entry of the plan has been tried
    }
    items = plan.get("kernels", [])
    if device == "cpu":  # shrink everything: this mode only checks that the script runs
        for it in items:
            if "shape" in it:
                it["shape"] = [min(int(s), 256) for s in it["shape"]]
            for key in ("m", "n", "k"):
                if key in it:
                    it[key] = min(int(it[key]), 256)
            if "n" in it and it.get("op") == "adamw":
                it["n"] = min(int(it["n"]), 1 << 16)
            if "bytes" in it:
                it["bytes"] = min(int(it["bytes"]), 1 << 20)
    def save():  # also after every entry, so that a run stopped by a time limit keeps what it timed
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2)
        os.replace(tmp, args.json)

    save()  # at once: a run stopped before its first entry leaves no earlier run's file behind
    coat_mod = None
    if args.coat_sdist and device == "cuda":
        try:
            coat_mod = build_coat(args.coat_sdist, "/tmp/fp8sim_coat")
            doc["coat"] = {"sdist": os.path.basename(args.coat_sdist), "built": True}
            if args.coat_dump:
                coat_dump(torch, coat_mod, args.coat_dump_n, args.coat_dump, device)
        except Exception as e:
            doc["coat"] = {"sdist": os.path.basename(args.coat_sdist), "built": False,
                           "error": (str(e).splitlines() or ["?"])[0][:500]}
            print(f"bench_peers.py: COAT's kernels could not be built: {e}", file=sys.stderr)
            traceback.print_exc()
    seen = set()
    for item in items:
        if not item.get("peers", True):
            continue
        if item["key"] in seen:
            continue
        seen.add(item["key"])
        try:
            run_entry(torch, b, item, compile_ok, entries, device, coat_mod)
        except Exception as e:
            entries.append({"key": item.get("key", "?"), "peer": "?",
                            "status": "error: " + (str(e).splitlines() or ["?"])[0][:300]})
            traceback.print_exc()
            if device == "cuda":
                torch.cuda.empty_cache()
        save()
    doc["complete"] = True
    save()
    ok = sum(1 for e in entries if e.get("status") == "ok")
    print(f"bench_peers.py: {ok} of {len(entries)} peer timings ok -> {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
