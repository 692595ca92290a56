"""scripts/measure_matrix.py's plans as listed (no GPU, no PyTorch needed): the multi-gpu plan's
entries run measure_step.py --dist under torchrun at each data-parallel size asked for."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "measure_matrix.py"


def listing(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args, "--list"], capture_output=True, text=True, timeout=60)


def test_multi_gpu_plan_lists_every_setting_at_every_size():
    r = listing("--plan", "multi-gpu", "--gpus", "2,4")
    assert r.returncode == 0, r.stderr
    entries = [line.split(" ", 1) for line in r.stdout.strip().splitlines()]
    names = [n for n, _ in entries]
    assert len(names) == len(set(names)), "entry names must be unique (one output file each)"
    for name, args in entries:
        assert "--dist" in args.split(), name
        n = 2 if "-x2__" in name else 4 if "-x4__" in name else None
        assert n is not None, name
        dist = args.split()[args.split().index("--dist") + 1]
        assert f"__{dist}-x{n}__" in name
    # each DDP / FSDP2 setting of each model at both sizes
    for n in (2, 4):
        assert f"torch__fsdp2-x{n}__1b-gqa" in names and f"hf-ckpt__fsdp2-x{n}__l2-7b-L4" in names
        assert f"torch__ddp-x{n}__0.3b-v152k" in names and f"hf__ddp-x{n}__1b-gqa" in names
    assert any(name.endswith("__fp32gather") for name in names)
    assert any("--snapshot" in args for _, args in entries)


def test_bad_sizes_are_one_line_usage_errors():
    for bad in ("1", "2,x", ""):
        r = listing("--plan", "multi-gpu", "--gpus", bad)
        assert r.returncode == 2, (bad, r.stderr)
        assert r.stderr.strip().count("\n") == 0 and "--gpus" in r.stderr
