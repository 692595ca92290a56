"""Torch tensors in and out of quantize/dequantize/cast/decode (read in place, the same bits as
NumPy input, torch tensors back; a tensor off the host refused), and Ctrl-C during long work."""

import os
import signal
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import fp8sim

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("spec", ["e4m3:g128", "e4m3:g16:de=coat", "e5m2:tensor"])
def test_torch_input_gives_the_numpy_bits_as_torch_tensors(dtype, spec):
    t = (torch.randn(64, 256, generator=torch.Generator().manual_seed(3)) * 4).to(getattr(torch, dtype))
    if dtype == "bfloat16":
        a = t.view(torch.int16).numpy().view(np.uint16).view(ml_dtypes.bfloat16)
    else:
        a = t.numpy()
    r, ref = fp8sim.quantize(t, spec), fp8sim.quantize(a, spec)
    assert isinstance(r.codes, torch.Tensor) and isinstance(r.dequantized, torch.Tensor)
    assert tuple(r.codes.shape) == (64, 256) and r.codes.dtype == torch.uint8
    assert np.array_equal(r.codes.numpy(), ref.codes)
    assert np.array_equal(r.dequantized.numpy().view(np.uint32), ref.dequantized.view(np.uint32))
    assert np.array_equal(r.scales.numpy(), ref.scales)
    assert r.metrics == ref.metrics
    back = fp8sim.dequantize(r)
    assert isinstance(back, torch.Tensor)
    assert np.array_equal(back.numpy().view(np.uint32), ref.dequantized.view(np.uint32))
    codes = fp8sim.cast(t, "e5m2")
    assert isinstance(codes, torch.Tensor)
    assert np.array_equal(codes.numpy(), fp8sim.cast(a, "e5m2"))
    vals = fp8sim.decode(codes, "e5m2")
    assert isinstance(vals, torch.Tensor) and np.array_equal(vals.numpy(), fp8sim.decode(codes.numpy(), "e5m2"))


def test_torch_input_is_read_in_place_and_left_alone():
    t = torch.linspace(-3, 3, 4096)
    before = t.clone()
    fp8sim.quantize(t, "e4m3:g128")
    assert torch.equal(t, before)


def test_a_tensor_off_the_host_is_refused_in_one_line():
    t = torch.empty(16, 128, device="meta")
    for call in (lambda: fp8sim.quantize(t, "e4m3:g128"), lambda: fp8sim.cast(t), lambda: fp8sim.decode(t.to(torch.uint8))):
        with pytest.raises(TypeError, match="computes on the CPU; pass x.cpu()"):
            call()


def test_ctrl_c_stops_analyze_between_tensors_and_gives_the_handler_back():
    # 1,500 names of one 1M-element array: seconds of work, no extra memory.
    w = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    tensors = {f"model.layers.{i}.mlp.up_proj.weight": w for i in range(1500)}
    handler = signal.getsignal(signal.SIGINT)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            fp8sim.analyze(tensors, "coat", gemm=False)
    finally:
        timer.cancel()
    stopped = time.monotonic() - t0
    assert signal.getsignal(signal.SIGINT) is handler
    # The same work, uninterrupted, runs to the end and takes longer than the interrupted call.
    small = dict(list(tensors.items())[:40])
    t1 = time.monotonic()
    doc = fp8sim.analyze(small, "coat", gemm=False)
    per_tensor = (time.monotonic() - t1) / 40
    assert len(doc["tensors"]) == 40
    assert stopped < 0.5 + 1500 * per_tensor / 2, (stopped, per_tensor)
