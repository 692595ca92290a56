#!/usr/bin/env python3
"""Capture fp8sim tensor traces (HDF5, schema in traces/FORMAT.md) from real PyTorch training: an
example of fp8sim.capture.TraceRecorder, which attaches to any model and optimizer in your own
training loop (docs/python.md#recording-a-trace-from-your-training-loop).

Two modes:

  llama    Train a Llama-style decoder (RMSNorm, RoPE, SwiGLU MLP, causal attention) sized by a
           models/*.json config from scratch with torch.optim.AdamW on the Python standard
           library's own source files (byte-level tokens, vocabulary 256), and record, at the
           chosen steps, weights, grads, AdamW exp_avg / exp_avg_sq, the inputs of every op COAT
           quantizes and the gradients of the linear outputs (from the step's own forward and
           backward, cut to --act-seqs sequences of --act-seq-len tokens); plus a window of
           consecutive steps' grads with the optimizer state at both ends, for multi-step
           optimizer replay.

  generic  Record any torch.nn.Module (linear, norm and activation-function inputs, linear output
           grads, and the optimizer state of every parameter). The model comes from a factory
           function `module:function` returning (model, optimizer, loss_fn), where
           loss_fn(model, step) draws its own batch and returns the scalar loss.

Examples:
  python scripts/capture_trace.py llama --model models/tiny-llama.json --steps 300 \\
      --capture-steps 295 --window 295:6 --out traces/tiny-llama-s300.h5
  python scripts/capture_trace.py generic --factory scripts/capture_trace.py:demo_mlp \\
      --steps 20 --capture-steps 20 --window 18:2 --out /tmp/mlp.h5

Runs on CPU for small models and on CUDA (--device cuda) for larger ones. Needs torch, numpy,
h5py and fp8sim.capture (the installed package, or this checkout's python/fp8sim/capture.py).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import math
import os
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROLES = ("weight", "grad", "exp_avg", "exp_avg_sq", "activation", "activation_grad")


def load_recorder():
    """fp8sim.capture: the installed package's, else this checkout's file (no build needed)."""
    try:
        from fp8sim import capture
        return capture
    except ImportError:
        spec = importlib.util.spec_from_file_location("fp8sim_capture", HERE.parent / "python" / "fp8sim" / "capture.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


def lr_at(step, peak, warmup, total, min_ratio):
    """Linear warm-up then cosine decay to min_ratio * peak; step is 1-based."""
    if step <= warmup:
        return peak * step / max(1, warmup)
    prog = (step - warmup) / max(1, total - warmup)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, prog))))


def parse_steps(spec):
    out = set()
    if not spec:
        return out
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    return out


def parse_window(spec):
    if not spec:
        return None
    m = re.fullmatch(r"(\d+):(\d+)", spec)
    if not m or int(m.group(2)) < 1:
        raise SystemExit(f"capture_trace.py: error: --window wants FIRST:COUNT, got '{spec}'")
    first, count = int(m.group(1)), int(m.group(2))
    return first, first + count - 1


def load_factory(spec):
    if ":" not in spec:
        raise SystemExit(f"capture_trace.py: error: --factory wants MODULE:FUNCTION or FILE.py:FUNCTION, got '{spec}'")
    modpath, fn = spec.rsplit(":", 1)
    if modpath.endswith(".py"):
        s = importlib.util.spec_from_file_location("capture_factory", modpath)
        mod = importlib.util.module_from_spec(s)
        s.loader.exec_module(mod)
    else:
        mod = importlib.import_module(modpath)
    return getattr(mod, fn)


def demo_mlp(args=None):
    """A small MLP predicting the next byte of stdlib text from the previous 8 (generic-mode demo)."""
    sys.path.insert(0, str(HERE))
    import capture_models
    return capture_models.demo_mlp(args)


def autocast_ctx(torch, device, dtype_name):
    if dtype_name == "float32":
        return torch.autocast(device_type=device.split(":")[0], enabled=False)
    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype_name]
    return torch.autocast(device_type=device.split(":")[0], dtype=dt)


def command_line():
    return " ".join(["python"] + [os.path.relpath(sys.argv[0])] + sys.argv[1:])


def recorder_options(args):
    window = parse_window(args.window)
    return {"steps": parse_steps(args.capture_steps), "window": (window[0], window[1] - window[0] + 1) if window else None,
            "window_params": args.window_params or None, "roles": args.roles.split(",")}


def run_llama(args, torch, np):
    import capture_models as cm
    F = torch.nn.functional
    with open(args.model) as fh:
        cfg = json.load(fh)
    torch.manual_seed(args.seed)
    device = args.device
    data, files, root = cm.stdlib_corpus(args.corpus_bytes)
    batches = cm.ByteBatches(data, args.seq, args.batch, args.seed)
    model = cm.Llama(cfg, args.seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                            weight_decay=args.weight_decay, foreach=False, fused=False)
    n_params = sum(p.numel() for p in model.parameters())
    act_len = args.act_seq_len or args.seq
    training = {
        "data": "Python standard library top-level *.py files, sorted by name, concatenated",
        "data_root": root, "data_files": len(files), "data_bytes": int(len(data)),
        "data_sha256": hashlib.sha256(data.tobytes()).hexdigest(),
        "tokenizer": "bytes (vocab 256)", "batch_size": args.batch, "seq_len": args.seq,
        "steps": args.steps, "seed": args.seed, "device": device, "compute_dtype": args.compute_dtype,
        "params": n_params, "activation_window": [args.act_seqs, act_len],
        "lr_schedule": {"kind": "linear warm-up then cosine", "peak": args.lr, "warmup": args.warmup,
                        "total": args.steps, "min_ratio": args.min_lr_ratio},
        "grad_clip": args.grad_clip,
    }
    capture = load_recorder()
    # The script's own SwiGLU multiply and residual adds are modules: record their operands.
    modules = {r"\.mul$": ("mul_input", {0: "input0", 1: "input1"}), r"_residual$": ("residual_add", {1: "branch"})}
    rec = capture.TraceRecorder(model, opt, args.out, **recorder_options(args), modules=modules,
                                sequences=args.act_seqs, tokens=(0, act_len),
                                attrs={"model_kind": "llama", "model_config": json.dumps(cfg),
                                       "training": json.dumps(training), "command": command_line()})
    try:
        losses, lrs, evals = [], [], []
        eval_set = batches.eval_batches(args.eval_batches)
        t_start = time.time()
        for step in range(1, args.steps + 1):
            lr = lr_at(step, args.lr, args.warmup, args.steps, args.min_lr_ratio)
            for g in opt.param_groups:
                g["lr"] = lr
            x, y = batches.train()
            x, y = x.to(device), y.to(device)
            with autocast_ctx(torch, device, args.compute_dtype):
                logits = model(x)
                loss = F.cross_entropy(logits.float().view(-1, cfg["vocab_size"]), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if args.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            opt.step()  # the recorder's hook stores the step's weights, moments and grads first
            rec.step(loss)
            losses.append(loss.item())
            lrs.append(lr)
            if step % args.eval_every == 0 or step == args.steps:
                with torch.no_grad(), autocast_ctx(torch, device, args.compute_dtype):
                    ev = np.mean([F.cross_entropy(model(a.to(device)).float().view(-1, cfg["vocab_size"]),
                                                  b.to(device).reshape(-1)).item() for a, b in eval_set])
                evals.append((step, float(ev)))
                print(f"step {step:5d}  lr {lr:.3e}  train loss {loss.item():.4f}  eval loss {ev:.4f}  "
                      f"({time.time() - t_start:.0f} s)", file=sys.stderr)
        rec.writer.add_meta("train/lr", np.array(lrs, dtype=np.float64))
        rec.writer.add_meta("train/eval", np.array(evals, dtype=np.float64).reshape(-1, 2))
        rec.writer.f["train/eval"].attrs["columns"] = "step,loss"
        rec.writer.f.attrs["train_seconds"] = np.float64(time.time() - t_start)
        rec.close()
    except BaseException:
        rec.abort()
        raise
    print(f"wrote {args.out}: {os.path.getsize(args.out) / 1e6:.2f} MB ({rec.bytes_written / 1e6:.2f} MB of tensors "
          f"before compression), {n_params} parameters, final train loss {losses[-1]:.4f}", file=sys.stderr)


def run_generic(args, torch, np):
    model, opt, loss_fn = load_factory(args.factory)()
    if not isinstance(opt, torch.optim.AdamW):
        print("capture_trace.py: warning: the optimizer is not torch.optim.AdamW; exp_avg/exp_avg_sq are "
              "stored only if its state has them", file=sys.stderr)
    training = {"factory": args.factory, "steps": args.steps,
                "params": sum(p.numel() for p in model.parameters())}
    capture = load_recorder()
    with capture.TraceRecorder(model, opt, args.out, **recorder_options(args),
                               attrs={"model_kind": "generic", "training": json.dumps(training),
                                      "command": command_line()}) as rec:
        for step in range(1, args.steps + 1):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model, step)
            loss.backward()
            opt.step()
            rec.step(loss)
    print(f"wrote {args.out}: {os.path.getsize(args.out) / 1e6:.2f} MB, final loss {loss.item():.4f}",
          file=sys.stderr)


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)

    def common(p):
        p.add_argument("--out", required=True, help="output trace (.h5), written atomically")
        p.add_argument("--steps", type=int, default=300, help="optimizer steps to train")
        p.add_argument("--capture-steps", default="", help="steps with a full dump, e.g. '100,300' or '10-12'")
        p.add_argument("--window", default="", help="FIRST:COUNT grad window for optimizer replay, e.g. 300:6")
        p.add_argument("--window-params", default="",
                       help="regex: parameters kept in the grad window (default: all)")
        p.add_argument("--roles", default=",".join(ROLES), help="roles of full dumps (comma list)")

    pl = sub.add_parser("llama", help="train a Llama-style model on stdlib text and capture")
    common(pl)
    pl.add_argument("--model", required=True, help="models/*.json config")
    pl.add_argument("--batch", type=int, default=16)
    pl.add_argument("--seq", type=int, default=128)
    pl.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    pl.add_argument("--warmup", type=int, default=30)
    pl.add_argument("--min-lr-ratio", type=float, default=0.1)
    pl.add_argument("--beta1", type=float, default=0.9)
    pl.add_argument("--beta2", type=float, default=0.95)
    pl.add_argument("--eps", type=float, default=1e-8)
    pl.add_argument("--weight-decay", type=float, default=0.1)
    pl.add_argument("--grad-clip", type=float, default=1.0, help="global grad-norm clip (0: off); "
                    "stored grads are the clipped ones the optimizer used")
    pl.add_argument("--seed", type=int, default=0)
    pl.add_argument("--corpus-bytes", type=int, default=4_000_000)
    pl.add_argument("--act-seqs", type=int, default=1, help="sequences of the step's batch whose activations are stored")
    pl.add_argument("--act-seq-len", type=int, default=0,
                    help="tokens per sequence whose activations are stored (the first ones; 0: --seq)")
    pl.add_argument("--compute-dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="autocast dtype of the forward (linear inputs are stored in the dtype the matmul saw)")
    pl.add_argument("--eval-every", type=int, default=25)
    pl.add_argument("--eval-batches", type=int, default=4)
    pl.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    pl.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")

    pg = sub.add_parser("generic", help="hook any nn.Module built by a factory function")
    common(pg)
    pg.add_argument("--factory", required=True, help="MODULE:FUNCTION or FILE.py:FUNCTION -> (model, optimizer, loss_fn)")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:  # after the arguments, so that --help works without them
        import numpy as np
        import torch
    except ImportError as e:
        sys.exit(f"capture_trace.py: error: {e.name} is not installed (this script needs torch, numpy and h5py)")
    sys.path.insert(0, str(HERE))
    if getattr(args, "threads", 0):
        torch.set_num_threads(args.threads)
    if getattr(args, "device", "") is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parse_window(args.window)
        (run_llama if args.mode == "llama" else run_generic)(args, torch, np)
    except (ValueError, TypeError) as e:
        sys.exit(f"capture_trace.py: error: {e}")


if __name__ == "__main__":
    main()
