"""The PyTorch peers of the 4- and 6-bit quantizers (scripts/bench_peers.py) compute the quantizer
fp8sim times: on the CPU their packed codes equal fp8sim's codes packed the way the GPU kernels
store them (a little-endian bit stream, sim/quant/packing.hpp)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import fp8sim

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_peers.py"


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("bench_peers", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pack(codes, bits):
    """One code per byte -> the packed bit stream (code i at bits [bits*i, bits*i + bits))."""
    c = codes.reshape(-1).astype(np.uint64)
    out = np.zeros((c.size * bits + 7) // 8, dtype=np.uint8)
    for i, v in enumerate(c):
        b = i * bits
        out[b >> 3] |= np.uint8((int(v) << (b & 7)) & 0xFF)
        if (b & 7) + bits > 8:
            out[(b >> 3) + 1] |= np.uint8(int(v) >> (8 - (b & 7)))
    return out


@pytest.mark.parametrize("spec,bits", [("nvfp4", 4), ("nvfp4-w", 4), ("mxfp4", 4), ("mxfp6-e2m3", 6),
                                       ("mxfp6-e3m2", 6)])
def test_lowbit_peer_gives_fp8sims_packed_codes(peers, spec, bits):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(32, 256, generator=g) * torch.exp(torch.randn(32, 256, generator=g) * 1.5)).to(torch.bfloat16)
    x[0, :16] = 0.0  # an all-zero group
    packed, _ = peers.make_quantizer(torch, spec)(x)
    r = fp8sim.quantize(x.float().numpy(), spec)
    want = pack(np.asarray(r.codes), bits)
    got = packed.numpy()
    assert got.shape == want.shape
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {want.size} bytes differ"
