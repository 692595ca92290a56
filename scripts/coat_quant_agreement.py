#!/usr/bin/env python3
"""fp8sim's COAT presets against COAT's own Triton quantizers, on the GPU machine.

COAT (PyPI `fp8-coat`, whose sdist the GPU bundle carries) quantizes activations with a Triton
kernel (`fp8_quantize`: 1x16 groups, bf16 scales) and weights with `fp8_division` (one per-tensor
scale). Both divide with Triton's `/` / tl.fdiv, which is PTX div.full.f32 rather than the IEEE
division. This script runs those kernels on real activations (every activation tensor of a
trace, bf16) and on synthetic tensors (normal, log-normal, heavy-tailed), runs
`fp8sim quantize --codes` on the same inputs with the COAT preset (coat-act, coat-w) and with the
IEEE-division spec the presets replaced, and counts equal codes and scales.

    python3 scripts/coat_quant_agreement.py --coat-sdist SDIST --fp8sim BIN --trace T.h5 --json OUT.json

Needs torch, triton, numpy (and h5py for --trace) on a CUDA machine. Nothing of COAT is part of
fp8sim: its sdist is unpacked into a temporary directory and its three Triton modules are loaded
from there without running the package's own __init__ (which imports its training stack).
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import types

import numpy as np

FORMATS = {  # COAT's fp8type name -> (fp8sim preset, the IEEE-division spec it replaced)
    "E4M3": ("coat-act", "e4m3:g16:scale=bf16:eps=1e-10"),
    "E5M2": ("e5m2:g16:scale=bf16:eps=1e-10:scale_div=fdiv:apply=fdiv", "e5m2:g16:scale=bf16:eps=1e-10"),
}
WEIGHT = ("coat-w", "e4m3:tensor:eps=1e-10")


def load_coat(sdist, work):
    """COAT's real_quantization modules from the sdist, as package `coat_rq`."""
    with tarfile.open(sdist) as t:
        t.extractall(work, filter="data")
    roots = [os.path.join(work, d) for d in os.listdir(work)]
    pkg = None
    for r in roots:
        cand = os.path.join(r, "coat", "activation", "real_quantization")
        if os.path.isdir(cand):
            pkg = cand
    if pkg is None:
        raise SystemExit(f"coat_quant_agreement: no coat/activation/real_quantization in {sdist}")
    mod = types.ModuleType("coat_rq")
    mod.__path__ = [pkg]
    sys.modules["coat_rq"] = mod
    q = importlib.import_module("coat_rq._quantize")
    d = importlib.import_module("coat_rq._division")
    return q.fp8_quantize, d.fp8_division


def trace_activations(path):
    import h5py
    out = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and "/activation/" in name and obj.dtype.kind == "f":
                a = np.asarray(obj, dtype=np.float32)
                a = a.reshape(-1, a.shape[-1])
                if a.shape[-1] % 16 == 0:
                    out.append((name, a))
        f.visititems(visit)
    return out


def synthetic(torch, rows, cols, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    n = torch.randn(rows, cols, generator=g)
    return [
        ("normal", n),
        ("log-normal sigma 2", torch.sign(torch.randn(rows, cols, generator=g)) * torch.exp(2.0 * n)),
        ("heavy tails (Student t, 2 dof)",
         torch.randn(rows, cols, generator=g) / torch.sqrt(torch.distributions.Chi2(2.0).sample((rows, cols)) / 2.0)),
        ("silu(normal) * normal", torch.nn.functional.silu(n) * torch.randn(rows, cols, generator=g)),
    ]


def fp8sim_codes(binary, spec, x_path, dtype, work):
    prefix = os.path.join(work, "q")
    cmd = [binary, "quantize", "--spec", spec, "--in", x_path, "--out", os.path.join(work, "y.npy"),
           "--codes", prefix, "--dtype", dtype]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return np.load(prefix + ".codes.npy"), np.load(prefix + ".scales.npy")


def compare(codes_a, scales_a, codes_b, scales_b):
    return {"codes": int(codes_a.size), "codes_equal": int((codes_a == codes_b).sum()),
            "scales": int(scales_a.size),
            "scales_equal": int((scales_a.view(np.uint32) == scales_b.view(np.uint32)).sum())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coat-sdist", required=True, help="the fp8-coat sdist (.tar.gz)")
    ap.add_argument("--fp8sim", required=True, help="the fp8sim binary (or the bundle's `run fp8sim` wrapper)")
    ap.add_argument("--trace", help="an fp8sim trace (.h5) whose activations are quantized too")
    ap.add_argument("--rows", type=int, default=2048, help="rows of each synthetic tensor (default 2048)")
    ap.add_argument("--cols", type=int, default=4096, help="columns of each synthetic tensor (default 4096)")
    ap.add_argument("--json", required=True, help="where to write the counts")
    args = ap.parse_args()

    import torch
    if not torch.cuda.is_available():
        raise SystemExit("coat_quant_agreement: needs a CUDA device")
    work = tempfile.mkdtemp(prefix="coat_agree_")
    fp8_quantize, fp8_division = load_coat(args.coat_sdist, work)

    tensors = []
    if args.trace:
        tensors += [("trace " + n, torch.from_numpy(a)) for n, a in trace_activations(args.trace)]
    tensors += synthetic(torch, args.rows, args.cols, 7)

    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "triton": importlib.import_module("triton").__version__, "sdist": os.path.basename(args.coat_sdist),
           "activations": {}, "weights": {}}
    for fmt, (preset, ieee) in FORMATS.items():
        tot = {"preset": preset, "ieee_spec": ieee, "tensors": 0, "codes": 0, "codes_equal": 0, "scales": 0,
               "scales_equal": 0, "ieee_codes_equal": 0, "ieee_scales_equal": 0, "worst": None,
               "scale_mismatches": []}
        for name, x in tensors:
            xb = x.to(torch.bfloat16)
            y, s = fp8_quantize(xb.cuda(), 16, fmt)
            torch.cuda.synchronize()
            codes = y.view(torch.uint8).cpu().numpy()
            scales = s.float().cpu().numpy()
            x_path = os.path.join(work, "x.npy")
            np.save(x_path, xb.view(torch.int16).numpy().view(np.uint16))
            c, sc = fp8sim_codes(args.fp8sim, preset, x_path, "bf16", work)
            ci, sci = fp8sim_codes(args.fp8sim, ieee, x_path, "bf16", work)
            m = compare(codes, scales, c, sc)
            mi = compare(codes, scales, ci, sci)
            if m["scales_equal"] != m["scales"] and len(tot["scale_mismatches"]) < 12:
                bad = np.argwhere(scales.view(np.uint32) != sc.reshape(scales.shape).view(np.uint32))
                xf = xb.float().numpy()
                for r, g in bad[: 12 - len(tot["scale_mismatches"])]:
                    tot["scale_mismatches"].append({
                        "tensor": name, "row": int(r), "group": int(g), "coat": float(scales[r, g]),
                        "fp8sim": float(sc.reshape(scales.shape)[r, g]),
                        "values": [float(v) for v in xf[r, 16 * g:16 * g + 16]]})
            tot["tensors"] += 1
            for k in ("codes", "codes_equal", "scales", "scales_equal"):
                tot[k] += m[k]
            tot["ieee_codes_equal"] += mi["codes_equal"]
            tot["ieee_scales_equal"] += mi["scales_equal"]
            frac = m["codes_equal"] / m["codes"]
            if tot["worst"] is None or frac < tot["worst"]["fraction"]:
                tot["worst"] = {"tensor": name, "fraction": frac}
        tot["codes_equal_fraction"] = tot["codes_equal"] / tot["codes"]
        tot["ieee_codes_equal_fraction"] = tot["ieee_codes_equal"] / tot["codes"]
        doc["activations"][fmt] = tot
        print(f"{fmt} activations, {tot['tensors']} tensors: {preset}: {tot['codes_equal']}/{tot['codes']} codes "
              f"({100 * tot['codes_equal_fraction']:.5f}%), {tot['scales_equal']}/{tot['scales']} scales equal; "
              f"{ieee}: {100 * tot['ieee_codes_equal_fraction']:.5f}% codes")

    preset, ieee = WEIGHT
    tot = {"preset": preset, "ieee_spec": ieee, "tensors": 0, "codes": 0, "codes_equal": 0, "scales_equal": 0,
           "ieee_codes_equal": 0}
    for name, x in synthetic(torch, args.rows, args.cols, 11):
        w = x.float().contiguous()
        y, s = fp8_division(w.cuda(), 16, "E4M3")
        torch.cuda.synchronize()
        codes = y.view(torch.uint8).cpu().numpy()
        scale = np.array([float(s)], dtype=np.float32)
        x_path = os.path.join(work, "w.npy")
        np.save(x_path, w.numpy())
        c, sc = fp8sim_codes(args.fp8sim, preset, x_path, "f32", work)
        ci, _ = fp8sim_codes(args.fp8sim, ieee, x_path, "f32", work)
        tot["tensors"] += 1
        tot["codes"] += int(codes.size)
        tot["codes_equal"] += int((codes == c).sum())
        tot["ieee_codes_equal"] += int((codes == ci).sum())
        tot["scales_equal"] += int(sc.reshape(-1).view(np.uint32)[0] == scale.view(np.uint32)[0])
    tot["codes_equal_fraction"] = tot["codes_equal"] / tot["codes"]
    doc["weights"]["E4M3"] = tot
    print(f"E4M3 fp32 weights, {tot['tensors']} tensors: {preset}: {tot['codes_equal']}/{tot['codes']} codes "
          f"({100 * tot['codes_equal_fraction']:.5f}%), {tot['scales_equal']}/{tot['tensors']} scales equal; "
          f"{ieee}: {100 * tot['ieee_codes_equal'] / tot['codes']:.5f}% codes")
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
