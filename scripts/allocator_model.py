#!/usr/bin/env python3
"""Experiment: predict torch.cuda.max_memory_reserved of the H200 step measurements from
fp8sim's own memory model, by replaying an event timeline of one training step through a model of
PyTorch's caching allocator. See docs/dev-notes/allocator-model.md for the rules, the timeline's
assumptions and the results; this script is how those numbers were produced.

  .venv/bin/python scripts/allocator_model.py --fp8sim build-gpu/fp8sim reports/h200/frameworks
  .venv/bin/python scripts/allocator_model.py --max-batch reports/h200/frameworks   # uses build-gpu/fp8sim

The first form prints, per run, the measured allocated peak and reserved, fp8sim's allocated
peak, the replayed timeline's allocated peak and reserved, and the errors, then a summary per
profile beside two baselines; the second replays each *__maxbatch.json search under its cap.

The allocator rules (PyTorch's c10/cuda/CUDACachingAllocator.cpp, default settings, no
expandable segments): requests round up to 512 bytes; requests of at most 1 MiB are served from
the small pool, whose segments are 2 MiB; larger ones from the large pool, whose new segments are
20 MiB for requests under 10 MiB and the request rounded up to 2 MiB otherwise; a request takes the
smallest cached free block of its pool that fits (lowest address among equals) and splits it when
the rest is at least 512 bytes (small pool) or more than 1 MiB (large pool); a freed block merges
with free neighbours of its segment; segments are never returned, except that a request that would
exceed a memory cap first returns every wholly free cached segment and retries (then OOM).
"""
import argparse
import bisect
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

MIB = 1 << 20
GIB = float(1 << 30)
SMALL_SIZE = 1 * MIB
SMALL_BUFFER = 2 * MIB
LARGE_BUFFER = 20 * MIB
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB
MIN_BLOCK = 512


class OOM(Exception):
    pass


class Block:
    __slots__ = ("seg", "addr", "size", "free", "prev", "next", "small")

    def __init__(self, seg, addr, size, small):
        self.seg, self.addr, self.size, self.small = seg, addr, size, small
        self.free, self.prev, self.next = True, None, None


class Allocator:
    def __init__(self, cap=None):
        self.cap = cap
        self.pools = {True: [], False: []}  # sorted [(size, addr, id(block), block)]
        self.next_addr = 0
        self.next_seg = 0
        self.segments = {}  # seg -> first block
        self.reserved = self.allocated = self.max_reserved = self.max_allocated = 0

    @staticmethod
    def round(size):
        return max(MIN_BLOCK, (size + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK)

    def _insert(self, b):
        bisect.insort(self.pools[b.small], (b.size, b.addr, id(b), b))

    def _remove(self, b):
        p = self.pools[b.small]
        i = bisect.bisect_left(p, (b.size, b.addr, id(b), b))
        assert p[i][3] is b
        p.pop(i)

    def _segment(self, size, small):
        alloc = SMALL_BUFFER if small else (LARGE_BUFFER if size < MIN_LARGE_ALLOC else
                                            (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE)
        if self.cap is not None and self.reserved + alloc > self.cap:
            return None
        b = Block(self.next_seg, self.next_addr, alloc, small)
        self.segments[self.next_seg] = b
        self.next_seg += 1
        self.next_addr += alloc
        self.reserved += alloc
        self.max_reserved = max(self.max_reserved, self.reserved)
        return b

    def release_cached(self):
        for small in (True, False):
            keep = []
            for e in self.pools[small]:
                b = e[3]
                if b.prev is None and b.next is None:
                    self.reserved -= b.size
                    del self.segments[b.seg]
                else:
                    keep.append(e)
            self.pools[small] = keep

    def malloc(self, nbytes):
        size = self.round(nbytes)
        small = size <= SMALL_SIZE
        p = self.pools[small]
        i = bisect.bisect_left(p, (size, -1))
        if i < len(p):
            b = p.pop(i)[3]
        else:
            b = self._segment(size, small)
            if b is None:
                self.release_cached()
                b = self._segment(size, small)
                if b is None:
                    raise OOM(nbytes)
        rest = b.size - size
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            r = Block(b.seg, b.addr + size, rest, small)
            r.prev, r.next = b, b.next
            if b.next:
                b.next.prev = r
            b.next = r
            b.size = size
            self._insert(r)
        b.free = False
        self.allocated += b.size
        self.max_allocated = max(self.max_allocated, self.allocated)
        return b

    def free(self, b):
        assert not b.free
        b.free = True
        self.allocated -= b.size
        for n in (b.prev, b.next):
            if n is not None and n.free:
                self._remove(n)
                if n is b.prev:
                    n.size += b.size
                    n.next = b.next
                    if b.next:
                        b.next.prev = n
                    b = n
                else:
                    b.size += n.size
                    b.next = n.next
                    if n.next:
                        n.next.prev = b
        self._insert(b)


# ---------------------------------------------------------------- the timeline from fp8sim's model

def params_of(cfg):
    """Parameter tensors in construction order (transformers' LlamaForCausalLM): the embedding,
    per layer q, k, v, o, gate, up, down and the two norms, the final norm, the LM head."""
    H, F, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or H // nh
    kvh = cfg.get("num_key_value_heads") or nh
    Q, KV = nh * hd, kvh * hd
    layer = [("q", H * Q, True), ("k", H * KV, True), ("v", H * KV, True), ("o", Q * H, True),
             ("gate", H * F, True), ("up", H * F, True), ("down", F * H, True), ("norm1", H, False),
             ("norm2", H, False)]
    out = [("embed", V * H, False, -1)]
    for l in range(L):
        out += [(n, e, lin, l) for n, e, lin in layer]
    out += [("final_norm", H, False, L)]
    if not cfg.get("tie_word_embeddings"):
        out += [("lm_head", V * H, True, L)]
    return out


def fp8sim_footprint(exe, cfg, framework, batch, seq, compiled, ckpt):
    with tempfile.TemporaryDirectory() as d:
        mp, op = os.path.join(d, "m.json"), os.path.join(d, "o.json")
        with open(mp, "w") as f:
            json.dump(cfg, f)
        cmd = [exe, "memory", "--model", mp, "--framework", framework, "--batch", str(batch), "--seq", str(seq),
               "--json", op]
        if compiled:
            cmd.append("--compile")
        if ckpt:
            cmd.append("--checkpointing")
        if framework == "torch":
            cmd += ["--zero", "0"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(op) as f:
            return json.load(f)


class Timeline:
    """Allocation events of training steps built from one fp8sim footprint document."""

    def __init__(self, doc, cfg, framework, compiled, ckpt, loop_holds_logits):
        self.doc, self.cfg = doc, cfg
        comp = {c["name"]: c for c in doc["components"]}
        self.params = params_of(cfg)
        n = sum(p[1] for p in self.params)
        per = lambda name: comp[name]["bytes"] / n if name in comp else 0.0  # noqa: E731
        self.master_pp = per("master_weights")
        self.grad_pp = per("gradients")
        self.opt_pp = (per("optimizer_states") + per("optimizer_metadata"))
        self.workspace = comp.get("gemm_workspace", {"bytes": 0})["bytes"]
        # The torch reference's working_weights are autocast's casts too (made in forward, kept
        # for backward).
        copies = comp.get("autocast_weight_copies", comp.get("working_weights", {"bytes": 0}))["bytes"]
        lin = sum(p[1] for p in self.params if p[2] and p[0] != "lm_head")
        head = sum(p[1] for p in self.params if p[0] == "lm_head") or (cfg["vocab_size"] * cfg["hidden_size"])
        self.head_copy = head * 2 if copies >= head * 2 else 0
        self.layer_copies = (copies - self.head_copy) > 0
        L = cfg["num_hidden_layers"]
        self.layer_saved = [(c["name"], c["bytes"] // L) for c in doc["components"]
                            if c["group"] == "activations" and c["name"].startswith("layers.")
                            and c["name"] != "layers.causal_mask"]
        # One storage for all layers (eager attention's 4-D mask under checkpointing).
        self.mask = [c["bytes"] for c in doc["components"] if c["name"] == "layers.causal_mask"]
        self.recomputed = []  # checkpointing: one layer's saved tensors (set by the caller)
        self.outside_saved = [(c["name"], c["bytes"]) for c in doc["components"]
                              if c["group"] == "activations" and c["name"].startswith("outside.")]
        self.fwd_extra = []
        if framework == "torch" and not loop_holds_logits:
            # A loop that lets the logits go once the loss is formed: a forward transient.
            self.fwd_extra = [x for x in self.outside_saved if x[0] == "outside.logits"]
            self.outside_saved = [x for x in self.outside_saved if x[0] != "outside.logits"]
        self.phases = {p["name"]: p["temporaries"] for p in doc["phases"]}
        self.set_to_none = not doc.get("grads_persist", False)
        self.foreach_sqrt = framework == "torch"
        self.ckpt = ckpt
        self.L = L

    def temps(self, phase, skip=()):
        return [(t["name"], t["bytes"]) for t in self.phases.get(phase, []) if t["name"] not in skip]


def run_steps(tl, a, state, nsteps):
    """Replays nsteps training steps on allocator a; state carries what lives between steps."""
    L = tl.L
    for _ in range(nsteps):
        # zero_grad(set_to_none=True) frees every gradient before forward.
        if tl.set_to_none:
            for b in state["grads"].values():
                a.free(b)
            state["grads"] = {}
        saved = {}  # layer -> [blocks]
        copies = {}
        if "workspace" not in state and tl.workspace:
            state["workspace"] = a.malloc(tl.workspace)
        # Forward, layer by layer: the layer's autocast weight copies, then its saved tensors in
        # the profile's order.
        mask = [a.malloc(sz) for sz in tl.mask]
        for l in range(L):
            copies[l] = [a.malloc(e * 2) for (n, e, lin, pl) in tl.params if pl == l and lin] if tl.layer_copies else []
            saved[l] = [a.malloc(sz) for name, sz in tl.layer_saved]
        head = a.malloc(tl.head_copy) if tl.head_copy else None
        outside = [a.malloc(sz) for name, sz in tl.outside_saved]
        # The loss: forward transients (logits and their upcast) alive beside the saved loss
        # buffer, freed once the loss is formed.
        fwd_t = [a.malloc(sz) for name, sz in tl.fwd_extra + tl.temps("forward_loss")]
        for b in reversed(fwd_t):
            a.free(b)
        # Loss backward.
        loss_t = [a.malloc(sz) for name, sz in tl.temps("backward_loss")]
        for b in reversed(loss_t):
            a.free(b)
        for b in reversed(outside):
            a.free(b)
        # The LM head's and final norm's gradients.
        def grad(i):
            if i not in state["grads"]:
                state["grads"][i] = a.malloc(int(tl.params[i][1] * tl.grad_pp))
        for i, p in enumerate(tl.params):
            if p[3] == L:
                grad(i)
        if head is not None:
            a.free(head)
        work = tl.temps("backward_layers", skip=("layer0_weight_copies", "layer0_activations", "layer0_input"))
        for l in reversed(range(L)):
            recomputed = []
            if tl.ckpt:
                rc = [a.malloc(e * 2) for (n, e, lin, pl) in tl.params if pl == l and lin] if tl.recompute_copies else []
                recomputed = rc + [a.malloc(sz) for name, sz in tl.recomputed]
            w = [a.malloc(sz) for name, sz in work]
            for i in reversed(range(len(tl.params))):
                if tl.params[i][3] == l:
                    grad(i)
            for b in reversed(w):
                a.free(b)
            for b in reversed(recomputed):
                a.free(b)
            for b in reversed(saved[l]):
                a.free(b)
            for b in reversed(copies[l]):
                a.free(b)
        grad(0)  # the embedding's gradient comes last
        for b in mask:
            a.free(b)
        # Optimizer: states created on the first step, in parameter order.
        if not state["opt"]:
            for i, p in enumerate(tl.params):
                state["opt"][i] = [a.malloc(int(p[1] * tl.opt_pp / 2)), a.malloc(int(p[1] * tl.opt_pp / 2))]
        if tl.foreach_sqrt:
            tmp = [a.malloc(p[1] * 4) for p in tl.params]
            for b in reversed(tmp):
                a.free(b)


def simulate_file(exe, d, cap=None):
    """Per run of the file: (batch, predicted reserved after the measured step, predicted allocated peak)."""
    fw = d["framework"]
    if fw == "hf" and d.get("versions", {}).get("transformers", "").startswith("4."):
        fw = "hf-4.45"
    cmd = d.get("command", "")
    warm = int(cmd.split("--warmup")[1].split()[0]) if "--warmup" in cmd else 2
    steps = int(cmd.split("--steps")[1].split()[0]) if "--steps" in cmd else 0
    prof = "--profile" in cmd
    a = Allocator(cap)
    state = {"grads": {}, "opt": {}}
    out = []
    first = True
    for r in d["runs"]:
        tl, doc = timeline_for(exe, d, fw, r["batch"])
        if first:
            state["params"] = [a.malloc(int(p[1] * tl.master_pp)) for p in tl.params]
            first = False
        run_steps(tl, a, state, warm)
        a.max_allocated = a.allocated
        run_steps(tl, a, state, 1)
        out.append((r["batch"], a.reserved, a.max_allocated, doc["peak_gib"]))
        run_steps(tl, a, state, steps + (1 if prof else 0))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fp8sim", default="build-gpu/fp8sim")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    files = []
    for p in args.paths:
        files += sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
    rows = []
    for f in files:
        d = json.load(open(f))
        if d.get("format") != "fp8sim-step-measurement":
            continue
        if d["framework"] == "torch" and not d["compile"] and "loop_holds_logits" not in d:
            continue  # listed, not judged, by fp8sim memory --validate
        try:
            sim = simulate_file(args.fp8sim, d)
        except subprocess.CalledProcessError:
            continue
        for r, (b, res, alloc, peak) in zip(d["runs"], sim):
            m = r["measured_bytes"]
            key = f"{d['framework']}{' C' if d['compile'] else ''}{' K' if d['checkpointing'] else ''}"
            rows.append((os.path.basename(f), key, b, m["peak"] / GIB, m["reserved"] / GIB, peak, alloc / GIB, res / GIB))
    print(f"{'file':44} {'b':>3} {'meas pk':>8} {'meas res':>8} {'pred pk':>8} {'sim pk':>8} {'sim res':>8} {'err':>7} {'pk-only':>7}")
    for f, k, b, mp, mr, pp, sp, sr in rows:
        print(f"{f[:44]:44} {b:>3} {mp:8.2f} {mr:8.2f} {pp:8.2f} {sp:8.2f} {sr:8.2f} {sr / mr - 1:+7.1%} {pp / mr - 1:+7.1%}")
    summarise(rows)


def summarise(rows):
    """Per profile: median and worst |error| of the allocator model's reserved; beside it two
    baselines: the allocated peak taken as reserved, and the peak times a constant k fitted on the
    other half of the files (files alternate between the halves in name order)."""
    files = sorted({r[0] for r in rows})
    half = {f: i % 2 for i, f in enumerate(files)}
    ks = {}
    for h in (0, 1):
        ks[h] = statistics.median(mr / pp for f, k, b, mp, mr, pp, sp, sr in rows if half[f] != h)
    def stats(sel):
        sim = [abs(sr / mr - 1) for f, k, b, mp, mr, pp, sp, sr in sel]
        pk = [abs(pp / mr - 1) for f, k, b, mp, mr, pp, sp, sr in sel]
        kk = [abs(pp * ks[half[f]] / mr - 1) for f, k, b, mp, mr, pp, sp, sr in sel]
        return (f"{len(sel):4} | {statistics.median(sim):6.1%} {max(sim):6.1%} {sum(e <= 0.10 for e in sim):4} | "
                f"{statistics.median(pk):6.1%} {max(pk):6.1%} {sum(e <= 0.10 for e in pk):4} | "
                f"{statistics.median(kk):6.1%} {max(kk):6.1%} {sum(e <= 0.10 for e in kk):4}")
    print(f"\nconstant k fitted on the other half of the files: {ks[0]:.3f} / {ks[1]:.3f}")
    print(f"{'profile':22} {'runs':>4} | allocator model: median worst <=10% | peak as reserved | k x peak (held out)")
    for key in sorted({r[1] for r in rows}):
        print(f"{key:22} {stats([r for r in rows if r[1] == key])}")
    print(f"{'all':22} {stats(rows)}")


def timeline_for(exe, d, fw, batch):
    """The timeline of micro-batch `batch` of measurement `d` under profile `fw`, and the footprint
    document it comes from. Under checkpointing the recomputed layer's saved tensors come from the
    same profile without checkpointing, and an eager layer makes its autocast weight copies again."""
    doc = fp8sim_footprint(exe, d["model_config"], fw, batch, d["seq"], d["compile"], d["checkpointing"])
    tl = Timeline(doc, d["model_config"], fw, d["compile"], d["checkpointing"], d.get("loop_holds_logits"))
    tl.recompute_copies = False
    if d["checkpointing"]:
        plain = fp8sim_footprint(exe, d["model_config"], fw, batch, d["seq"], d["compile"], False)
        L = d["model_config"]["num_hidden_layers"]
        tl.recomputed = [(c["name"], c["bytes"] // L) for c in plain["components"]
                         if c["group"] == "activations" and c["name"].startswith("layers.")]
        tl.recompute_copies = not d["compile"] and fw != "coat"
    return tl, doc


def max_batch_under_cap(exe, d, lo, hi):
    """The largest micro-batch in [lo, hi] whose step runs under the file's cap, as
    measure_step.py's search tries one: from the state its measured runs leave (parameters and
    optimizer states allocated), gradients freed and the cache emptied before each try; also the
    largest whose allocated peak alone fits."""
    import copy
    fw = d["framework"]
    if fw == "hf" and d.get("versions", {}).get("transformers", "").startswith("4."):
        fw = "hf-4.45"
    cap = int(d["max_batch"]["cap_gib"] * GIB)
    a = Allocator()
    state = {"grads": {}, "opt": {}}
    tl, _ = timeline_for(exe, d, fw, d["runs"][0]["batch"])
    state["params"] = [a.malloc(int(p[1] * tl.master_pp)) for p in tl.params]
    run_steps(tl, a, state, 3)
    for b in state["grads"].values():
        a.free(b)
    state["grads"] = {}
    a.release_cached()
    fits_res, fits_alloc = {}, {}
    for b in range(lo, hi + 1):
        tl, doc = timeline_for(exe, d, fw, b)
        a2, s2 = copy.deepcopy((a, state))
        a2.cap = cap
        try:
            run_steps(tl, a2, s2, 1)
            fits_res[b] = True
        except OOM:
            fits_res[b] = False
        fits_alloc[b] = doc["peak_gib"] * GIB <= cap
    best = lambda fits: max([b for b in fits if fits[b]], default=0)  # noqa: E731
    return best(fits_res), best(fits_alloc), fits_res


def max_batch_report(exe, paths):
    for p in paths:
        for f in sorted(glob.glob(os.path.join(p, "*__maxbatch.json"))):
            d = json.load(open(f))
            m = d["max_batch"]["max_batch"]
            sim, alloc, fits = max_batch_under_cap(exe, d, max(1, m - 3), m + 5)
            print(f"{os.path.basename(f):40} measured {m:3}  allocator model {sim:3}  allocated-peak model {alloc:3}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--max-batch"]:
        sys.exit(max_batch_report("build-gpu/fp8sim", sys.argv[2:]))
    sys.exit(main())
