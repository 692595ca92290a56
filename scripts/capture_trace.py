#!/usr/bin/env python3
"""Capture fp8sim tensor traces (HDF5, schema in traces/FORMAT.md) from real PyTorch training.

Two modes:

  llama    Train a Llama-style decoder (RMSNorm, RoPE, SwiGLU MLP, causal attention) sized by a
           models/*.json config from scratch with torch.optim.AdamW on the Python standard
           library's own source files (byte-level tokens, vocabulary 256), and dump, at the chosen
           steps, weights, grads, AdamW exp_avg / exp_avg_sq, the inputs of every op COAT
           quantizes (from forward hooks on one micro-batch) and the gradients of the linear
           outputs; plus a window of consecutive steps' grads with the optimizer state at both
           ends, for multi-step optimizer replay.

  generic  Hook any torch.nn.Module: nn.Linear inputs / weights / grads / output grads and the
           optimizer state of every parameter. The model comes from a factory function
           `module:function` returning (model, optimizer, loss_fn), where loss_fn(model, step)
           draws its own batch and returns the scalar loss.

Examples:
  python scripts/capture_trace.py llama --model models/tiny-llama.json --steps 300 \\
      --capture-steps 295 --window 295:6 --out traces/tiny-llama-s300.h5
  python scripts/capture_trace.py generic --factory scripts/capture_trace.py:demo_mlp \\
      --steps 20 --capture-steps 20 --window 18:2 --out /tmp/mlp.h5

Runs on CPU for small models and on CUDA (--device cuda) for larger ones. Needs torch, numpy
and h5py; nothing else.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import importlib
import importlib.util
import json
import math
import os
import platform
import re
import sys
import sysconfig
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FORMAT_NAME = "fp8sim-trace"
FORMAT_VERSION = 1
SCRIPT_VERSION = "1.0"

ROLES = ("weight", "grad", "exp_avg", "exp_avg_sq", "activation", "activation_grad")

# Chunks of at most this many bytes: big enough for deflate to work, small enough that a reader
# touching one tensor never inflates more than it needs.
CHUNK_BYTES = 256 * 1024


# ---------------------------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------------------------

def _chunk_shape(shape, itemsize):
    """Chunk along the leading axes so one chunk holds at most CHUNK_BYTES."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return None
    row = itemsize * int(np.prod(shape[1:], dtype=np.int64))
    if row <= CHUNK_BYTES:
        return (max(1, min(shape[0], CHUNK_BYTES // max(1, row))),) + shape[1:]
    return (1,) + _chunk_shape(shape[1:], itemsize)


def tensor_to_stored(t: torch.Tensor):
    """(numpy array as stored, dtype name). bf16 is kept bit-exactly as its uint16 pattern."""
    t = t.detach()
    if t.dtype == torch.float32:
        return t.cpu().contiguous().numpy(), "float32"
    if t.dtype == torch.bfloat16:
        return t.cpu().contiguous().view(torch.int16).numpy().view(np.uint16), "bfloat16"
    if t.dtype == torch.float16:
        return t.cpu().contiguous().numpy(), "float16"
    raise ValueError(f"unsupported tensor dtype {t.dtype} (trace dtypes: float32, bfloat16, float16)")


class TraceWriter:
    """Writes a trace to OUT.tmp.<pid> and renames it into place on close(): a failed capture
    never leaves a partial trace behind."""

    def __init__(self, path, attrs: dict):
        self.path = path
        self.tmp = f"{path}.tmp.{os.getpid()}"
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        # v110 object headers and chunk indexes carry checksums: a corrupted file is detected
        # by HDF5 instead of being misread. HDF5 >= 1.10 reads these files.
        self.f = h5py.File(self.tmp, "w", libver=("v110", "v110"))
        self.f.attrs["format"] = FORMAT_NAME
        self.f.attrs["format_version"] = np.int64(FORMAT_VERSION)
        for k, v in attrs.items():
            self.f.attrs[k] = v
        self.f.create_group("steps")
        self.bytes_logical = 0

    def step_group(self, step: int, **attrs):
        name = f"steps/step_{step:06d}"
        g = self.f.require_group(name)
        g.attrs["step"] = np.int64(step)
        for k, v in attrs.items():
            if v is None:
                continue
            g.attrs[k] = v
        return g

    def add_tensor(self, step: int, role: str, name: str, t: torch.Tensor, **attrs):
        assert role in ROLES, role
        arr, dtype_name = tensor_to_stored(t)
        if arr.size == 0:
            raise ValueError(f"refusing to store zero-size tensor {name}")
        g = self.step_group(step).require_group(role)
        if name in g:
            raise ValueError(f"duplicate tensor {role}/{name} at step {step}")
        ds = g.create_dataset(name, data=arr, chunks=_chunk_shape(arr.shape, arr.itemsize), shuffle=True,
                              compression="gzip", compression_opts=6, fletcher32=True)
        ds.attrs["role"] = role
        ds.attrs["dtype"] = dtype_name
        ds.attrs["step"] = np.int64(step)
        for k, v in attrs.items():
            if v is None:
                continue
            if isinstance(v, (list, tuple)):
                v = ",".join(str(x) for x in v)
            ds.attrs[k] = v
        self.bytes_logical += arr.nbytes
        return ds

    def add_meta(self, name: str, arr):
        self.f.create_dataset(name, data=np.asarray(arr))

    def close(self):
        self.f.close()
        os.replace(self.tmp, self.path)

    def abort(self):
        try:
            self.f.close()
        finally:
            if os.path.exists(self.tmp):
                os.remove(self.tmp)


# ---------------------------------------------------------------------------------------------
# Data: the standard library's own source, byte tokens
# ---------------------------------------------------------------------------------------------

def stdlib_corpus(max_bytes: int):
    """Top-level *.py files of this interpreter's standard library, sorted, concatenated."""
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(root, "*.py")))
    chunks, used, total = [], [], 0
    for f in files:
        with open(f, "rb") as fh:
            b = fh.read()
        chunks.append(b)
        used.append(os.path.basename(f))
        total += len(b)
        if total >= max_bytes:
            break
    data = b"".join(chunks)[:max_bytes]
    return np.frombuffer(data, dtype=np.uint8).copy(), used, root


class ByteBatches:
    """Random windows of the corpus; the last 5% is held out for evaluation."""

    def __init__(self, data: np.ndarray, seq: int, batch: int, seed: int):
        self.data = torch.from_numpy(data.astype(np.int64))
        n = len(data)
        self.split = int(n * 0.95)
        self.seq, self.batch = seq, batch
        self.gen = torch.Generator().manual_seed(seed)

    def _take(self, lo, hi, count, gen):
        starts = torch.randint(lo, hi - self.seq - 1, (count,), generator=gen)
        x = torch.stack([self.data[s:s + self.seq] for s in starts.tolist()])
        y = torch.stack([self.data[s + 1:s + 1 + self.seq] for s in starts.tolist()])
        return x, y

    def train(self):
        return self._take(0, self.split, self.batch, self.gen)

    def eval_batches(self, count, seed=1234):
        g = torch.Generator().manual_seed(seed)
        return [self._take(self.split, len(self.data), self.batch, g) for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# Llama-style model. Non-linear ops are modules so forward hooks see their inputs.
# ---------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).to(x.dtype)


class SiLU(nn.Module):
    def forward(self, x):
        return F.silu(x)


class Mul(nn.Module):
    def forward(self, a, b):
        return a * b


class ResidualAdd(nn.Module):
    """residual + branch; the hook records the branch (the tensor added to the stream)."""

    def forward(self, residual, branch):
        return residual + branch


def rope_tables(seq, head_dim, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    t = torch.arange(seq, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv)  # (S, hd/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (S, hd)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    # x: (B, H, S, hd); rotate-half convention
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    rot = torch.cat([-x2, x1], dim=-1)
    return (x * cos.to(x.dtype)) + (rot * sin.to(x.dtype))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, self.h, self.kvh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = d // self.h
        bias = bool(cfg.get("attention_bias", False))
        self.q_proj = nn.Linear(d, self.h * self.hd, bias=bias)
        self.k_proj = nn.Linear(d, self.kvh * self.hd, bias=bias)
        self.v_proj = nn.Linear(d, self.kvh * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.h * self.hd, d, bias=bias)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.kvh, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.kvh, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos[:S], sin[:S]), apply_rope(k, cos[:S], sin[:S])
        if self.kvh != self.h:
            rep = self.h // self.kvh
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o = o.transpose(1, 2).reshape(B, S, self.h * self.hd)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)
        self.act_fn = SiLU()
        self.mul = Mul()

    def forward(self, x):
        return self.down_proj(self.mul(self.act_fn(self.gate_proj(x)), self.up_proj(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = cfg.get("norm_eps", 1e-5)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Attention(cfg)
        self.attn_residual = ResidualAdd()
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.mlp = MLP(cfg)
        self.mlp_residual = ResidualAdd()

    def forward(self, x, cos, sin):
        x = self.attn_residual(x, self.self_attn(self.input_layernorm(x), cos, sin))
        return self.mlp_residual(x, self.mlp(self.post_attention_layernorm(x)))


class Llama(nn.Module):
    def __init__(self, cfg, max_seq):
        super().__init__()
        for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "vocab_size"):
            if key not in cfg:
                raise SystemExit(f"capture_trace.py: error: model config lacks '{key}'")
        if cfg.get("norm", "rmsnorm") != "rmsnorm" or cfg.get("activation", "swiglu") != "swiglu":
            raise SystemExit("capture_trace.py: error: llama mode builds rmsnorm + swiglu models only")
        self.cfg = cfg
        d = cfg["hidden_size"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], d)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(d, cfg.get("norm_eps", 1e-5))
        self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight
        hd = d // cfg["num_attention_heads"]
        cos, sin = rope_tables(max_seq, hd, float(cfg.get("rope_theta", 10000.0)), "cpu")
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)
        # GPT-2 style scaled init of the projections that write into the residual stream.
        for n, p in self.named_parameters():
            if n.endswith("o_proj.weight") or n.endswith("down_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg["num_hidden_layers"]))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        x = self.embed_tokens(idx)
        for blk in self.layers:
            x = blk(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.norm(x))


# ---------------------------------------------------------------------------------------------
# What each module / parameter is, in trace terms
# ---------------------------------------------------------------------------------------------

# Block index from a module path: Llama/Mistral "layers.N.", GPT-2 "h.N.", "blocks.N.", "layer.N.".
_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")


def layer_of(name: str) -> int:
    m = _LAYER_RE.search("." + name)
    return int(m.group(1)) if m else -1


def module_kind(mod: nn.Module) -> str:
    if isinstance(mod, nn.Linear):
        return "linear"
    if isinstance(mod, nn.Embedding):
        return "embedding"
    if isinstance(mod, (RMSNorm, nn.LayerNorm)) or "norm" in type(mod).__name__.lower():
        return "norm"
    return "other"


def param_table(model: nn.Module):
    """name -> (param, module path, op kind, aliases). Tied parameters appear once (first name);
    their other names are listed as aliases."""
    seen = {}
    for mod_name, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            full = f"{mod_name}.{pname}" if mod_name else pname
            key = id(p)
            if key in seen:
                seen[key]["aliases"].append(full)
                continue
            seen[key] = {"name": full, "param": p, "module": mod_name, "op": module_kind(mod), "aliases": []}
    return list(seen.values())


# ---------------------------------------------------------------------------------------------
# Activation capture with forward hooks
# ---------------------------------------------------------------------------------------------

class ActivationCapture:
    """Records, during one forward/backward of a micro-batch, the inputs of every op COAT
    quantizes and the gradients of every linear output (the E5M2 operand of the backward GEMMs).
    A tensor that feeds several linears (q/k/v, gate/up) is stored once with all its consumers."""

    def __init__(self, model: nn.Module, llama: bool):
        self.records = []  # dicts: name, op, module, modules, layer, tensor
        self.grads = []
        self.handles = []
        self._by_id = {}
        for mod_name, mod in model.named_modules():
            if isinstance(mod, nn.Linear):
                self.handles.append(mod.register_forward_pre_hook(self._linear_pre(mod_name)))
                self.handles.append(mod.register_forward_hook(self._linear_post(mod_name)))
            elif llama and isinstance(mod, RMSNorm):
                self.handles.append(mod.register_forward_pre_hook(self._simple(mod_name, "norm_input")))
            elif llama and isinstance(mod, SiLU):
                self.handles.append(mod.register_forward_pre_hook(self._simple(mod_name, "silu_input")))
            elif llama and isinstance(mod, Mul):
                self.handles.append(mod.register_forward_pre_hook(self._mul(mod_name)))
            elif llama and isinstance(mod, ResidualAdd):
                self.handles.append(mod.register_forward_pre_hook(self._residual(mod_name)))

    def _add(self, name, op, module, t, modules=None):
        self.records.append({"name": name, "op": op, "module": module, "modules": modules or [],
                             "layer": layer_of(module + "."), "tensor": t.detach().clone()})

    def _linear_pre(self, mod_name):
        def hook(mod, args):
            x = args[0]
            key = (x.data_ptr(), tuple(x.shape), x.dtype)
            if key in self._by_id:  # shared input (q/k/v, gate/up): one tensor, several consumers
                self._by_id[key]["modules"].append(mod_name)
                return
            # The o_proj input is the attention output (FlashAttention's result in COAT).
            op = "attn_output" if mod_name.endswith("o_proj") else "linear_input"
            self._add(f"{mod_name}.input", op, mod_name, x, [mod_name])
            self._by_id[key] = self.records[-1]
        return hook

    def _linear_post(self, mod_name):
        def hook(mod, args, out):
            if out.requires_grad:
                def on_grad(g, mod_name=mod_name):
                    self.grads.append({"name": f"{mod_name}.output_grad", "op": "linear_output_grad",
                                       "module": mod_name, "modules": [mod_name], "layer": layer_of(mod_name + "."),
                                       "tensor": g.detach().clone()})
                out.register_hook(on_grad)
        return hook

    def _simple(self, mod_name, op):
        def hook(mod, args):
            self._add(f"{mod_name}.input", op, mod_name, args[0])
        return hook

    def _mul(self, mod_name):
        def hook(mod, args):
            self._add(f"{mod_name}.input0", "mul_input", mod_name, args[0])
            self._add(f"{mod_name}.input1", "mul_input", mod_name, args[1])
        return hook

    def _residual(self, mod_name):
        def hook(mod, args):
            self._add(f"{mod_name}.branch", "residual_add", mod_name, args[1])
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


# ---------------------------------------------------------------------------------------------
# Training with capture
# ---------------------------------------------------------------------------------------------

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


def adamw_state(opt, p):
    st = opt.state.get(p, {})
    if "exp_avg" not in st:
        return None
    step = st["step"]
    return st["exp_avg"], st["exp_avg_sq"], int(step.item() if torch.is_tensor(step) else step)


def replay_window_numpy(start, grads, lrs, t0, betas, eps, wd):
    """Independent fp32 re-implementation of torch's single-tensor AdamW, used only as a
    self-check that the stored window suffices. Returns the final (p, m, v)."""
    p, m, v = (a.astype(np.float32).copy() for a in start)
    b1, b2 = betas
    for i, (g, lr) in enumerate(zip(grads, lrs)):
        t = t0 + i + 1
        g = g.astype(np.float32)
        p = p * np.float32(1 - lr * wd)
        m = m + np.float32(1 - b1) * (g - m)
        v = v * np.float32(b2) + np.float32(1 - b2) * g * g
        bc1 = 1 - b1 ** t
        bc2s = math.sqrt(1 - b2 ** t)
        denom = np.sqrt(v) / np.float32(bc2s) + np.float32(eps)
        p = p + np.float32(-lr / bc1) * (m / denom)
    return p, m, v


class Capturer:
    """Shared by both modes: decides what to dump at each step and writes it."""

    def __init__(self, writer: TraceWriter, model, opt, args, llama: bool):
        self.w, self.model, self.opt, self.args, self.llama = writer, model, opt, args, llama
        self.capture_steps = parse_steps(args.capture_steps)
        self.window = parse_window(args.window)
        self.window_re = re.compile(args.window_params) if args.window_params else None
        self.roles = set(args.roles.split(","))
        bad = self.roles - set(ROLES)
        if bad:
            raise SystemExit(f"capture_trace.py: error: unknown role(s) {sorted(bad)}; valid: {', '.join(ROLES)}")
        self.params = param_table(model)
        self.window_start = {}
        self.window_grads = {}
        self.window_lrs = []
        self.window_t0 = None

    def in_window(self, step):
        return self.window is not None and self.window[0] <= step <= self.window[1]

    def window_param(self, e):
        return self.window_re is None or self.window_re.search(e["name"]) is not None

    def needs_activations(self, step):
        return step in self.capture_steps and ({"activation", "activation_grad"} & self.roles)

    def _param_attrs(self, e):
        return {"module": e["module"], "op": e["op"], "layer": np.int64(layer_of(e["name"])), "param": e["name"],
                "aliases": e["aliases"] or None}

    def before_update(self, step, lr, loss):
        """Called after backward of step `step`, before optimizer.step(): weights and states are
        the values entering this step's update, grads are this step's."""
        full = step in self.capture_steps
        win = self.in_window(step)
        if not (full or win):
            return
        first_of_window = win and step == self.window[0]
        t_before = None
        for e in self.params:
            st = adamw_state(self.opt, e["param"])
            if st is not None:
                t_before = st[2]
        self.w.step_group(step, lr=np.float64(lr), loss=np.float64(loss),
                          adamw_step=np.int64(t_before if t_before is not None else 0),
                          contents="full" if full else "window")
        for e in self.params:
            p = e["param"]
            in_win = win and self.window_param(e)
            attrs = self._param_attrs(e)
            st = adamw_state(self.opt, p)
            if (full and "weight" in self.roles) or (first_of_window and in_win):
                self.w.add_tensor(step, "weight", e["name"], p.data, **attrs)
            if p.grad is not None and ((full and "grad" in self.roles) or in_win):
                self.w.add_tensor(step, "grad", e["name"], p.grad, **attrs)
            if st is not None and ((full and ("exp_avg" in self.roles or "exp_avg_sq" in self.roles))
                                   or (first_of_window and in_win)):
                if (full and "exp_avg" in self.roles) or (first_of_window and in_win):
                    self.w.add_tensor(step, "exp_avg", e["name"], st[0], **attrs)
                if (full and "exp_avg_sq" in self.roles) or (first_of_window and in_win):
                    self.w.add_tensor(step, "exp_avg_sq", e["name"], st[1], **attrs)
            if in_win:
                if first_of_window:
                    if st is None:
                        raise SystemExit("capture_trace.py: error: the grad window must start after step 1 "
                                         "(AdamW has no state before its first update)")
                    self.window_start[e["name"]] = (p.data.float().cpu().numpy().copy(),
                                                    st[0].float().cpu().numpy().copy(),
                                                    st[1].float().cpu().numpy().copy())
                    self.window_t0 = st[2]
                self.window_grads.setdefault(e["name"], []).append(p.grad.float().cpu().numpy().copy())
        if win:
            self.window_lrs.append(lr)

    def after_update(self, step):
        """After optimizer.step() of the last window step: the state the window ends in, stored
        as the state entering step last+1."""
        if self.window is None or step != self.window[1]:
            return
        nxt = step + 1
        self.w.step_group(nxt, contents="state", adamw_step=np.int64(self.window_t0 + len(self.window_lrs)))
        worst_abs, worst_rel = 0.0, 0.0
        for e in self.params:
            if not self.window_param(e):
                continue
            p = e["param"]
            st = adamw_state(self.opt, p)
            attrs = self._param_attrs(e)
            self.w.add_tensor(nxt, "weight", e["name"], p.data, **attrs)
            self.w.add_tensor(nxt, "exp_avg", e["name"], st[0], **attrs)
            self.w.add_tensor(nxt, "exp_avg_sq", e["name"], st[1], **attrs)
            g = self.opt.param_groups[0]
            rp, _, _ = replay_window_numpy(self.window_start[e["name"]], self.window_grads[e["name"]], self.window_lrs,
                                           self.window_t0, g["betas"], g["eps"], g["weight_decay"])
            end = p.data.float().cpu().numpy()
            moved = float(np.max(np.abs(end - self.window_start[e["name"]][0])))
            diff = float(np.max(np.abs(rp - end)))
            worst_abs = max(worst_abs, diff)
            worst_rel = max(worst_rel, diff / moved if moved > 0 else 0.0)
        self.w.f.attrs["grad_window"] = np.array([self.window[0], self.window[1]], dtype=np.int64)
        # How far an independent (no-FMA) numpy replay of the stored window lands from the
        # captured end weights: absolute, and relative to how far the weights moved.
        self.w.f.attrs["grad_window_selfcheck"] = json.dumps({"max_abs_diff": worst_abs,
                                                              "max_diff_over_max_move": worst_rel})
        print(f"grad window {self.window[0]}..{self.window[1]}: numpy fp32 AdamW replay of the stored window "
              f"lands within {worst_abs:.3g} of the captured end weights ({worst_rel:.3g} of the largest move)",
              file=sys.stderr)

    def store_activations(self, step, cap: ActivationCapture, tokens):
        for rec in cap.records:
            if "activation" in self.roles:
                self.w.add_tensor(step, "activation", rec["name"], rec["tensor"], op=rec["op"], module=rec["module"],
                                  modules=rec["modules"] or None, layer=np.int64(rec["layer"]),
                                  tokens=np.int64(tokens) if tokens > 0 else None)
        for rec in cap.grads:
            if "activation_grad" in self.roles:
                self.w.add_tensor(step, "activation_grad", rec["name"], rec["tensor"], op=rec["op"],
                                  module=rec["module"], modules=rec["modules"], layer=np.int64(rec["layer"]),
                                  tokens=np.int64(tokens) if tokens > 0 else None)


def autocast_ctx(device, dtype_name):
    if dtype_name == "float32":
        return torch.autocast(device_type=device.split(":")[0], enabled=False)
    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype_name]
    return torch.autocast(device_type=device.split(":")[0], dtype=dt)


def common_attrs(args, mode, model_config, opt, extra_training, schedule=None):
    g = opt.param_groups[0]
    if schedule is None:
        schedule = {"kind": "linear warm-up then cosine", "peak": args.lr, "warmup": args.warmup,
                    "total": args.steps, "min_ratio": args.min_lr_ratio}
    return {
        "producer": f"scripts/capture_trace.py {SCRIPT_VERSION} ({mode}); torch {torch.__version__}; "
                    f"h5py {h5py.__version__}; python {platform.python_version()}",
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["python"] + [os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "model_kind": mode,
        "model_config": json.dumps(model_config),
        "optimizer": "torch.optim.AdamW",
        "lr": np.float64(args.lr),
        "beta1": np.float64(g["betas"][0]),
        "beta2": np.float64(g["betas"][1]),
        "eps": np.float64(g["eps"]),
        "weight_decay": np.float64(g["weight_decay"]),
        "optimizer_options": json.dumps({
            "implementation": "single-tensor (foreach=False, fused=False)",
            "amsgrad": g.get("amsgrad", False), "maximize": g.get("maximize", False),
            "capturable": g.get("capturable", False), "differentiable": g.get("differentiable", False),
            "lr_schedule": schedule,
        }),
        "training": json.dumps(extra_training),
    }


def make_adamw(params, args):
    return torch.optim.AdamW(params, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                             weight_decay=args.weight_decay, foreach=False, fused=False)


def run_llama(args):
    with open(args.model) as fh:
        cfg = json.load(fh)
    torch.manual_seed(args.seed)
    device = args.device
    data, files, root = stdlib_corpus(args.corpus_bytes)
    batches = ByteBatches(data, args.seq, args.batch, args.seed)
    model = Llama(cfg, args.seq).to(device)
    opt = make_adamw(model.parameters(), args)
    n_params = sum(p.numel() for p in model.parameters())
    training = {
        "data": "Python standard library top-level *.py files, sorted by name, concatenated",
        "data_root": root, "data_files": len(files), "data_bytes": int(len(data)),
        "data_sha256": hashlib.sha256(data.tobytes()).hexdigest(),
        "tokenizer": "bytes (vocab 256)", "batch_size": args.batch, "seq_len": args.seq,
        "steps": args.steps, "seed": args.seed, "device": device, "compute_dtype": args.compute_dtype,
        "params": n_params, "activation_micro_batch": [args.act_seqs, args.act_seq_len or args.seq],
    }
    writer = TraceWriter(args.out, common_attrs(args, "llama", cfg, opt, training))
    try:
        cap = Capturer(writer, model, opt, args, llama=True)
        losses, lrs, evals = [], [], []
        eval_set = batches.eval_batches(args.eval_batches)
        t_start = time.time()
        for step in range(1, args.steps + 1):
            lr = lr_at(step, args.lr, args.warmup, args.steps, args.min_lr_ratio)
            for g in opt.param_groups:
                g["lr"] = lr
            x, y = batches.train()
            x, y = x.to(device), y.to(device)
            if cap.needs_activations(step):
                # One micro-batch through hooks with the weights of this step, before the real
                # forward; its parameter grads are discarded, so training is unchanged.
                ac = ActivationCapture(model, llama=True)
                act_len = args.act_seq_len or args.seq
                xm, ym = x[:args.act_seqs, :act_len], y[:args.act_seqs, :act_len]
                with autocast_ctx(device, args.compute_dtype):
                    lm = F.cross_entropy(model(xm).float().view(-1, cfg["vocab_size"]), ym.reshape(-1))
                lm.backward()
                ac.remove()
                cap.store_activations(step, ac, xm.numel())
                opt.zero_grad(set_to_none=True)
            with autocast_ctx(device, args.compute_dtype):
                logits = model(x)
                loss = F.cross_entropy(logits.float().view(-1, cfg["vocab_size"]), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if args.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            cap.before_update(step, lr, loss.item())
            opt.step()
            cap.after_update(step)
            losses.append(loss.item())
            lrs.append(lr)
            if step % args.eval_every == 0 or step == args.steps:
                with torch.no_grad(), autocast_ctx(device, args.compute_dtype):
                    ev = np.mean([F.cross_entropy(model(a.to(device)).float().view(-1, cfg["vocab_size"]),
                                                  b.to(device).reshape(-1)).item() for a, b in eval_set])
                evals.append((step, float(ev)))
                el = time.time() - t_start
                print(f"step {step:5d}  lr {lr:.3e}  train loss {loss.item():.4f}  eval loss {ev:.4f}  "
                      f"({el:.0f} s)", file=sys.stderr)
        writer.add_meta("train/loss", np.array(losses, dtype=np.float32))
        writer.add_meta("train/lr", np.array(lrs, dtype=np.float64))
        writer.add_meta("train/eval", np.array(evals, dtype=np.float64).reshape(-1, 2))
        writer.f["train/eval"].attrs["columns"] = "step,loss"
        writer.f.attrs["train_seconds"] = np.float64(time.time() - t_start)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {size / 1e6:.2f} MB ({writer.bytes_logical / 1e6:.2f} MB of tensors before "
          f"compression), {n_params} parameters, final train loss {losses[-1]:.4f}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Generic mode
# ---------------------------------------------------------------------------------------------

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
    data, _, _ = stdlib_corpus(1 << 20)
    tokens = torch.from_numpy(data.astype(np.int64))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(256, 32), nn.Flatten(), nn.Linear(8 * 32, 128), nn.GELU(),
                          nn.Linear(128, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False, fused=False)
    gen = torch.Generator().manual_seed(0)

    def loss_fn(m, step):
        starts = torch.randint(0, len(tokens) - 9, (64,), generator=gen)
        x = torch.stack([tokens[s:s + 8] for s in starts.tolist()])
        y = tokens[starts + 8]
        return F.cross_entropy(m(x), y)

    return model, opt, loss_fn


def run_generic(args):
    model, opt, loss_fn = load_factory(args.factory)()
    if not isinstance(opt, torch.optim.AdamW):
        print("capture_trace.py: warning: the optimizer is not torch.optim.AdamW; exp_avg/exp_avg_sq are "
              "stored only if its state has them", file=sys.stderr)
    g = opt.param_groups[0]
    args.lr = g["lr"]
    args.warmup, args.min_lr_ratio = 0, 1.0
    training = {"factory": args.factory, "steps": args.steps,
                "params": sum(p.numel() for p in model.parameters())}
    cfg = {"name": type(model).__name__, "kind": "generic", "modules": str(model)[:4000]}
    schedule = {"kind": "set by the factory; the lr of each captured step is in its step group"}
    writer = TraceWriter(args.out, common_attrs(args, "generic", cfg, opt, training, schedule))
    try:
        cap = Capturer(writer, model, opt, args, llama=False)
        losses = []
        for step in range(1, args.steps + 1):
            lr = opt.param_groups[0]["lr"]
            ac = ActivationCapture(model, llama=False) if cap.needs_activations(step) else None
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model, step)
            loss.backward()
            if ac is not None:
                ac.remove()
                cap.store_activations(step, ac, -1)
            cap.before_update(step, lr, loss.item())
            opt.step()
            cap.after_update(step)
            losses.append(loss.item())
        writer.add_meta("train/loss", np.array(losses, dtype=np.float32))
        writer.close()
    except BaseException:
        writer.abort()
        raise
    print(f"wrote {args.out}: {os.path.getsize(args.out) / 1e6:.2f} MB, final loss {losses[-1]:.4f}",
          file=sys.stderr)


# ---------------------------------------------------------------------------------------------

def main(argv=None):
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
    pl.add_argument("--act-seqs", type=int, default=1, help="sequences in the activation-capture micro-batch")
    pl.add_argument("--act-seq-len", type=int, default=0,
                    help="tokens per sequence in the activation-capture micro-batch (a causal prefix; 0: --seq)")
    pl.add_argument("--compute-dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="autocast dtype of the forward (activations are stored in the dtype they have)")
    pl.add_argument("--eval-every", type=int, default=25)
    pl.add_argument("--eval-batches", type=int, default=4)
    pl.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    pl.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")

    pg = sub.add_parser("generic", help="hook any nn.Module built by a factory function")
    common(pg)
    pg.add_argument("--factory", required=True, help="MODULE:FUNCTION or FILE.py:FUNCTION -> (model, optimizer, loss_fn)")

    args = ap.parse_args(argv)
    if getattr(args, "threads", 0):
        torch.set_num_threads(args.threads)
    if args.mode == "llama":
        run_llama(args)
    else:
        run_generic(args)


if __name__ == "__main__":
    main()
