#!/usr/bin/env python3
"""Make the committed fixture tests/data/optim_adamw_fixture.{json,bin}: weights produced by a
real torch.optim.AdamW, which the C++ fp32 replay (sim/optim) must reproduce to fp32 rounding.

Run with PyTorch (not needed by CI, which only reads the committed files):
    python3 scripts/make_adamw_fixture.py [--out-dir tests/data]

Two scenarios, both on the CPU with torch's default implementation (the for-loop path; the
script checks that foreach=True gives the same bits and records the result):
  fresh   the window starts at step 0 (zero moments), 6 steps;
  window  10 warm-up steps first, then the moments, weights and step count are recorded and
          6 more steps are taken: the situation of a captured grad window in a trace.
Two parameter groups (weight decay 0.1 and 0.0, as a model with undecayed norms has) and an lr
that changes every step (a warm-up/cosine schedule) so per-step lr and per-group wd are
exercised. Shapes include 1 element, lengths that are not multiples of 8 or 128 (the vectorized
kernels' tails) and exact zeros in the grads.

Layout: the .bin is little-endian float32, the arrays concatenated; the .json lists for each
scenario and parameter the offset (in floats) and length of every array.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

torch = None  # imported by main() after the arguments, so --help works without it

SHAPES = {"emb.weight": (5, 7), "blk.w": (3, 219), "blk.norm": (130,), "head.bias": (1,)}
GROUPS = [{"params": ["emb.weight", "blk.w"], "weight_decay": 0.1},
          {"params": ["blk.norm", "head.bias"], "weight_decay": 0.0}]
BETAS = (0.9, 0.95)
EPS = 1e-8
BASE_LR = 3e-3
WARMUP = 10
WINDOW = 6


def lr_at(step_index, total):
    """Linear warm-up over 4 steps, then cosine decay: the lr differs at every step."""
    if step_index < 4:
        return BASE_LR * (step_index + 1) / 4
    t = (step_index - 4) / max(1, total - 4)
    return BASE_LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def make_grad(gen, shape, step):
    # Heavy-tailed magnitudes spanning ~6 decades (like real grads), some exact zeros.
    n = int(np.prod(shape))
    mag = torch.exp(torch.empty(n).uniform_(-14.0, 0.0, generator=gen))
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    g = (mag * sign).to(torch.float32)
    g[torch.rand(n, generator=gen) < 0.05] = 0.0
    return g.reshape(shape)


def build(foreach, seed):
    gen = torch.Generator().manual_seed(seed)
    params = {name: torch.nn.Parameter((torch.randn(shape, generator=gen) * 0.05).to(torch.float32))
              for name, shape in SHAPES.items()}
    groups = [{"params": [params[n] for n in g["params"]], "weight_decay": g["weight_decay"]} for g in GROUPS]
    opt = torch.optim.AdamW(groups, lr=BASE_LR, betas=BETAS, eps=EPS, foreach=foreach)
    return params, opt, gen


def run(foreach, warmup, seed=1234):
    params, opt, gen = build(foreach, seed)
    total = warmup + WINDOW
    rec = {"p0": {}, "m0": {}, "v0": {}, "grads": {n: [] for n in params}, "p_after": {n: [] for n in params}}
    lrs = []
    for k in range(total):
        lr = lr_at(k, total)
        for g in opt.param_groups:
            g["lr"] = lr
        grads = {n: make_grad(gen, p.shape, k) for n, p in params.items()}
        if k == warmup:
            for n, p in params.items():
                rec["p0"][n] = p.detach().clone()
                st = opt.state.get(p, {})
                rec["m0"][n] = st["exp_avg"].clone() if st else torch.zeros_like(p)
                rec["v0"][n] = st["exp_avg_sq"].clone() if st else torch.zeros_like(p)
            rec["step0"] = int(opt.state[params["blk.w"]]["step"].item()) if warmup else 0
        for n, p in params.items():
            p.grad = grads[n].clone()
        opt.step()
        if k >= warmup:
            lrs.append(lr)
            for n, p in params.items():
                rec["grads"][n].append(grads[n])
                rec["p_after"][n].append(p.detach().clone())
    rec["m_end"] = {n: opt.state[p]["exp_avg"].clone() for n, p in params.items()}
    rec["v_end"] = {n: opt.state[p]["exp_avg_sq"].clone() for n, p in params.items()}
    rec["lrs"] = lrs
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    args = ap.parse_args()
    global torch
    import torch

    blob = []
    offset = 0

    def put(t):
        nonlocal offset
        a = t.detach().contiguous().reshape(-1).numpy().astype("<f4")
        blob.append(a)
        entry = {"offset": offset, "count": int(a.size)}
        offset += a.size
        return entry

    doc = {
        "producer": "scripts/make_adamw_fixture.py",
        "torch_version": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "implementation": "torch.optim.AdamW, CPU, foreach=False (for-loop path, torch's CPU default)",
        "betas": list(BETAS), "eps": EPS, "amsgrad": False, "maximize": False,
        "scenarios": {},
    }
    for name, warmup in (("fresh", 0), ("window", WARMUP)):
        rec = run(foreach=False, warmup=warmup)
        rec_fe = run(foreach=True, warmup=warmup)
        same = all(torch.equal(rec["p_after"][n][-1], rec_fe["p_after"][n][-1]) for n in SHAPES)
        sc = {"step0": rec["step0"], "steps": WINDOW, "lr": rec["lrs"], "foreach_bit_identical": bool(same),
              "params": []}
        for gi, g in enumerate(GROUPS):
            for n in g["params"]:
                sc["params"].append({
                    "name": n, "shape": list(SHAPES[n]), "weight_decay": g["weight_decay"],
                    "p0": put(rec["p0"][n]), "m0": put(rec["m0"][n]), "v0": put(rec["v0"][n]),
                    "grads": [put(x) for x in rec["grads"][n]],
                    "p_after": [put(x) for x in rec["p_after"][n]],
                    "m_end": put(rec["m_end"][n]), "v_end": put(rec["v_end"][n]),
                })
        doc["scenarios"][name] = sc
        print(f"{name}: step0={rec['step0']} foreach bit-identical to for-loop: {same}", file=sys.stderr)
    doc["total_floats"] = int(offset)
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "optim_adamw_fixture.bin"), "wb") as f:
        f.write(np.concatenate(blob).tobytes())
    with open(os.path.join(args.out_dir, "optim_adamw_fixture.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {offset} floats ({offset * 4} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
