#!/usr/bin/env python3
"""Run a matrix of scripts/measure_step.py measurements on the GPU machine, within a deadline.

Each entry is one measure_step.py process (its own CUDA context, so a failure or an OOM touches
nothing else), or for the multi-gpu plan one torchrun of N processes (--dist ddp|fsdp2), alone on
the machine. Memory-only entries run --jobs at a time (the allocator's numbers are per process);
timed entries (--steps > 0, --max-batch) and COAT's run alone, after the memory entries, so that nothing shares the GPU
while they are timed. Entries run in the order listed (the most important first); when the deadline
comes, no new entry starts and every finished one is kept. Writes DIR/NAME.json per entry, DIR/log.txt
and DIR/index.json (every entry: command, status, seconds).

Usage:
  python3 scripts/measure_matrix.py --plan memory --out DIR [--jobs 4] [--deadline 540]
  python3 scripts/measure_matrix.py --plan speed --out DIR --coat fp8_coat-1.0.11.tar.gz
  python3 scripts/measure_matrix.py --plan memory --list     # print the entries and exit
  python3 scripts/measure_matrix.py --plan maxbatch-compiled --check-at 1b-gqa=48 --out DIR
  python3 scripts/measure_matrix.py --plan multi-gpu --gpus 2,4 --out DIR   # torchrun, every GPU per entry
"""
import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The configurations: (name, measure_step.py model arguments, micro-batches, seq).
CONFIGS = {
    # Llama-2-7B layers (MHA, 32k vocabulary), 4 of 32
    "l2-7b-L4": (["--model", "llama2-7b", "--layers", "4"], [1, 2], 2048),
    # Llama-3-8B layers (GQA 32/8, 128k vocabulary), 4 of 32
    "l3-8b-L4": (["--model", "llama3-8b", "--layers", "4"], [1, 2], 2048),
    # a TinyLlama-sized model (GQA 32/4) and the same with full multi-head attention
    "1b-gqa": (["--model", "llama2-7b", "--hidden", "2048", "--ffn", "5632", "--heads", "32", "--kv-heads", "4",
                "--layers", "8"], [2, 4], 2048),
    "1b-mha": (["--model", "llama2-7b", "--hidden", "2048", "--ffn", "5632", "--heads", "32", "--kv-heads", "32",
                "--layers", "8"], [2, 4], 2048),
    # long context
    "l2-7b-L4-s4096": (["--model", "llama2-7b", "--layers", "4"], [1], 4096),
    # small hidden, large vocabulary (the loss dominates)
    "0.3b-v152k": (["--model", "llama2-7b", "--hidden", "1024", "--ffn", "2816", "--heads", "16", "--kv-heads", "16",
                    "--layers", "8", "--vocab", "151936"], [4, 8], 2048),
    # ~0.84 B parameters, GQA 16/4, 16 layers: the end-to-end speed configuration
    "0.8b-gqa": (["--model", "llama2-7b", "--hidden", "2048", "--ffn", "5632", "--heads", "32", "--kv-heads", "4",
                  "--layers", "16"], [4, 8], 2048),
}
MEMORY_CONFIGS = ["l2-7b-L4", "l3-8b-L4", "1b-gqa", "1b-mha", "l2-7b-L4-s4096", "0.3b-v152k"]


def usage_error(msg):
    print(f"measure_matrix.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_check_at(text):
    """'CFG=B,CFG=B,...' -> {CFG: B}: the micro-batch fp8sim predicts as the largest under the cap,
    per configuration of the maxbatch-compiled plan."""
    out = {}
    for item in filter(None, text.split(",")):
        cfg, sep, b = item.partition("=")
        if not sep or cfg not in CONFIGS or not b.isdigit() or int(b) < 1:
            usage_error(f"--check-at wants CONFIG=B (B >= 1, CONFIG one of {', '.join(CONFIGS)}), not '{item}'")
        out[cfg] = int(b)
    return out


def entries(plan, coat, check_at=None, gpus=(2,)):
    out = []

    def add(cfg, fw, compile_=False, ckpt=False, steps=0, profile=False, max_batch=None, batches=None, extra=(),
            t445=False, tag="", dist=None, nproc=0):
        margs, bs, seq = CONFIGS[cfg]
        name = f"{fw}{'-compiled' if compile_ else ''}{'-ckpt' if ckpt else ''}__{f'{dist}-x{nproc}__' if dist else ''}{cfg}"
        if max_batch:
            name += "__maxbatch"
        name += tag
        a = ["--framework", fw, *margs, "--seq", str(seq), "--name", cfg,
             "--batch", *[str(b) for b in (batches or bs)]]
        if compile_:
            a.append("--compile")
        if ckpt:
            a.append("--checkpointing")
        if steps:
            a += ["--steps", str(steps), "--warmup", "3"]
        if profile:
            a.append("--profile")
        if max_batch:
            a += ["--max-batch", str(max_batch)]
        if fw == "coat":
            a += ["--coat", coat]
        if dist:
            a += ["--dist", dist]
        a += list(extra)
        # COAT's Triton kernels autotune per shape in each process, and a torchrun takes every GPU:
        # those entries run alone
        out.append({"name": name, "args": a, "timed": bool(steps) or bool(max_batch) or fw == "coat" or bool(nproc),
                    "t445": fw == "coat" or t445, "nproc": nproc})

    if plan == "memory":
        # most important first: what a user runs, then the switches
        for fw, comp, ckpt in [("hf", False, False), ("hf", False, True), ("hf", True, False), ("torch", False, False),
                               ("hf-eager", False, False), ("hf", True, True), ("torch", True, False),
                               ("hf-eager", False, True), ("hf-eager", True, False), ("hf-eager", True, True)]:
            for c in MEMORY_CONFIGS:
                add(c, fw, comp, ckpt)
    elif plan == "maxbatch":
        for c in ["l2-7b-L4", "1b-gqa", "0.3b-v152k"]:
            add(c, "hf", max_batch=80, batches=[1])
            add(c, "hf", ckpt=True, max_batch=80, batches=[1])
            if coat:  # memory does not depend on the autotuner's choice; each new shape would autotune
                add(c, "coat", max_batch=80, batches=[1], extra=["--coat-first-config"])
    elif plan == "maxbatch-compiled":
        # hf under torch.compile at the maxbatch plan's configurations: a search would compile the
        # graph again for every micro-batch it tries, so only fp8sim's answer B and B+1 are tried
        # (--check-at CONFIG=B, B from `fp8sim memory --model CFG.json --framework hf --compile
        # --gpu-mem-gib 80`); the uncapped measured run at B compiles the graph the check reuses
        if not check_at:
            usage_error("plan maxbatch-compiled needs --check-at CONFIG=B,...")
        for c, b in check_at.items():
            add(c, "hf", compile_=True, max_batch=80, batches=[b], extra=["--check-batches", f"{b},{b + 1}"])
    elif plan == "snapshot":
        # the blocks alive at the peak, where the profiles miss it: compiled + checkpointed
        # backward, the torch loop on a 128k vocabulary, the compiled backward's end
        add("1b-gqa", "hf", True, True, extra=["--snapshot"], tag="__snapshot")
        add("l2-7b-L4", "hf", True, True, batches=[1], extra=["--snapshot"], tag="__snapshot")
        add("l3-8b-L4", "torch", extra=["--snapshot"], tag="__snapshot")
        add("l3-8b-L4", "hf", True, batches=[1], extra=["--snapshot"], tag="__snapshot")
    elif plan == "coat":
        # one micro-batch per entry (each new shape autotunes again); the smallest first
        for ckpt in (False, True):
            for i in range(2):
                for c in MEMORY_CONFIGS:
                    bs = CONFIGS[c][1]
                    if i < len(bs):
                        add(c, "coat", ckpt=ckpt, batches=[bs[i]], tag=f"__b{bs[i]}")
        for c in MEMORY_CONFIGS:
            add(c, "hf", t445=True, tag="__t445")  # the BF16 baseline under COAT's transformers
    elif plan == "speed-core":  # what one device call can afford: COAT, hf compiled, torch eager
        for c in ["0.8b-gqa"]:
            if coat:
                add(c, "coat", steps=6, profile=True)
            add(c, "hf", True, steps=6, profile=True)
            add(c, "torch", steps=6, profile=True)
    elif plan == "speed-frameworks":
        # the eager profiles' validation configuration first (Llama-3-8B layers: head_dim 128, GQA
        # 32/8, 128k vocabulary), then which kernels the compiled step runs, then COAT's step
        for fw, comp in [("hf", False), ("torch", False), ("hf", True)]:
            add("l3-8b-L4", fw, comp, steps=6, profile=True)
        add("0.8b-gqa", "hf", True, steps=6, profile=True, tag="__kernels")
        if coat:
            add("0.8b-gqa", "coat", steps=6, profile=True)
        add("l3-8b-L4", "torchao-float8", True, steps=6, profile=True)
    elif plan == "speed-coat":
        # COAT's own step at configurations its speed profile was not built from (one micro-batch
        # per entry: each new shape autotunes COAT's Triton kernels again), smallest first
        if not coat:
            raise SystemExit("measure_matrix.py: error: plan speed-coat needs --coat")
        for c, b in [("1b-mha", 2), ("l2-7b-L4", 1), ("0.3b-v152k", 4), ("1b-gqa", 4), ("0.8b-gqa", 8), ("l2-7b-L4", 2)]:
            add(c, "coat", steps=6, profile=True, batches=[b], tag=f"__b{b}")
    elif plan == "speed-torchao":
        # torchao's float8 training and its BF16 baseline (the same model compiled), each config's
        # two in the same call so that their ratio compares one machine's steps
        for c in ["1b-mha", "l2-7b-L4", "0.8b-gqa", "l3-8b-L4", "0.3b-v152k", "1b-gqa", "l2-7b-L4-s4096"]:
            add(c, "torchao-float8", True, steps=6, profile=True)
            add(c, "hf", True, steps=6, profile=True)
    elif plan == "speed":
        # COAT and its BF16 baseline (transformers 4.45.2) first, then the current frameworks
        for c in ["0.8b-gqa", "l3-8b-L4"]:
            if coat:
                add(c, "coat", steps=6, profile=True)
                add(c, "hf", steps=6, profile=True, t445=True, tag="__t445")
            add(c, "hf", steps=6, profile=True)
            add(c, "torchao-float8", True, steps=6, profile=True)
            add(c, "hf", True, steps=6, profile=True)
            add(c, "torch", steps=6, profile=True)
            add(c, "torch", True, steps=6, profile=True)
    elif plan == "multi-gpu":
        # DDP and FSDP2 (bf16 all-gathers) of the torch reference, which `fp8sim memory --gpus N
        # --zero 0|3` models, then of transformers' Llama; checkpointing; FSDP2 gathering fp32
        for fw, ckpt, dist, extra in [("torch", False, "fsdp2", ()), ("torch", False, "ddp", ()),
                                      ("hf", False, "fsdp2", ()), ("torch", True, "fsdp2", ()),
                                      ("hf", True, "fsdp2", ()), ("hf", False, "ddp", ()),
                                      ("torch", False, "fsdp2", ("--fsdp-param-dtype", "fp32"))]:
            for c in ["1b-gqa", "l2-7b-L4", "0.3b-v152k"]:
                for n in gpus:
                    add(c, fw, ckpt=ckpt, dist=dist, nproc=n, batches=CONFIGS[c][1][:1], extra=extra,
                        tag="__fp32gather" if extra else "")
        # rank 0's allocator history at its peak, by allocating line: where a prediction misses
        for fw in ("torch", "hf"):
            add("1b-gqa", fw, dist="fsdp2", nproc=gpus[0], batches=CONFIGS["1b-gqa"][1][:1], extra=["--snapshot"],
                tag="__snapshot")
    else:
        raise SystemExit(f"measure_matrix.py: error: unknown plan '{plan}'")
    return out


def parse_gpus(text):
    """'2,4' -> [2, 4]: the data-parallel sizes of the multi-gpu plan (each >= 2)."""
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        out = []
    if not out or any(n < 2 for n in out):
        usage_error(f"--gpus wants data-parallel sizes >= 2 separated by commas (e.g. 2,4), not '{text}'")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", required=True, choices=["memory", "maxbatch", "maxbatch-compiled", "snapshot", "coat",
                                                   "speed", "speed-core", "speed-frameworks", "speed-coat",
                                                   "speed-torchao", "multi-gpu"])
    ap.add_argument("--out", help="output directory")
    ap.add_argument("--jobs", type=int, default=4, help="memory-only entries at once (default 4)")
    ap.add_argument("--deadline", type=float, default=540, help="seconds after which no entry starts")
    ap.add_argument("--per-entry", type=float, default=300, help="seconds one entry may run")
    ap.add_argument("--coat", default="", help="fp8-coat sdist for the coat entries")
    ap.add_argument("--only", default="", help="comma-separated substrings: run entries whose name has one")
    ap.add_argument("--check-at", default="", metavar="CFG=B,...",
                    help="plan maxbatch-compiled: per configuration, fp8sim's largest micro-batch B at 80 GiB "
                         "(B and B+1 are tried)")
    ap.add_argument("--gpus", default="2", metavar="N,...",
                    help="plan multi-gpu: the data-parallel sizes, each run with torchrun --nproc_per_node N "
                         "(default 2)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    todo = entries(args.plan, args.coat, parse_check_at(args.check_at), parse_gpus(args.gpus))
    if args.only:
        keys = args.only.split(",")
        todo = [e for e in todo if any(k in e["name"] for k in keys)]
    if args.list:
        for e in todo:
            print(e["name"], " ".join(e["args"]))
        return
    if not args.out:
        raise SystemExit("measure_matrix.py: error: --out is required")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    log = open(os.path.join(args.out, "log.txt"), "a")
    index = []
    running = []
    py = sys.executable
    script = os.path.join(REPO, "scripts", "measure_step.py")

    def start(e):
        outp = os.path.join(args.out, e["name"] + ".json")
        cmd = [py, script, *e["args"], "--out", outp]
        if e["nproc"]:
            cmd[1:1] = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={e['nproc']}"]
        errp = open(os.path.join(args.out, e["name"] + ".log"), "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if e["t445"]:  # COAT's code needs transformers 4.45.2: its site directory goes first
            site = os.environ.get("FP8SIM_SITE_T445", "")
            if not site:
                raise SystemExit("measure_matrix.py: error: COAT entries need FP8SIM_SITE_T445 "
                                 "(a directory with transformers 4.45.2 installed)")
            env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
        p = subprocess.Popen(cmd, stdout=errp, stderr=subprocess.STDOUT, env=env)
        return {"e": e, "p": p, "t": time.time(), "f": errp, "cmd": cmd}

    def finish(r, status):
        r["f"].close()
        secs = round(time.time() - r["t"], 1)
        index.append({"name": r["e"]["name"], "status": status, "seconds": secs,
                      "command": (f"torchrun --standalone --nproc_per_node {r['e']['nproc']} " if r["e"]["nproc"]
                                  else "python3 ") + "scripts/measure_step.py " + " ".join(r["e"]["args"])})
        tail = open(os.path.join(args.out, r["e"]["name"] + ".log")).read().strip().splitlines()[-2:]
        msg = f"[{time.time() - t0:6.0f}s] {r['e']['name']}: {status} ({secs}s) {' | '.join(tail)}"
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    def stop(p):
        """Ends an entry: SIGTERM first, which torchrun forwards to its workers (they run in
        sessions of their own, out of reach of a kill of the launcher), then SIGKILL after 30 s."""
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def reap(block):
        while running:
            for r in list(running):
                rc = r["p"].poll()
                if rc is None and time.time() - r["t"] > args.per_entry:
                    stop(r["p"])
                    rc = "timeout"
                if rc is not None:
                    running.remove(r)
                    finish(r, "ok" if rc == 0 else f"failed ({rc})")
            if not block or not running:
                return
            time.sleep(0.5)

    mem = [e for e in todo if not e["timed"]]
    timed = [e for e in todo if e["timed"]]
    for e in mem:
        while len(running) >= args.jobs:
            reap(False)
            time.sleep(0.5)
        if time.time() - t0 > args.deadline:
            index.append({"name": e["name"], "status": "not started (deadline)"})
            continue
        running.append(start(e))
    reap(True)
    for e in timed:
        if time.time() - t0 > args.deadline:
            index.append({"name": e["name"], "status": "not started (deadline)"})
            continue
        running.append(start(e))
        reap(True)
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump({"plan": args.plan, "seconds": round(time.time() - t0, 1), "entries": index}, f, indent=1)
    ok = sum(1 for i in index if i["status"] == "ok")
    print(f"measure_matrix.py: {ok}/{len(index)} entries ok in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
