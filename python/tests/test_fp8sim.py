"""The Python package against the command line: the same input through both gives the same bits.

The command is $FP8SIM_CLI (ctest passes the build's binary), else `fp8sim` on the PATH.
"""

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fp8sim

REPO = Path(__file__).resolve().parents[2]
HF = REPO / "tests" / "data" / "hf"


@pytest.fixture(scope="session")
def cli():
    exe = os.environ.get("FP8SIM_CLI") or shutil.which("fp8sim")
    assert exe, "no fp8sim command: set FP8SIM_CLI to a built fp8sim or put one on the PATH"
    return exe


def run(cli, *args):
    p = subprocess.run([cli, args[0], "--quiet", *map(str, args[1:])], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p


def tensor(dtype, shape=(96, 300), seed=0):
    """A heavy-tailed tensor with zeros, tiny values, a NaN and an Inf (the CLI's cases)."""
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):  # values beyond float16's range become Inf, on purpose
        return _tensor(rng, shape).astype(dtype)


def _tensor(rng, shape):
    x = (rng.standard_normal(shape) * np.exp(rng.standard_normal(shape) * 3)).astype(np.float32)
    x.flat[::97] = 0.0
    x.flat[5] = 1e-30
    x.flat[7] = np.nan
    x.flat[11] = -np.inf
    return x


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.tobytes() == b.tobytes()


SPECS = ["e4m3:g128", "e4m3:g128:de=coat", "coat-opt", "mxfp8", "e5m2:b128x128:scale=pow2", "coat-act",
         "deepseek-act", "e4m3:tensor:delayed=16,max", "e4m3:g32:round=stochastic:seed=7", "bf16:tensor",
         "fp16:tensor:scale=pow2", "e4m3:g128:de=robust"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("spec", SPECS)
def test_quantize_equals_the_command(cli, tmp_path, spec, dtype):
    x = tensor(dtype)
    np.save(tmp_path / "x.npy", x)
    run(cli, "quantize", "--spec", spec, "--in", tmp_path / "x.npy", "--out", tmp_path / "y.npy", "--json",
        tmp_path / "m.json", "--codes", tmp_path / "q")
    r = fp8sim.quantize(x, spec)
    same_bits(r.dequantized, np.load(tmp_path / "y.npy"))
    same_bits(r.codes, np.load(tmp_path / "q.codes.npy"))
    if r.scales is None:
        assert not (tmp_path / "q.scales.npy").exists()
    else:
        same_bits(r.scales, np.load(tmp_path / "q.scales.npy"))
    if r.k is not None:
        same_bits(r.k, np.load(tmp_path / "q.k.npy"))
        same_bits(r.c, np.load(tmp_path / "q.c.npy"))
    else:
        assert not (tmp_path / "q.k.npy").exists()
    doc = json.loads((tmp_path / "m.json").read_text())
    del doc["input"]
    assert r.metrics == doc
    assert str(r.spec) == doc["spec"]


def test_inputs_are_read_in_place_and_left_alone():
    x = tensor(np.float32)
    before = x.copy()
    r = fp8sim.quantize(x, "e4m3:g128")
    same_bits(x, before)
    # A strided view is copied to a contiguous array first; the bits are the same.
    big = np.zeros((96, 600), np.float32)
    big[:, ::2] = x
    same_bits(fp8sim.quantize(big[:, ::2], "e4m3:g128").codes, r.codes)
    # The bfloat16 and float16 paths read the 16-bit patterns without widening in Python.
    xb = x.astype(ml_dtypes.bfloat16)
    same_bits(fp8sim.quantize(xb, "e4m3:g128").codes, fp8sim.quantize(xb.astype(np.float32), "e4m3:g128").codes)


def test_shapes_are_kept(cli, tmp_path):
    for x in (np.float32(3.3), np.arange(10, dtype=np.float32), np.ones((2, 3, 5), np.float32)):
        r = fp8sim.quantize(x, "e4m3:g4")
        assert r.codes.shape == r.dequantized.shape == np.shape(x)
        assert fp8sim.cast(x).shape == fp8sim.dequantize(r).shape == np.shape(x)
        np.save(tmp_path / "x.npy", x)
        run(cli, "quantize", "--spec", "e4m3:g4", "--in", tmp_path / "x.npy", "--out", tmp_path / "y.npy")
        same_bits(r.dequantized, np.load(tmp_path / "y.npy"))


@pytest.mark.parametrize("spec", ["e4m3:g128", "e4m3:g128:de=coat", "mxfp8", "bf16:tensor", "e5m2:row"])
def test_dequantize_reproduces_the_result(spec):
    r = fp8sim.quantize(tensor(np.float32), spec)
    same_bits(fp8sim.dequantize(r), r.dequantized)
    same_bits(fp8sim.dequantize(r.codes, r.scales, spec, k=r.k, c=r.c), r.dequantized)


def test_dequantize_checks_its_inputs():
    r = fp8sim.quantize(tensor(np.float32), "e4m3:g128:de=coat")
    with pytest.raises(ValueError, match="needs k and c"):
        fp8sim.dequantize(r.codes, r.scales, r.spec)
    with pytest.raises(ValueError, match="scales holds"):
        fp8sim.dequantize(r.codes, r.scales[:, :1], r.spec, k=r.k, c=r.c)
    with pytest.raises(ValueError, match="must be uint8"):
        fp8sim.dequantize(r.codes.astype(np.uint16), r.scales, r.spec, k=r.k, c=r.c)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("dtype,flag", [(np.float32, "f32"), (np.float16, "fp16"), (ml_dtypes.bfloat16, "bf16")])
@pytest.mark.parametrize("extra", [[], ["--no-saturate"], ["--rounding", "stochastic", "--seed", "12345"]])
def test_cast_equals_the_command(cli, tmp_path, fmt, dtype, flag, extra):
    with np.errstate(over="ignore"):
        x = tensor(dtype, (4, 1000), seed=3) * np.asarray(300, dtype)
    x.tofile(tmp_path / "x.raw")
    run(cli, "cast", "--format", fmt, "--in", tmp_path / "x.raw", "--out", tmp_path / "y.u8", "--input-dtype", flag,
        *extra)
    codes = fp8sim.cast(x, fmt, saturate="--no-saturate" not in extra,
                        rounding="stochastic" if "stochastic" in extra else "nearest", seed=12345 if extra else 0)
    assert codes.shape == x.shape and codes.dtype == np.uint8
    assert codes.tobytes() == (tmp_path / "y.u8").read_bytes()


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_decode_equals_the_command(cli, tmp_path, fmt):
    codes = np.arange(256, dtype=np.uint8)
    codes.tofile(tmp_path / "c.u8")
    run(cli, "cast", "--format", fmt, "--decode", "--in", tmp_path / "c.u8", "--out", tmp_path / "v.f32")
    same_bits(fp8sim.decode(codes, fmt), np.fromfile(tmp_path / "v.f32", np.float32))
    # Decoding the codes of representable values gives the values back.
    v = fp8sim.decode(codes, fmt)
    finite = np.isfinite(v)
    same_bits(fp8sim.decode(fp8sim.cast(v[finite], fmt), fmt), v[finite])


@pytest.mark.parametrize("fmt,mltype", [("e2m1", ml_dtypes.float4_e2m1fn), ("e2m3", ml_dtypes.float6_e2m3fn),
                                        ("e3m2", ml_dtypes.float6_e3m2fn)])
def test_fp4_fp6_equal_ml_dtypes_except_nan(fmt, mltype):
    """The 4- and 6-bit casts give ml_dtypes' codes on every non-NaN input (ties, subnormals,
    saturation, signed zero); NaN, which neither format has, becomes +max here (as cuda_fp4.h /
    cuda_fp6.h do) where ml_dtypes gives a zero."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(20000).astype(np.float32) * 8,
                        rng.standard_normal(2000).astype(np.float32) * 0.05,
                        np.array([0.0, -0.0, 1e30, -1e30, np.inf, -np.inf], dtype=np.float32),
                        fp8sim.decode(np.arange(64, dtype=np.uint8) % (16 if fmt == "e2m1" else 64), fmt)])
    mid = np.sort(np.unique(np.abs(fp8sim.decode(np.arange(16 if fmt == "e2m1" else 64, dtype=np.uint8), fmt))))
    x = np.concatenate([x, ((mid[1:] + mid[:-1]) / 2).astype(np.float32)])  # every tie
    ours = fp8sim.cast(x, fmt)
    theirs = x.astype(mltype).view(np.uint8)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(fp8sim.decode(ours, fmt), theirs.view(mltype).astype(np.float32))
    nan = fp8sim.cast(np.array([np.nan], dtype=np.float32), fmt)
    assert fp8sim.decode(nan, fmt)[0] == {"e2m1": 6.0, "e2m3": 7.5, "e3m2": 28.0}[fmt]
    with pytest.raises(ValueError, match="always saturate"):
        fp8sim.cast(x, fmt, saturate=False)


ELEM = {"e2m1": (ml_dtypes.float4_e2m1fn, 2, 6.0), "e2m3": (ml_dtypes.float6_e2m3fn, 2, 7.5),
        "e3m2": (ml_dtypes.float6_e3m2fn, 4, 28.0)}


@pytest.mark.parametrize("fmt", ["e2m1", "e2m3", "e3m2"])
@pytest.mark.parametrize("mx", ["floor", "rceil"])
def test_mx_fp4_fp6_blocks_equal_an_independent_reference(fmt, mx):
    """OCP MX blocks of 32 with E8M0 scales, written here from the MX v1.0 definition with numpy and
    ml_dtypes' casts: floor: X = 2^(floor(log2 amax) - emax_elem); rceil: amax / fmax rounded up to
    a power of two (TE's and torchao's RCEIL); elements x / X in fp32, then a saturating
    round-to-nearest-even cast. Zero, subnormal and huge blocks included."""
    mltype, emax, fmax = ELEM[fmt]
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((40, 96)) * np.exp(rng.uniform(-12, 12, (40, 1)))).astype(np.float32)
    x[0] = 0.0
    x[1, :32] = np.float32(3e-39)  # fp32 subnormals
    x[2, 32:64] = np.float32(1e37)
    x[3, 5] = np.float32(-2.5e38)
    r = fp8sim.quantize(x, f"{fmt}:g32:scale=e8m0:mx={mx}")
    blocks = x.reshape(40, 3, 32).astype(np.float64)
    amax = np.abs(blocks).max(axis=2)
    with np.errstate(divide="ignore"):
        if mx == "floor":
            # the exponent of amax (-127 for zero and fp32 subnormals), minus the element's emax
            e = np.where(amax >= 2.0 ** -126, np.floor(np.log2(np.where(amax > 0, amax, 1))), -127) - emax
        else:
            t = (amax.astype(np.float32) / np.float32(fmax)).astype(np.float64)  # the fp32 quotient
            e = np.where(t > 0, np.ceil(np.log2(np.where(t > 0, t, 1))), -127)
    e = np.clip(e, -127, 127)
    scale = np.power(2.0, e)
    np.testing.assert_array_equal(r.scales, scale.astype(np.float32))
    q = (x.reshape(40, 3, 32) / scale[:, :, None].astype(np.float32)).astype(np.float32)
    codes = q.astype(mltype).view(np.uint8).reshape(40, 96)
    np.testing.assert_array_equal(r.codes, codes)
    deq = codes.view(mltype).astype(np.float32).reshape(40, 3, 32) * scale[:, :, None].astype(np.float32)
    np.testing.assert_array_equal(r.dequantized, deq.reshape(40, 96).astype(np.float32))


def nvfp4_reference(x, block):
    """NVFP4 as TransformerEngine's reference quantizer orders it, in numpy fp32 over ml_dtypes'
    casts: S_enc = 448*6/amax (FLT_MAX at most, 1 if 0), S_dec = 1/S_enc; per block
    d = min(amax_b/6 * S_enc, 448) -> E4M3; multiplier 1/(e4m3 * S_dec); elements x * multiplier
    -> saturating E2M1; dequantized code * (e4m3 * S_dec)."""
    f32, big = np.float32, np.finfo(np.float32).max
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = f32(f32(448.0 * 6.0) / f32(np.max(np.abs(x))))
    s_enc = f32(big) if not s_enc <= big else (f32(1) if s_enc == 0 else s_enc)
    s_dec = f32(f32(1) / s_enc)
    (r, c), (br, bc) = x.shape, block
    xb = x.reshape(r // br, br, c // bc, bc).transpose(0, 2, 1, 3)
    d = np.minimum(((np.abs(xb).max(axis=(2, 3)) / f32(6)).astype(f32) * s_enc).astype(f32), f32(448))
    dec = (d.astype(ml_dtypes.float8_e4m3fn).astype(f32) * s_dec).astype(f32)
    with np.errstate(divide="ignore"):
        mult = np.minimum((f32(1) / dec).astype(f32), f32(big))
    codes = (xb * mult[:, :, None, None]).astype(f32).astype(ml_dtypes.float4_e2m1fn)
    deq = (codes.astype(f32) * dec[:, :, None, None]).astype(f32)
    return codes.view(np.uint8).transpose(0, 2, 1, 3).reshape(r, c), dec, deq.transpose(0, 2, 1, 3).reshape(r, c)


@pytest.mark.parametrize("spec,block", [("nvfp4", (1, 16)), ("nvfp4-w", (16, 16))])
def test_nvfp4_equals_the_two_level_reference(spec, block):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 128)) * np.exp(rng.uniform(-8, 8, (64, 1)))).astype(np.float32)
    x[0] = 0.0
    x[1, :16] = np.float32(1e-30)
    x[2, 16:32] = np.float32(3e-39)
    r = fp8sim.quantize(x, spec)
    codes, dec, deq = nvfp4_reference(x, block)
    np.testing.assert_array_equal(r.codes, codes)
    np.testing.assert_array_equal(r.scales, dec)
    np.testing.assert_array_equal(r.dequantized, deq)
    assert r.metrics["bytes"]["total"] == 64 * 128 // 2 + (64 * 128) // (block[0] * block[1]) + 4


TE_SIGNS16 = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], np.float32)


def hadamard_rows(x, signs, inverse=False):
    """The random Hadamard transform of each row's 16-element blocks, written from its definition
    y = H (D x) / 4 in the order fp8sim documents: numpy fp32 adds, stage h = 1, 2, 4, 8, halving
    before stages 2 and 8."""
    f32 = np.float32
    v = x.reshape(-1, 16).astype(f32)
    if not inverse:
        v = v * signs
    for h in (1, 2, 4, 8):
        if h in (2, 8):
            v = v * f32(0.5)
        w = v.reshape(-1, 16 // (2 * h), 2, h)
        a, b = w[:, :, 0, :], w[:, :, 1, :]
        v = np.stack([a + b, a - b], axis=2).reshape(-1, 16)
    if inverse:
        v = v * signs
    return v.reshape(x.shape)


def test_nvfp4_with_rht_quantizes_the_transformed_tensor():
    rng = np.random.default_rng(9)
    x = rng.standard_t(2, (64, 128)).astype(np.float32)
    r = fp8sim.quantize(x, "nvfp4:rht=16")
    t = hadamard_rows(x, TE_SIGNS16)
    codes, dec, deq = nvfp4_reference(t, (1, 16))
    np.testing.assert_array_equal(r.codes, codes)
    np.testing.assert_array_equal(r.scales, dec)
    np.testing.assert_array_equal(r.dequantized, hadamard_rows(deq, TE_SIGNS16, inverse=True))
    # the transform spreads the heavy tail's outliers over their blocks: far fewer nonzero values
    # become a zero code (E2M1 magnitude bits 0)
    plain = fp8sim.quantize(x, "nvfp4")
    flushed_rht = np.mean(((r.codes & 7) == 0) & (t != 0))
    flushed_plain = np.mean(((plain.codes & 7) == 0) & (x != 0))
    assert flushed_plain > 0.02 and flushed_rht < 0.5 * flushed_plain


def test_mx_aliases_and_fp4_fp6_spec_errors():
    assert str(fp8sim.Spec("mxfp4")) == "e2m1:g32:scale=e8m0:mx=floor"
    assert str(fp8sim.Spec("mxfp6-e3m2")) == "e3m2:g32:scale=e8m0:mx=floor"
    assert str(fp8sim.Spec("nvfp4")) == "e2m1:g16:scale=e4m3"
    for bad, says in [("e2m1:g32:de=robust", "de=robust and delayed"), ("e2m3:g16:scale=bf16", "takes scale=e8m0"),
                      ("e3m2:tensor:sat=none", "saturates"), ("e4m3:g16:scale=e4m3", "two-level"),
                      ("e2m1:g16:scale=e4m3:amax_floor=1e-4", "own arithmetic")]:
        with pytest.raises(ValueError, match=says):
            fp8sim.Spec(bad)


def test_spec_parses_validates_and_sizes():
    s = fp8sim.Spec("e4m3:g128:de=coat")
    assert str(s) == s.text and fp8sim.Spec(str(s)) == s
    assert s.format == "e4m3" and s.granularity == "group" and s.fmax == 448.0
    # 4096 x 4096 in 1x128 groups: 16,777,216 one-byte codes; 131,072 groups x (4 B fp32 scale
    # + 8 B DE k and c) = 1,572,864 bytes of metadata.
    size = s.size((4096, 4096))
    assert size == {"codes": 16777216, "scales": 524288, "expand": 1048576, "metadata": 1572864,
                    "total": 18350080, "groups": 131072}
    assert s.nbytes((4096, 4096)) == 18350080
    assert fp8sim.Spec("mxfp8").nbytes((2, 64)) == 128 + 4  # 4 E8M0 bytes
    with pytest.raises(ValueError, match="g0|group"):
        fp8sim.Spec("e4m3:g0")
    with pytest.raises(ValueError, match="e9m9"):
        fp8sim.Spec("e9m9:tensor")
    with pytest.raises(ValueError):
        s.size((4, -1))


def test_errors_are_python_exceptions():
    with pytest.raises(TypeError, match="float64"):
        fp8sim.quantize(np.zeros(4), "e4m3:tensor")
    with pytest.raises(ValueError, match="empty"):
        fp8sim.quantize(np.zeros((0, 4), np.float32), "e4m3:tensor")
    with pytest.raises(ValueError, match="delayed"):
        fp8sim.quantize(np.ones((4, 4), np.float32), "e4m3:g2:delayed=4")
    with pytest.raises(ValueError, match="rounding|stoch"):
        fp8sim.cast(np.ones(4, np.float32), "e4m3", rounding="up")
    with pytest.raises(ValueError, match="e4m3|e5m2"):
        fp8sim.cast(np.ones(4, np.float32), "bf16")


def test_threads_quantize_at_once_with_the_same_bits():
    x = tensor(np.float32, (512, 4096), seed=9)
    ref = fp8sim.quantize(x, "e4m3:g128:de=coat").codes
    out = [None, None]

    def work(i):
        out[i] = fp8sim.quantize(x, "e4m3:g128:de=coat", threads=1).codes

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    same_bits(out[0], ref)
    same_bits(out[1], ref)


def _python_progress_during_a_call(x):
    """(loop iterations another thread ran during quantize(x), its iterations per second alone,
    the call's seconds)."""
    state = {"in_call": False, "done": False, "seconds": 0.0}

    def work():
        state["in_call"] = True
        t0 = time.perf_counter()
        fp8sim.quantize(x, "e4m3:g128:de=coat", threads=1)
        state["seconds"] = time.perf_counter() - t0
        state["in_call"] = False
        state["done"] = True

    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.2:
        n += 1
    rate = n / (time.perf_counter() - t0)
    worker = threading.Thread(target=work)
    worker.start()
    during = 0
    while not state["done"]:
        if state["in_call"]:
            during += 1
    worker.join()
    return during, rate, state["seconds"]


def test_the_gil_is_released_while_quantizing():
    # While one thread is inside quantize, Python code keeps running in another. With the GIL
    # held it could run for one switch interval (5 ms) of the call at most; released, for most
    # of it. The tensor grows until the call lasts long enough to tell the two apart.
    for rows in (1024, 4096, 16384):
        during, rate, seconds = _python_progress_during_a_call(tensor(np.float32, (rows, 4096), seed=4))
        if seconds > 0.2:
            break
    assert seconds > 0.2, "the call is too short to tell"
    assert during > 0.1 * rate * seconds, (during, rate, seconds)


MEMORY_RUNS = [
    ("llama2-7b", ["--recipe", "coat", "--gpus", "4", "--batch", "2"], dict(recipe="coat", gpus=4, batch=2)),
    ("olmo-1b", ["--framework", "hf", "--batch", "2", "--checkpointing"],
     dict(framework="hf", batch=2, checkpointing=True)),
    ("tiny-llama", ["--compare", "--seq", "512", "--zero", "2", "--gpu-mem-gib", "40"],
     dict(compare=True, seq=512, zero=2, gpu_mem_gib=40)),
    (str(HF / "Mistral-Nemo-Base-2407" / "config.json"), ["--recipe", "te", "--gpus", "8"], dict(recipe="te", gpus=8)),
    ("llama3-8b", ["--gpus", "4", "--fsdp", "2", "--fsdp-param-dtype", "fp32", "--checkpointing"],
     dict(gpus=4, fsdp=2, fsdp_param_dtype="fp32", checkpointing=True)),
]


@pytest.mark.parametrize("model,args,kwargs", MEMORY_RUNS, ids=["name", "framework", "compare", "hf-file", "fsdp2"])
def test_memory_equals_the_command(cli, tmp_path, model, args, kwargs):
    run(cli, "memory", "--model", model, *args, "--json", tmp_path / "m.json")
    assert fp8sim.memory(model, **kwargs) == json.loads((tmp_path / "m.json").read_text())


def test_memory_of_a_hugging_face_dict(cli, tmp_path):
    path = HF / "Mistral-Nemo-Base-2407" / "config.json"
    cfg = json.loads(path.read_text())
    info = fp8sim.model(cfg)
    assert info["params"] == 12247782400 and info["head_dim"] == 128
    assert info["name"] == "mistral"  # no name, no file: the model_type
    from_dict = fp8sim.memory(cfg, recipe="coat", gpus=4)
    run(cli, "memory", "--model", path, "--recipe", "coat", "--gpus", "4", "--json", tmp_path / "m.json")
    doc = json.loads((tmp_path / "m.json").read_text())
    # The same numbers; only the name differs (the command names it after the folder).
    assert doc["model"].pop("name") == "Mistral-Nemo-Base-2407" and doc["model"].pop("display_name")
    from_dict["model"].pop("name"), from_dict["model"].pop("display_name")
    assert from_dict == doc


def test_memory_errors():
    with pytest.raises(FileNotFoundError):
        fp8sim.memory("/nonexistent/config.json")
    with pytest.raises(ValueError, match="unknown model 'llama9-1t'"):
        fp8sim.memory("llama9-1t")
    with pytest.raises(ValueError, match=r"missing fields 'intermediate_size', 'num_hidden_layers'"):
        fp8sim.memory({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10,
                       "hidden_act": "silu"})
    with pytest.raises(ValueError, match="--gpus|gpus"):
        fp8sim.memory("tiny-llama", gpus=0)
    with pytest.raises(ValueError, match="recipe"):
        fp8sim.memory("tiny-llama", recipe="nope")
    with pytest.raises(ValueError, match="fsdp_param_dtype"):
        fp8sim.memory("tiny-llama", gpus=2, fsdp=2, fsdp_param_dtype="fp16")
    with pytest.raises(ValueError, match="--zero 3"):
        fp8sim.memory("tiny-llama", gpus=2, zero=2, fsdp=2)


def test_the_package_finds_its_data():
    assert "llama2-7b" in fp8sim.list_models()
    assert (Path(fp8sim.data_root()) / "models" / "llama2-7b.json").is_file()
