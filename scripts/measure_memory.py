#!/usr/bin/env python3
"""Measure the GPU memory of one BF16 AdamW training step of a Llama/OLMo-style model.

The model is built from a models/*.json config (the same file `fp8sim memory --model` reads) and
trained the way a plain PyTorch BF16 mixed-precision run does it:
  * fp32 parameters (the master weights), torch.autocast(bfloat16) for the forward pass, so the
    GEMMs read bf16 copies of the weights that autocast makes once per step and keeps for backward;
  * the residual stream stays fp32 (the embedding is fp32 and autocast does not cast additions);
    every norm output is cast to bf16 once and shared by the projections that read it;
  * attention is F.scaled_dot_product_attention(is_causal=True) (FlashAttention on Hopper);
  * the loss is F.cross_entropy on the logits upcast to fp32;
  * torch.optim.AdamW(foreach=True) with fp32 states; gradients are kept between steps
    (zero_grad(set_to_none=False)), as fp8sim's default assumes.

After a warm-up step (which allocates gradients and optimizer states) one full step is measured:
  weights      fp32 parameter bytes + the bf16 weight copies autocast saved for backward
  gradients    bytes of every p.grad
  optimizer    bytes of every optimizer state tensor
  activations  memory allocated after forward+loss minus memory allocated before forward, minus the
               bf16 weight copies (what autograd keeps for backward, plus the logits)
  peak         torch.cuda.max_memory_allocated() over forward, backward and optimizer step
and written as JSON (format "fp8sim-memory-measurement") for `fp8sim memory --validate FILE`.

Usage:
  python3 scripts/measure_memory.py --model olmo-1b --batch 4 --seq 2048 --out memory_measured.json
  python3 scripts/measure_memory.py --check      # CPU smoke test of the code path on tiny-llama
"""
import argparse
import json
import math
import os
import sys
import types
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die(msg):
    print(f"measure_memory.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # --help works without torch; main() says it is missing in one line
    torch = F = None
    nn = types.SimpleNamespace(Module=object)


def load_config(name_or_path, models_dir):
    path = name_or_path if (name_or_path.endswith(".json") or "/" in name_or_path) else \
        os.path.join(models_dir, name_or_path + ".json")
    if not os.path.isfile(path):
        die(f"model config '{path}' not found")
    with open(path) as f:
        cfg = json.load(f)
    need = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size", "norm", "activation", "tie_word_embeddings"]
    for k in need:
        if k not in cfg:
            die(f"model config {path}: missing field '{k}'")
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        die(f"model config {path}: num_attention_heads does not divide hidden_size")
    return cfg, path


class Norm(nn.Module):
    """Pre-norm. RMSNorm upcasts to fp32 as transformers' LlamaRMSNorm does; LayerNorm variants use
    F.layer_norm, which autocast runs in fp32."""

    def __init__(self, kind, hidden, eps):
        super().__init__()
        self.kind, self.eps, self.hidden = kind, eps, hidden
        if kind in ("rmsnorm", "layernorm"):
            self.weight = nn.Parameter(torch.ones(hidden))
        if kind == "layernorm":
            self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x):
        if self.kind == "rmsnorm":
            x32 = x.float()
            x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * x32
        w = self.weight if self.kind == "layernorm" else None
        b = self.bias if self.kind == "layernorm" else None
        return F.layer_norm(x, (self.hidden,), w, b, self.eps)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, f = c["hidden_size"], c["intermediate_size"]
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = h // self.nh
        bias = bool(c.get("attention_bias", False))
        eps = float(c.get("norm_eps", 1e-5))
        self.attn_norm = Norm(c["norm"], h, eps)
        self.q_proj = nn.Linear(h, self.nh * self.hd, bias=bias)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=bias)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=bias)
        self.mlp_norm = Norm(c["norm"], h, eps)
        self.swiglu = c["activation"] == "swiglu"
        if self.swiglu:
            self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        hn = self.attn_norm(x).to(torch.bfloat16)  # one bf16 copy shared by q, k, v
        q = self.q_proj(hn).view(b, s, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(hn).view(b, s, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(hn).view(b, s, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.nkv != self.nh)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, s, self.nh * self.hd))
        hn = self.mlp_norm(x).to(torch.bfloat16)
        if self.swiglu:
            m = F.silu(self.gate_proj(hn)) * self.up_proj(hn)
        else:
            m = F.gelu(self.up_proj(hn))
        return x + self.down_proj(m)


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h, v = c["hidden_size"], c["vocab_size"]
        self.embed = nn.Embedding(v, h)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["num_hidden_layers"]))
        self.final_norm = Norm(c["norm"], h, float(c.get("norm_eps", 1e-5)))
        self.lm_head = None if c["tie_word_embeddings"] else nn.Linear(h, v, bias=False)
        hd = h // c["num_attention_heads"]
        self.inv_freq = 1.0 / (float(c.get("rope_theta", 10000.0)) ** (torch.arange(0, hd, 2).float() / hd))

    def rope(self, seq, device):
        t = torch.arange(seq, device=device, dtype=torch.float32)
        fr = torch.outer(t, self.inv_freq.to(device))
        emb = torch.cat((fr, fr), dim=-1)
        return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)

    def forward(self, ids):
        cos, sin = self.rope(ids.shape[1], ids.device)
        x = self.embed(ids)  # fp32: autocast does not cast embeddings
        for blk in self.blocks:
            x = blk(x, cos, sin)
        hn = self.final_norm(x).to(torch.bfloat16)
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hn, w)  # bf16 logits under autocast


def tensor_bytes(t):
    return t.numel() * t.element_size()


# Autocast's bf16 weight copies are the saved tensors whose autograd history is (views of) a cast
# of a leaf parameter: ToCopyBackward0 -> AccumulateGrad.
VIEW_NODES = ("TBackward", "TransposeBackward", "ViewBackward", "UnsafeViewBackward", "PermuteBackward",
              "ExpandBackward", "ReshapeAliasBackward", "AliasBackward")


def is_weight_copy(t):
    """A saved tensor whose autograd history is (views of) a cast of a leaf: autocast's weight copy."""
    fn = t.grad_fn
    for _ in range(8):
        if fn is None:
            return False
        name = type(fn).__name__
        if name.startswith("ToCopyBackward"):
            return any(f is not None and type(f).__name__ == "AccumulateGrad" for f, _ in fn.next_functions)
        if not name.startswith(VIEW_NODES):
            return False
        fn = fn.next_functions[0][0]
    return False


def run(args):
    cfg, cfg_path = load_config(args.model, args.models_dir)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        die("no CUDA device (use --check for a CPU smoke test)")
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device(dev):
        model = Model(cfg)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True, fused=False)
    gen = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, cfg["vocab_size"], (args.batch, args.seq + 1), generator=gen).to(dev)
    inp, tgt = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    alloc = (lambda: torch.cuda.memory_allocated()) if dev.type == "cuda" else (lambda: 0)

    def step(measure):
        info = {}
        opt.zero_grad(set_to_none=False)
        saved = {}

        def pack(t):
            try:
                st = t.untyped_storage()
                prev = saved.get(st.data_ptr(), (0, False))
                saved[st.data_ptr()] = (st.nbytes(), prev[1] or is_weight_copy(t))
            except (RuntimeError, NotImplementedError):
                pass
            return t

        sync()
        if measure and dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        before = alloc()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                logits = model(inp)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))
        sync()
        after_fwd = alloc()
        fwd_peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
        loss.backward()
        del logits, loss
        sync()
        bwd_peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
        opt.step()
        sync()
        step_peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
        weight_copies = sum(nb for nb, is_w in saved.values() if is_w)
        saved_total = sum(nb for nb, _ in saved.values())
        info.update(before=before, after_fwd=after_fwd, fwd_peak=fwd_peak, bwd_peak=bwd_peak,
                    step_peak=step_peak, weight_copies=weight_copies, saved_total=saved_total)
        return info

    step(False)  # warm-up: allocates grads and AdamW states
    m = step(True)
    weights_fp32 = sum(tensor_bytes(p) for p in params)
    grads = sum(tensor_bytes(p.grad) for p in params if p.grad is not None)
    optim = sum(tensor_bytes(v) for st in opt.state.values() for v in st.values() if torch.is_tensor(v))
    activations = m["after_fwd"] - m["before"] - m["weight_copies"]
    out = {
        "format": "fp8sim-memory-measurement",
        "version": 1,
        "tool": "scripts/measure_memory.py",
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu (--check: no memory numbers)",
        "model": cfg["name"],
        "model_config_path": os.path.relpath(cfg_path, REPO),
        "model_config": cfg,
        "params": n_params,
        "recipe": "bf16",
        "gpus": 1,
        "zero": 0,
        "batch": args.batch,
        "seq": args.seq,
        "grads_persist": True,
        "training": "fp32 params + torch.autocast(bfloat16); SDPA causal; cross_entropy on fp32 logits; "
                    "torch.optim.AdamW(foreach=True), zero_grad(set_to_none=False); 1 warm-up step",
        "measured_bytes": {
            "weights": weights_fp32 + m["weight_copies"],
            "gradients": grads,
            "optimizer": optim,
            "activations": activations,
            "peak": m["step_peak"],
        },
        "detail_bytes": {
            "weights_fp32": weights_fp32,
            "autocast_weight_copies": m["weight_copies"],
            "allocated_before_forward": m["before"],
            "allocated_after_forward_and_loss": m["after_fwd"],
            "saved_tensor_storages": m["saved_total"],
            "peak_during_forward": m["fwd_peak"],
            "peak_during_forward_backward": m["bwd_peak"],
            "peak_whole_step": m["step_peak"],
        },
        "seconds": time.time() - t0,
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)  # never a partial file
    gib = 2.0 ** 30
    mb = out["measured_bytes"]
    print(f"{cfg['name']}: {n_params / 1e9:.3f} B params, batch {args.batch} x {args.seq}, {out['device']}")
    for k in ("weights", "gradients", "optimizer", "activations", "peak"):
        print(f"  {k:<12} {mb[k] / gib:8.3f} GiB")
    print(f"wrote {args.out} ({out['seconds']:.1f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="olmo-1b", help="models/ name or JSON config (default olmo-1b)")
    ap.add_argument("--models-dir", default=os.path.join(REPO, "models"))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", help="output JSON path")
    ap.add_argument("--check", action="store_true", help="CPU smoke test on tiny-llama (no memory numbers)")
    args = ap.parse_args()
    if torch is None:
        die("PyTorch is not installed (this script runs on the GPU machine)")
    if args.check:
        args.model, args.device, args.batch, args.seq = "tiny-llama", "cpu", 2, 32
        args.out = args.out or os.path.join("/tmp", "fp8sim_measure_memory_check.json")
    if not args.out:
        die("--out is required")
    if args.batch < 1 or args.seq < 1:
        die("--batch and --seq must be >= 1")
    run(args)


if __name__ == "__main__":
    main()
