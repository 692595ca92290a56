"""The models and data of scripts/capture_trace.py: a Llama-style decoder whose non-linear ops
are modules (so forward hooks see their inputs), the Python standard library's source as byte
tokens, and a small MLP for the generic mode's demo. Imported after the script has parsed its
arguments, so `capture_trace.py --help` works without PyTorch."""
from __future__ import annotations

import glob
import math
import os
import sys
import sysconfig

if __name__ == "__main__":  # a module of capture_trace.py, not a command: say so, without PyTorch
    print(__doc__.strip() + "\n\nRun scripts/capture_trace.py --help.")
    sys.exit(0)

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

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
