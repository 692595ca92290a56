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


@pytest.mark.parametrize("variant", ["jit", "delayed"])
def test_cast_transpose_peer_writes_both_layouts_of_fp8sims_codes(peers, variant):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(48, 80, generator=g) * torch.exp(torch.randn(48, 80, generator=g))).to(torch.bfloat16)
    spec = "e4m3:tensor:delayed=1024,max" if variant == "delayed" else "e4m3:tensor"
    q, qt, third = peers.make_cast_transpose(torch, spec, variant)(x)
    codes = q.view(torch.uint8).numpy()
    assert np.array_equal(qt.view(torch.uint8).numpy(), codes.T)
    if variant == "jit":
        # The same codes as fp8sim's per-tensor quantizer (the scale computed just in time).
        want = np.asarray(fp8sim.quantize(x.float().numpy(), "e4m3:tensor").codes).reshape(codes.shape)
        assert np.array_equal(codes, want), f"{int((codes != want).sum())} of {want.size} codes differ"
    else:
        # The history's multiplier (64, as fp8sim bench sets it) and the amax for the history.
        want = np.asarray(fp8sim.cast((x.float() * 64.0).numpy(), "e4m3"))
        assert np.array_equal(codes, want.reshape(codes.shape))
        assert float(third) == float(x.float().abs().max())



def _tiny_plan(tmp_path):
    import json
    plan = {"warmup": 1, "reps": 2, "kernels": [
        {"key": "copy|1048576", "op": "copy", "label": "copy", "dtype": "bf16", "bytes": 1 << 20},
        {"key": "quantize|e4m3:g128|bf16|64x256", "op": "quantize", "label": "q", "dtype": "bf16",
         "spec": "e4m3:g128", "shape": [64, 256]},
    ]}
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(plan))
    return p


def test_script_marks_a_finished_file_complete(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "peers.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--plan", str(_tiny_plan(tmp_path)), "--json", str(out),
                        "--device", "cpu", "--no-compile"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["complete"] is True
    keys = {e["key"] for e in doc["entries"] if e["status"] == "ok"}
    assert {"copy|1048576", "quantize|e4m3:g128|bf16|64x256"} <= keys
    assert not (tmp_path / "peers.json.tmp").exists()


def test_a_run_stopped_early_keeps_what_it_timed_and_says_it_is_incomplete(peers, tmp_path, monkeypatch):
    """The file is written before the first entry (replacing an earlier run's) and after every
    entry: a run stopped at its second entry leaves the first, with "complete": false."""
    import json
    import sys

    out = tmp_path / "peers.json"
    out.write_text(json.dumps({"entries": [{"key": "stale", "status": "ok"}], "complete": True}))
    real = peers.run_entry

    def stop_at_quantize(torch_, b, item, *rest):
        if item["op"] == "quantize":
            raise KeyboardInterrupt  # what a time limit's signal looks like to the loop
        return real(torch_, b, item, *rest)

    monkeypatch.setattr(peers, "run_entry", stop_at_quantize)
    monkeypatch.setattr(sys, "argv", ["bench_peers.py", "--plan", str(_tiny_plan(tmp_path)), "--json", str(out),
                                      "--device", "cpu", "--no-compile"])
    with pytest.raises(KeyboardInterrupt):
        peers.main()
    doc = json.loads(out.read_text())
    assert doc["complete"] is False
    assert [e["key"] for e in doc["entries"]] == ["copy|1048576"]

    # Stopped before its first entry: an empty, incomplete file, not the earlier run's.
    out.write_text(json.dumps({"entries": [{"key": "stale", "status": "ok"}], "complete": True}))
    monkeypatch.setattr(peers, "run_entry", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        peers.main()
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["entries"] == []
