#!/usr/bin/env python3
"""Measure one training step of a Llama-style model as a framework really runs it: memory and time.

One process measures one model under one framework at one or more micro-batches and writes a JSON
document (format "fp8sim-step-measurement") that `fp8sim memory --validate` and
`fp8sim speed --validate` compare with their predictions.

Frameworks (--framework):
  torch          the project's plain PyTorch reference model (scripts/measure_memory.py's Model):
                 fp32 parameters, bfloat16 autocast, SDPA, cross-entropy on fp32 logits,
                 AdamW(foreach=True), zero_grad(set_to_none=False)
  hf             Hugging Face transformers LlamaForCausalLM, its default attention ("sdpa"), fp32
                 parameters + bfloat16 autocast, loss from model(labels=...), AdamW(fused=True),
                 zero_grad(set_to_none=True): what transformers' Trainer does with bfloat16=True
  hf-eager       the same with attn_implementation="eager" (attention probabilities materialised)
  torchao-float8 hf with torchao's convert_to_float8_training (tensorwise scaling) on every
                 Linear but the LM head; meant to run with --compile, as torchao documents
  coat           COAT's own published model and optimizer (fp8-coat; scripts/measure_coat.py)

Every run: --warmup steps (allocate gradients and optimizer states; compile), then one step with
memory instrumentation, then --steps timed steps (CUDA events; host_issue_ms is the median time the
host takes to issue a step, close to the step time when the host is the bottleneck), then optionally one step under the
PyTorch profiler (--profile): kernel count, GPU busy time, time per kernel class, the 60 kernels
that take the most time by name. --snapshot records the allocator's history during the measured
step and keeps the blocks alive at its peak, grouped by the source line that allocated them. --max-batch CAP_GIB
then searches the largest micro-batch whose step runs with torch.cuda.set_per_process_memory_fraction
capped at CAP_GIB (allocator OOM = does not fit), doubling and then bisecting; with --check-batches
B1,B2 it tries only those micro-batches under the cap (under --compile every micro-batch tried
compiles again, which makes a search slow): give fp8sim's answer B and B+1 to confirm it.

Data parallel (--dist, under torchrun, one GPU per process; NCCL, or gloo on the CPU): every rank
measures its own step and rank 0 writes one document with each rank's numbers (`ranks`):
  ddp            DistributedDataParallel with its defaults (25 MB buckets, gradient_as_bucket_view=False)
                 over the framework's fp32 parameters; the framework's autocast and optimizer
  fsdp2          fully_shard (FSDP2) on every decoder layer, then on the root (embedding, final norm, LM
                 head); MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) unless
                 --fsdp-param-dtype fp32 (fp32 all-gathers, autocast casts); the optimizer runs on the
                 fp32 shards. Frameworks torch and hf (with or without --checkpointing), eager.
NCCL_NVLS_ENABLE=0 is set (NVLink multicast off) unless the environment sets it.

Memory terms (bytes), all from the CUDA caching allocator:
  weights      parameter bytes (+ bfloat16 autocast weight copies saved for backward, eager only)
  gradients    bytes of every .grad after backward
  optimizer    bytes of every optimizer state tensor
  activations  allocated after forward+loss minus allocated before forward, minus the weight copies
  peak         torch.cuda.max_memory_allocated over the whole measured step
  reserved     torch.cuda.max_memory_reserved over the step (what an OOM is decided against)

Usage:
  python3 scripts/measure_step.py --framework hf --model llama3-8b --layers 4 --batch 2 --seq 2048 \\
      --compile --out run.json
  torchrun --nproc_per_node 4 scripts/measure_step.py --dist fsdp2 --framework hf --model llama2-7b \
      --layers 8 --batch 2 --out fsdp2.json
  python3 scripts/measure_step.py --check      # CPU smoke test of the torch and hf code paths
  torchrun --nproc_per_node 2 scripts/measure_step.py --check --dist fsdp2   # and of the sharding, on gloo
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
FRAMEWORKS = ("torch", "hf", "hf-eager", "torchao-float8", "coat")
GIB = float(1 << 30)


def die(msg, code=1):
    print(f"measure_step.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --help works without torch; main() says it is missing in one line
    torch = F = None

import measure_memory as ref  # the torch reference model and config loader


# ---- configuration ------------------------------------------------------------------------------

def model_config(args):
    """models/NAME.json with the command line's overrides applied (recorded as model_config)."""
    cfg, path = ref.load_config(args.model, os.path.join(REPO, "models"))
    cfg = dict(cfg)
    cfg.pop("source", None)
    over = {"num_hidden_layers": args.layers, "num_key_value_heads": args.kv_heads, "vocab_size": args.vocab,
            "hidden_size": args.hidden, "intermediate_size": args.ffn, "num_attention_heads": args.heads}
    changed = {k: v for k, v in over.items() if v is not None}
    cfg.update(changed)
    if changed:
        cfg["name"] = args.name or (cfg["name"] + "-" + "-".join(f"{k.split('_')[-1]}{v}" for k, v in changed.items()))
        cfg["display_name"] = cfg["name"]
    if cfg["num_attention_heads"] % cfg["num_key_value_heads"]:
        die("num_key_value_heads must divide num_attention_heads", 2)
    cfg["max_position_embeddings"] = max(int(cfg.get("max_position_embeddings", 0)), args.seq)
    return cfg, os.path.relpath(path, REPO)


def hf_llama_config(cfg, attn):
    from transformers import LlamaConfig
    if cfg["norm"] != "rmsnorm" or cfg["activation"] != "swiglu":
        die(f"framework hf models Llama (rmsnorm + swiglu); {cfg['name']} has {cfg['norm']} + {cfg['activation']}", 2)
    c = LlamaConfig(hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"],
                    num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=cfg["num_attention_heads"],
                    num_key_value_heads=cfg["num_key_value_heads"], vocab_size=cfg["vocab_size"],
                    max_position_embeddings=cfg["max_position_embeddings"], rope_theta=float(cfg.get("rope_theta", 1e4)),
                    rms_norm_eps=float(cfg.get("norm_eps", 1e-5)), tie_word_embeddings=bool(cfg["tie_word_embeddings"]),
                    attention_bias=bool(cfg.get("attention_bias", False)), hidden_act="silu", use_cache=False)
    c._attn_implementation = attn
    return c


# ---- one framework = model + optimizer + how a step runs -----------------------------------------

class Setup:
    """What a step needs: the model, the optimizer, and the facts recorded about them."""

    def __init__(self):
        self.model = None
        self.opt = None
        self.make_opt = None  # params -> optimizer, called once the model is wrapped (FSDP2 replaces parameters)
        self.autocast = True
        self.set_to_none = True
        self.hf_loss = True  # model(input_ids, labels=...) returns the loss
        self.holds_logits = False  # the loop keeps the logits alive until backward has run
        self.recipe = "bf16"
        self.training = ""
        self.versions = {}


def build(args, cfg, dev):
    s = Setup()
    s.versions["torch"] = torch.__version__
    fw = args.framework
    if fw == "torch":
        with torch.device(dev):
            s.model = ref.Model(cfg)
        s.make_opt = lambda params: torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True, fused=False)
        s.set_to_none, s.hf_loss = False, False
        s.training = ("fp32 params + bf16 autocast; SDPA causal; F.cross_entropy(logits.float()), the loop holding "
                      "logits through backward; AdamW(foreach=True); zero_grad(set_to_none=False)")
        s.holds_logits = True
    elif fw in ("hf", "hf-eager", "torchao-float8"):
        import transformers
        s.versions["transformers"] = transformers.__version__
        from transformers import LlamaForCausalLM
        attn = "eager" if fw == "hf-eager" else "sdpa"
        with torch.device(dev):
            s.model = LlamaForCausalLM(hf_llama_config(cfg, attn))
        if fw == "torchao-float8":
            import torchao
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
            s.versions["torchao"] = torchao.__version__

            def keep(mod, fqn):  # torchao needs both dims divisible by 16; the LM head stays bf16
                return fqn != "lm_head" and mod.in_features % 16 == 0 and mod.out_features % 16 == 0

            convert_to_float8_training(s.model, config=Float8LinearConfig(), module_filter_fn=keep)
            s.recipe = "te"
        s.make_opt = lambda params: torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=dev.type == "cuda")
        s.training = (f"transformers LlamaForCausalLM attn_implementation={attn}; fp32 params + bf16 autocast; "
                      "loss = model(input_ids, labels=input_ids).loss; AdamW(fused=True); zero_grad(set_to_none=True)"
                      + ("; torchao convert_to_float8_training (tensorwise), lm_head excluded" if s.recipe == "te" else ""))
    elif fw == "coat":
        import measure_coat
        if args.coat_first_config:
            triton_first_config()
            s.versions["coat_autotune"] = "first configuration"
        measure_coat.setup(args.coat, "/tmp/fp8sim_coat")
        import transformers
        s.versions["transformers"] = transformers.__version__
        if cfg["norm"] != "rmsnorm" or cfg["activation"] != "swiglu":
            die(f"framework coat models Llama (rmsnorm + swiglu); {cfg['name']} has {cfg['norm']}", 2)
        hf_cfg = {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                      "num_key_value_heads", "vocab_size", "max_position_embeddings",
                                      "tie_word_embeddings")}
        hf_cfg.update(rope_theta=float(cfg.get("rope_theta", 1e4)), rms_norm_eps=float(cfg.get("norm_eps", 1e-5)))
        s.model = measure_coat.build_model(hf_cfg, args.checkpointing, dev)
        s.opt = measure_coat.build_optimizer(s.model, 1e-4)
        t = measure_coat.training_setup()
        s.autocast = bool(t.get("autocast", True))
        s.set_to_none = bool(t.get("set_to_none", True))
        s.hf_loss = True
        s.recipe = "coat"
        s.training = t.get("notes", "COAT's own CoatLlamaForCausalLM and CoatAdamW")
    else:
        die(f"unknown framework '{fw}'", 2)
    if args.checkpointing and fw == "torch":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)
        apply_activation_checkpointing(
            s.model, checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(m, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda m: isinstance(m, ref.Block))
        s.training += "; activation checkpointing of every block (checkpoint_wrapper, NO_REENTRANT)"
    elif args.checkpointing and fw != "coat":
        s.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        s.training += "; gradient checkpointing (use_reentrant=False)"
    if args.dist:
        wrap_data_parallel(s, args, dev)
    if s.opt is None:
        s.opt = s.make_opt(s.model.parameters())
    if args.compile:
        # one static graph per micro-batch, as a fixed-shape training run compiles it
        torch._dynamo.config.automatic_dynamic_shapes = False
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        s.model = torch.compile(s.model)
        s.training += "; torch.compile(model)"
    return s


def triton_first_config():
    """Every Triton kernel declared after this call with @triton.autotune runs its first
    configuration: the same launches and allocations without benchmarking each new shape (COAT
    autotunes per shape, 1.5-3 minutes per micro-batch), for counts and memory, not for timing."""
    from triton.runtime import autotuner
    if getattr(autotuner.Autotuner, "_fp8sim_first_config", False):
        return
    init = autotuner.Autotuner.__init__

    def first(self, fn, arg_names, configs, *a, **k):
        init(self, fn, arg_names, configs[:1], *a, **k)

    autotuner.Autotuner.__init__ = first
    autotuner.Autotuner._fp8sim_first_config = True


# ---- data parallel (--dist) -----------------------------------------------------------------------

DIST = ("ddp", "fsdp2")


def dist_env():
    """(rank, world size, local rank) from torchrun's environment; None outside torchrun."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))


def init_dist(args):
    """Joins the process group torchrun set up; returns this rank's device (scripts/dist_start.py)."""
    import dist_start
    return dist_start.start(args.device, die)


def decoder_layers(model):
    """The decoder layers of the reference model (blocks) or of transformers' LlamaForCausalLM."""
    if hasattr(model, "blocks"):
        return list(model.blocks)
    return list(model.model.layers)


def wrap_data_parallel(s, args, dev):
    """DDP or FSDP2 around s.model, as the module docstring says."""
    import torch.distributed as dist
    n = dist.get_world_size()
    if args.dist == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        s.model = DistributedDataParallel(s.model, device_ids=[dev.index] if dev.type == "cuda" else None)
        s.training += f"; DistributedDataParallel over {n} ranks (defaults: 25 MB buckets, gradient_as_bucket_view=False)"
        return
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if args.fsdp_param_dtype == "bf16" else MixedPrecisionPolicy())
    for layer in decoder_layers(s.model):
        fully_shard(layer, mp_policy=mp)
    fully_shard(s.model, mp_policy=mp)
    s.training += (f"; FSDP2 fully_shard per decoder layer + root over {n} ranks, "
                   + ("MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)" if args.fsdp_param_dtype == "bf16"
                      else "fp32 parameters gathered (no MixedPrecisionPolicy)"))


def local_tensor(t):
    """A DTensor's local shard (FSDP2's parameters, gradients and optimizer states), else t."""
    return t.to_local() if hasattr(t, "to_local") else t


# ---- measurement --------------------------------------------------------------------------------

class GcClock:
    """Time (ms) and count (per generation) the collections of Python's cyclic garbage collector while
    active: a collection runs inside whichever phase allocates past the collector's threshold, so a
    step it slows shows as such. gc.callbacks brackets each collection."""

    def __init__(self):
        self.reset()
        self._t = 0.0

    def reset(self):
        self.ms, self.n = 0.0, [0, 0, 0]

    def __call__(self, phase, info):
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.ms += (time.perf_counter() - self._t) * 1e3
            self.n[info["generation"]] += 1

    def __enter__(self):
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self)


class Stepper:
    def __init__(self, s, cfg, dev):
        self.s, self.cfg, self.dev = s, cfg, dev
        self.cuda = dev.type == "cuda"
        self.gen = torch.Generator(device="cpu").manual_seed(1)

    def batch(self, b, seq):
        ids = torch.randint(0, self.cfg["vocab_size"], (b, seq + 1), generator=self.gen).to(self.dev)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def alloc(self):
        return torch.cuda.memory_allocated() if self.cuda else 0

    def forward_loss(self, inp, tgt):
        """The loss, and what the loop holds beside it until the backward has run: the torch
        reference loop (scripts/measure_memory.py) keeps its `logits` variable alive through
        backward, which the memory model counts; transformers' loop holds only the loss."""
        s = self.s
        with torch.autocast(device_type=self.dev.type, dtype=torch.bfloat16, enabled=s.autocast):
            if s.hf_loss:
                return s.model(input_ids=inp, labels=inp).loss, None
            logits = s.model(inp)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1)), logits

    def step(self, inp, tgt):
        self.s.opt.zero_grad(set_to_none=self.s.set_to_none)
        loss, held = self.forward_loss(inp, tgt)
        loss.backward()
        del loss, held
        self.s.opt.step()

    def measured_step(self, inp, tgt, hooks, snapshot=False):
        """One step with the allocator read at each phase boundary; with `snapshot`, also the
        blocks alive at the step's peak, by the source line that allocated them (live_at_peak)."""
        s = self.s
        s.opt.zero_grad(set_to_none=s.set_to_none)
        saved = {}

        def pack(t):
            try:
                st = t.untyped_storage()
                prev = saved.get(st.data_ptr(), (0, False))
                saved[st.data_ptr()] = (st.nbytes(), prev[1] or ref.is_weight_copy(t))
            except (RuntimeError, NotImplementedError):
                pass
            return t

        self.sync()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        before = self.alloc()
        if snapshot:
            torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
        if hooks:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss, held = self.forward_loss(inp, tgt)
        else:
            loss, held = self.forward_loss(inp, tgt)
        self.sync()
        after_fwd = self.alloc()
        peak = torch.cuda.max_memory_allocated if self.cuda else (lambda: 0)
        fwd_peak = peak()
        loss.backward()
        del loss, held
        self.sync()
        bwd_peak = peak()
        after_bwd = self.alloc()
        s.opt.step()
        self.sync()
        live = None
        if snapshot:
            live = live_at_peak(torch.cuda.memory._snapshot(), before)
            torch.cuda.memory._record_memory_history(enabled=None)
        out = dict(before=before, after_fwd=after_fwd, fwd_peak=fwd_peak, bwd_peak=bwd_peak, after_bwd=after_bwd,
                   step_peak=peak(), reserved_peak=torch.cuda.max_memory_reserved() if self.cuda else 0,
                   weight_copies=sum(nb for nb, w in saved.values() if w) if hooks else None,
                   saved_storages=sum(nb for nb, _ in saved.values()) if hooks else None, live=live)
        return out

    def timed(self, inp, tgt, n):
        """Milliseconds per step (CUDA events), and per step the host's time to issue it and each of
        its phases (forward with the loss, backward, optimizer; None on the CPU). A phase's host time
        includes any wait for the GPU that the phase's code makes (a .item() in the loss, say)."""
        if not self.cuda:
            t0 = time.perf_counter()
            for _ in range(n):
                self.step(inp, tgt)
            return [(time.perf_counter() - t0) * 1e3 / n], None
        times, host = [], []
        with GcClock() as clock:
            for _ in range(n):
                clock.reset()
                times.append(self._timed_step(inp, tgt, host))
                host[-1]["gc"] = clock.ms
                host[-1]["gc_collections"] = list(clock.n)
        return times, host

    def _timed_step(self, inp, tgt, host):
        """One CUDA-event-timed step (ms); appends its host times to `host`."""
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        self.s.opt.zero_grad(set_to_none=self.s.set_to_none)
        loss, held = self.forward_loss(inp, tgt)
        t1 = time.perf_counter()
        loss.backward()
        del held
        t2 = time.perf_counter()
        self.s.opt.step()
        t3 = time.perf_counter()  # until the host has issued the step
        b.record()
        del loss
        b.synchronize()
        host.append({"total": (t3 - t0) * 1e3, "forward": (t1 - t0) * 1e3, "backward": (t2 - t1) * 1e3,
                     "optimizer": (t3 - t2) * 1e3})
        return a.elapsed_time(b)

    def profiled(self, inp, tgt):
        """One step under the PyTorch profiler: kernels launched, GPU busy time, time per class."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self.sync()
        t0 = time.perf_counter()
        with profile(activities=acts) as prof:
            self.step(inp, tgt)
            self.sync()
        wall = (time.perf_counter() - t0) * 1e3
        classes = {}
        names = {}
        n = 0
        busy = 0.0
        for e in prof.events():
            # record_function ranges (the optimizer's "Optimizer.step#AdamW.step", ...) also appear
            # on the GPU timeline, spanning the kernels they launched: they are not kernels
            if e.device_type != DeviceType.CUDA or is_user_annotation(e):
                continue
            dur = e.time_range.elapsed_us() / 1e3
            n += 1
            busy += dur
            k = classes.setdefault(kernel_class(e.name), {"kernels": 0, "ms": 0.0})
            k["kernels"] += 1
            k["ms"] += dur
            kn = names.setdefault(e.name, {"class": kernel_class(e.name), "kernels": 0, "ms": 0.0})
            kn["kernels"] += 1
            kn["ms"] += dur
        # The kernels that take the time, by name (what a speed profile of this framework must
        # model: which attention kernel, how many elementwise passes, the optimizer's launches).
        top = sorted(names.items(), key=lambda kv: -kv[1]["ms"])[:TOP_KERNELS]
        return {"wall_ms_profiled": wall, "kernels": n, "gpu_busy_ms": busy, "by_class": classes,
                "top_kernels": [{"name": k[:200], **v} for k, v in top]}


TOP_KERNELS = 60  # kernel names kept per profiled step, by total time
LIVE_SITES = 60  # allocation sites kept from a snapshot's peak, by bytes

# Frames of generic machinery (module calls, autograd, dynamo, contextlib): an allocation's site is
# the first frame, innermost first, outside them, so that it names the model's or the generated
# code's line rather than nn.Module.__call__.
GENERIC_FRAMES = ("torch/nn/modules/module.py", "torch/autograd/", "torch/_dynamo/", "torch/_functorch/",
                  "torch/_inductor/runtime/", "torch/_ops.py", "torch/_tensor.py", "torch/overrides.py",
                  "torch/utils/_", "torch/amp/", "contextlib.py", "torch/_compile.py", "torch/_library/")


def live_at_peak(snap, before):
    """The allocator's blocks alive at the peak of a recorded step, grouped by allocation site.

    Replays the snapshot's trace (alloc, free) on top of `before` bytes allocated when recording
    began. Blocks from before the recording that are freed during it lower the running total but
    have no site; the peak's own blocks are grouped by the first non-generic Python frame and that
    frame's source line (for Inductor's generated code, the buffer's allocation)."""
    import linecache
    events = [e for trace in snap.get("device_traces", []) for e in trace]
    alive, running, best, best_i, old_freed = {}, before, before, -1, 0
    for i, e in enumerate(events):
        a = e.get("action")
        if a == "alloc":
            alive[e["addr"]] = e
            running += e["size"]
        elif a in ("free_requested", "free_completed"):
            if e["addr"] in alive:
                running -= alive.pop(e["addr"])["size"]
            elif a == "free_requested":  # allocated before the recording began
                running -= e["size"]
                old_freed += e["size"]
        if running > best:
            best, best_i = running, i
    alive, old_at_peak = {}, before
    for e in events[:best_i + 1]:
        a = e.get("action")
        if a == "alloc":
            alive[e["addr"]] = e
        elif a in ("free_requested", "free_completed"):
            if alive.pop(e["addr"], None) is None and a == "free_requested":
                old_at_peak -= e["size"]
    sites = {}
    for e in alive.values():
        frames = [f for f in e.get("frames", []) if not any(g in f["filename"] for g in GENERIC_FRAMES)]
        f = frames[0] if frames else None
        key = f"{os.path.basename(f['filename'])}:{f['line']}({f['name']})" if f else "(no Python frame)"
        site = sites.setdefault(key, {"site": key, "bytes": 0, "blocks": 0, "sizes": {},
                                      "source": linecache.getline(f["filename"], f["line"]).strip()[:160] if f else ""})
        site["bytes"] += e["size"]
        site["blocks"] += 1
        site["sizes"][str(e["size"])] = site["sizes"].get(str(e["size"]), 0) + 1
    top = sorted(sites.values(), key=lambda v: -v["bytes"])
    for v in top:  # the most common block sizes only
        v["sizes"] = dict(sorted(v["sizes"].items(), key=lambda kv: -int(kv[0]) * kv[1])[:6])
    return {"peak_bytes": best, "allocated_before_step": before, "before_step_alive_at_peak": old_at_peak,
            "traced_alive_at_peak": best - old_at_peak, "events": len(events), "event_index": best_i,
            "sites": top[:LIVE_SITES], "sites_left_out_bytes": sum(v["bytes"] for v in top[LIVE_SITES:])}


def is_user_annotation(event):
    """A profiler range opened by record_function (torch.optim names its steps
    "Optimizer.step#<class>.step"), as opposed to a kernel, memcpy or memset."""
    return bool(getattr(event, "is_user_annotation", False)) or event.name.startswith(("Optimizer.", "ProfilerStep#"))


def kernel_class(name):
    n = name.lower()
    # Inductor's fused pointwise/reduction kernels (triton_poi_, triton_red_, triton_per_) are named
    # after the ops they fuse, which can include the GEMM they feed ("..._scaled_mm_..."); its GEMM
    # templates are triton_tem_.
    if n.startswith("triton_") and not n.startswith("triton_tem"):
        return "triton"
    if any(k in n for k in ("flash", "fmha", "attention", "sdpa", "efficient_attention")):
        return "attention"
    if any(k in n for k in ("gemm", "nvjet", "cutlass", "sm90_xmma", "matmul", "_mm_", "scaled_mm", "cublas")):
        return "gemm"
    if any(k in n for k in ("adam", "multi_tensor", "foreach", "fp8_adamw", "optim")):
        return "optimizer"
    if "memcpy" in n or "memset" in n:
        return "copy"
    if "triton" in n:
        return "triton"
    return "other"


def component_bytes(s):
    """(parameters in the model, then this rank's bytes of parameters, gradients and optimizer
    states): under FSDP2 the local shards, the parameter count that of the whole model."""
    params = [p for p in s.model.parameters()]
    pbytes = sum(local_tensor(p).numel() * p.element_size() for p in params)
    grads = sum(local_tensor(p.grad).numel() * p.grad.element_size() for p in params if p.grad is not None)
    optim = 0
    seen = set()
    for st in s.opt.state.values():
        for v in (st.values() if isinstance(st, dict) else []):
            v = local_tensor(v) if torch.is_tensor(v) else v
            if torch.is_tensor(v) and v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                optim += v.numel() * v.element_size()
    return sum(p.numel() for p in params), pbytes, grads, optim


def is_oom(e):
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def set_cap(cap_gib):
    """Caps PyTorch's caching allocator at cap_gib of the device (None: the whole device), after
    handing back what it has cached: the first micro-batch tried starts from an empty cache, as
    every later one does (try_batch empties it after each)."""
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(1.0 if cap_gib is None else min(1.0, cap_gib * GIB / total))


def try_batch(st, b, seq):
    """Whether one training step at micro-batch b runs (an allocator OOM in any form: it does not
    fit); the gradients are freed and the cache emptied afterwards either way."""
    ok = True
    try:
        inp, tgt = st.batch(b, seq)
        st.step(inp, tgt)
        st.sync()
        del inp, tgt
    except Exception as e:  # noqa: BLE001 - an OOM in any form is the answer "does not fit"
        if not is_oom(e):
            raise
        ok = False
    st.s.opt.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    print(f"  max-batch: batch {b}: {'fits' if ok else 'OOM'}", flush=True)
    return ok


def max_batch(st, args, cap_gib, cap=set_cap):
    """Largest micro-batch whose step runs under a cap of cap_gib (doubling, then bisecting)."""
    cap(cap_gib)
    tried = {}

    def fits(b):
        if b not in tried:
            tried[b] = try_batch(st, b, args.seq)
        return tried[b]

    lo, hi = 0, None
    b = 1
    while b <= args.max_batch_limit:
        if fits(b):
            lo, b = b, b * 2
        else:
            hi = b
            break
    if hi is None:
        cap(None)
        return {"cap_gib": cap_gib, "max_batch": lo, "limit_reached": True,
                "tried": {str(k): v for k, v in sorted(tried.items())}}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    cap(None)
    return {"cap_gib": cap_gib, "max_batch": lo, "limit_reached": False,
            "tried": {str(k): v for k, v in sorted(tried.items())}}


def check_batches(st, args, cap_gib, batches, cap=set_cap):
    """Only the given micro-batches, each tried as max_batch() tries one, under the same cap: the
    record `fp8sim memory --validate` judges (fp8sim's largest micro-batch B is confirmed when B
    fits and B + 1 does not). Tried in ascending order, as a search reaches its answer."""
    cap(cap_gib)
    tried = {str(b): try_batch(st, b, args.seq) for b in sorted(set(batches))}
    cap(None)
    return {"cap_gib": cap_gib, "tried": tried}


def parse_batches(text):
    """'B1,B2,...' -> [B1, B2, ...], each an integer >= 1; ValueError otherwise."""
    out = [int(x) for x in text.split(",")]
    if not out or any(b < 1 for b in out):
        raise ValueError(text)
    return out


def gather_ranks(r):
    """Rank 0 gets every rank's record of one micro-batch (the others get None)."""
    import torch.distributed as dist
    out = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(r, out, dst=0)
    return out


def run(args):
    rank, world = 0, 1
    if args.dist:
        dev = init_dist(args)
        import torch.distributed as dist
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        die("no CUDA device (use --check for a CPU smoke test)")
    cfg, cfg_path = model_config(args)
    torch.manual_seed(0)  # every rank builds the same model (FSDP2 shards it, DDP checks it)
    t_start = time.time()
    s = build(args, cfg, dev)
    st = Stepper(s, cfg, dev)
    st.gen.manual_seed(1 + rank)  # each rank its own tokens, as data parallelism feeds them
    runs = []
    for b in args.batch:
        inp, tgt = st.batch(b, args.seq)
        t0 = time.time()
        for _ in range(args.warmup):
            st.step(inp, tgt)
        st.sync()
        warm_s = time.time() - t0
        hooks = not args.compile and args.framework != "coat"
        m = st.measured_step(inp, tgt, hooks, snapshot=args.snapshot and dev.type == "cuda" and rank == 0)
        n_params, pbytes, grads, optim = component_bytes(s)
        copies = m["weight_copies"] or 0
        r = {"batch": b, "warmup_s": round(warm_s, 2),
             "measured_bytes": {"weights": pbytes + copies, "gradients": grads, "optimizer": optim,
                                "activations": m["after_fwd"] - m["before"] - copies, "peak": m["step_peak"],
                                "reserved": m["reserved_peak"]},
             "detail_bytes": {"parameters": pbytes, "autocast_weight_copies": m["weight_copies"],
                              "saved_tensor_storages": m["saved_storages"],
                              "allocated_before_forward": m["before"], "allocated_after_forward_and_loss": m["after_fwd"],
                              "allocated_after_backward": m["after_bwd"], "peak_during_forward": m["fwd_peak"],
                              "peak_during_forward_backward": m["bwd_peak"], "peak_whole_step": m["step_peak"],
                              "reserved_peak": m["reserved_peak"]}}
        if m["live"]:
            r["live_at_peak"] = m["live"]
        if args.steps > 0:
            if args.gc_freeze:
                gc.collect()
                gc.freeze()
            try:
                times, host = st.timed(inp, tgt, args.steps)
            finally:
                if args.gc_freeze:  # the next micro-batch's memory step collects as usual
                    gc.unfreeze()
            r["step_ms"] = {"median": statistics.median(times), "min": min(times), "max": max(times), "n": len(times),
                            "all": [round(x, 4) for x in times]}
            r["tokens_per_s"] = b * args.seq / (r["step_ms"]["median"] / 1e3)
            if host:
                # Host time to issue one step (Python, autograd, launches), median: a step whose
                # host time is close to its CUDA-event time is host-bound.
                r["host_issue_ms"] = statistics.median(h["total"] for h in host)
                r["host_issue_phases_ms"] = {k: round(statistics.median(h[k] for h in host), 4)
                                             for k in ("forward", "backward", "optimizer")}
                # Per step, in the order of step_ms.all: a host that alternates between two speeds
                # shows here, where the medians hide it.
                r["host_issue_steps_ms"] = [{k: round(h[k], 4) for k in ("forward", "backward", "optimizer", "gc")}
                                            for h in host]
                # Python's garbage collections during each step (generations 0, 1, 2); their time is
                # the "gc" of host_issue_steps_ms, part of whichever phase they ran in.
                r["gc_collections_steps"] = [h["gc_collections"] for h in host]
        if args.profile:
            r["profile"] = st.profiled(inp, tgt)
        del inp, tgt
        if args.dist:
            every = gather_ranks(r)
            if rank != 0:
                continue
            # measured_bytes, detail_bytes and the times stay rank 0's; `ranks` holds every rank's.
            r["ranks"] = [{"rank": i, "measured_bytes": x["measured_bytes"], "detail_bytes": x["detail_bytes"],
                           **({"step_ms_median": x["step_ms"]["median"]} if "step_ms" in x else {})}
                          for i, x in enumerate(every)]
        runs.append(r)
        mb = r["measured_bytes"]
        print(f"{args.framework}{' compiled' if args.compile else ''}{' ckpt' if args.checkpointing else ''} "
              f"{cfg['name']} b{b}x{args.seq}: peak {mb['peak'] / GIB:.3f} GiB, reserved {mb['reserved'] / GIB:.3f}, "
              f"activations {mb['activations'] / GIB:.3f}"
              + (f", step {r['step_ms']['median']:.2f} ms" if "step_ms" in r else ""), flush=True)
    doc = {
        "format": "fp8sim-step-measurement", "version": 1, "tool": "scripts/measure_step.py",
        "command": " ".join(os.path.basename(a) if os.path.isabs(a) else a for a in sys.argv[1:]),
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu (--check: no memory numbers)",
        "versions": s.versions, "framework": args.framework, "compile": args.compile,
        "checkpointing": args.checkpointing, "recipe": s.recipe, "training": s.training,
        "model": cfg["name"], "model_config_path": cfg_path, "model_config": cfg, "params": n_params,
        "gpus": world, "zero": 3 if args.dist == "fsdp2" else 0, "seq": args.seq, "grads_persist": not s.set_to_none,
        "loop_holds_logits": s.holds_logits, "gc_frozen": args.gc_freeze, "runs": runs,
    }
    if args.dist:
        doc["dist"] = args.dist
        if args.dist == "fsdp2":
            doc["fsdp_param_dtype"] = args.fsdp_param_dtype
        if dev.type == "cuda":
            doc["device"] += f" x {world}"
        # The wrapped model (DDP's reducer, FSDP2's hooks) goes before its process group does.
        import torch.distributed as dist
        dist.barrier()
        s.model = s.opt = st.s = None
        gc.collect()
        dist.destroy_process_group()
        if rank != 0:
            return
    if args.max_batch and args.check_batches and dev.type == "cuda":
        doc["max_batch_check"] = check_batches(st, args, args.max_batch, args.check_batches)
        print(f"  max-batch check at {args.max_batch} GiB: {doc['max_batch_check']['tried']}", flush=True)
    elif args.max_batch and dev.type == "cuda":
        doc["max_batch"] = max_batch(st, args, args.max_batch)
        print(f"  max batch at {args.max_batch} GiB: {doc['max_batch']['max_batch']}", flush=True)
    doc["seconds"] = round(time.time() - t_start, 1)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--framework", choices=FRAMEWORKS, default="torch")
    ap.add_argument("--model", default="llama2-7b", help="models/ name or JSON config")
    ap.add_argument("--name", help="name for the overridden config (default: derived from the overrides)")
    for k in ("layers", "kv-heads", "vocab", "hidden", "ffn", "heads"):
        ap.add_argument(f"--{k}", type=int, help=f"override the model's {k}")
    ap.add_argument("--batch", type=int, nargs="+", default=[2], help="micro-batches, one measurement each")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--compile", action="store_true", help="torch.compile(model)")
    ap.add_argument("--checkpointing", action="store_true", help="activation checkpointing of every layer")
    ap.add_argument("--warmup", type=int, default=2, help="steps before measuring (default 2)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps after the memory step (default 0)")
    ap.add_argument("--profile", action="store_true", help="one more step under the PyTorch profiler")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="gc.collect() then gc.freeze() before the timed steps: the objects alive then (model, "
                         "optimizer, compiled code) are never scanned again by Python's garbage collector, as in a "
                         "training loop that freezes its heap")
    ap.add_argument("--snapshot", action="store_true",
                    help="record the allocator's history during the measured step and keep the blocks alive at "
                         "its peak, by allocating source line (live_at_peak)")
    ap.add_argument("--max-batch", type=float, metavar="CAP_GIB", help="search the largest micro-batch under this cap")
    ap.add_argument("--max-batch-limit", type=int, default=256)
    ap.add_argument("--check-batches", metavar="B1,B2", type=parse_batches,
                    help="with --max-batch CAP_GIB: try only these micro-batches under the cap instead of searching "
                         "(each new micro-batch recompiles under --compile); records max_batch_check, which "
                         "`fp8sim memory --validate` judges: its largest micro-batch B is confirmed when B fits and "
                         "B+1 does not")
    ap.add_argument("--coat", help="fp8-coat sdist (.tar.gz) or unpacked directory (framework coat)")
    ap.add_argument("--coat-first-config", action="store_true",
                    help="coat: its autotuned Triton kernels run their first configuration (memory and max-batch "
                         "runs; not with --steps)")
    ap.add_argument("--dist", choices=DIST,
                    help="data parallel under torchrun, one GPU per process (see above); every rank measures")
    ap.add_argument("--fsdp-param-dtype", choices=("bf16", "fp32"), default="bf16",
                    help="--dist fsdp2: the dtype parameters are all-gathered in (default bf16: "
                         "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32))")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", help="output JSON path")
    ap.add_argument("--check", action="store_true", help="CPU smoke test (tiny-llama, no memory numbers)")
    args = ap.parse_args()
    if torch is None:
        die("PyTorch is not installed (this script runs on the GPU machine)")
    if args.check:
        args.model, args.device, args.batch, args.seq, args.warmup, args.steps = "tiny-llama", "cpu", [2], 32, 1, 1
        args.out = args.out or "/tmp/fp8sim_measure_step_check.json"
    if args.dist:
        if dist_env() is None:
            die(f"--dist {args.dist} runs under torchrun (torchrun --nproc_per_node N scripts/measure_step.py ...)", 2)
        bad = [o for o, on in (("--compile", args.compile), ("--max-batch", args.max_batch is not None),
                               ("--profile", args.profile)) if on]
        if args.framework not in ("torch", "hf", "hf-eager") or bad:
            die(f"--dist runs the torch, hf and hf-eager frameworks eagerly, without --max-batch or --profile; "
                f"not {', '.join([args.framework] + bad) if args.framework not in ('torch', 'hf', 'hf-eager') else ', '.join(bad)}", 2)
    if not args.out:
        die("--out is required", 2)
    if any(b < 1 for b in args.batch) or args.seq < 1:
        die("--batch and --seq must be >= 1", 2)
    if args.framework == "coat" and not args.coat:
        die("--framework coat needs --coat SDIST_OR_DIR", 2)
    if args.check_batches and not args.max_batch:
        die("--check-batches needs --max-batch CAP_GIB (the cap they are tried under)", 2)
    if args.max_batch is not None and not args.max_batch > 0:
        die("--max-batch must be a positive number of GiB", 2)
    if args.coat_first_config and (args.framework != "coat" or args.steps or args.profile):
        die("--coat-first-config is for --framework coat without --steps or --profile", 2)
    try:
        run(args)
    except torch.OutOfMemoryError as e:
        die(f"out of GPU memory: {str(e).splitlines()[0]}")
    if args.dist:
        import dist_start
        dist_start.leave()


if __name__ == "__main__":
    main()
