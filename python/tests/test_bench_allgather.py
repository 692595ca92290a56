"""scripts/bench_allgather.py on the CPU: two gloo processes under torch.distributed.run time a tiny
layer's collectives and a small sweep; the JSON's byte counts equal those computed here from the
config (FP8 payload = codes + scales), its bandwidths and fits follow from its own times, and a
usage error is one line and exit 2. Timings themselves are not judged."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench_allgather.py"
ITEMS = ["all_gather/bfloat16", "all_gather/fp8", "reduce_scatter/bfloat16", "reduce_scatter/float32"]
SIZES = [8 << 10, 128 << 10, 2 << 20]
# Without torchrun's variables, whatever the environment running the tests holds.
PLAIN_ENV = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}

# GQA (2 KV heads of 4), LayerNorm with biases, attention biases, a plain GELU MLP, widths that are
# not multiples of 128: every branch of the layer's tensor list.
GQA = {"name": "gqa-test", "hidden_size": 192, "intermediate_size": 320, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64, "norm": "layernorm",
       "activation": "gelu", "tie_word_embeddings": True, "attention_bias": True}


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location("bench_allgather", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def layer_shapes(c):
    """One decoder layer's parameter shapes, written out here independently of the script."""
    h, f, nh, nkv = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = h // nh
    b = c.get("attention_bias", False)
    norm = {"rmsnorm": [(h,)], "layernorm": [(h,), (h,)], "layernorm_nonparam": []}[c["norm"]]
    attn = [(nh * hd, h), (nkv * hd, h), (nkv * hd, h), (h, nh * hd)]
    if b:
        attn += [(nh * hd,), (nkv * hd,), (nkv * hd,), (h,)]
    mlp = [(f, h)] * (2 if c["activation"] == "swiglu" else 1) + [(h, f)]
    return norm * 2 + attn + mlp


def expected(c, layers, scales, world):
    shapes = layer_shapes(c) * layers
    params = sum(math.prod(s) for s in shapes)
    if scales == "tensor":
        n_scales = len(shapes)
    else:
        n_scales = sum(math.prod(s[:-1]) * math.ceil(s[-1] / 128) for s in shapes)
    shard = math.ceil(params / world)
    return params, n_scales, shard, shard + 4 * math.ceil(n_scales / world)


def run_bench(tmp_path, *args):
    out = tmp_path / "out.json"
    md = tmp_path / "out.md"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        str(SCRIPT), "--device", "cpu", "--iters", "3", "--warmup", "1", "--json", str(out),
                        "--md", str(md), *args], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=PLAIN_ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "bench_allgather: done" in r.stderr
    assert not (tmp_path / "out.json.tmp").exists()
    return json.loads(out.read_text()), md.read_text()


def check_item(it, world):
    assert it["status"] == "ok"
    assert it["bytes_total"] == world * it["bytes_per_rank"]
    assert it["bus_bytes"] == (world - 1) * it["bytes_per_rank"]
    assert 0 < it["min_us"] <= it["median_us"] <= it["max_us"]
    assert len(it["rank_median_us"]) == world and all(t > 0 for t in it["rank_median_us"])
    assert it["algbw_gbps"] == pytest.approx(it["bytes_total"] / (it["median_us"] * 1e3))
    assert it["busbw_gbps"] == pytest.approx(it["algbw_gbps"] * (world - 1) / world)


def test_cpu_run_counts_the_layers_bytes_and_fits_its_sweep(tmp_path, bench):
    cfg_path = tmp_path / "gqa.json"
    cfg_path.write_text(json.dumps(GQA))
    tiny = json.loads((REPO / "models" / "tiny-llama.json").read_text())
    doc, md = run_bench(tmp_path, "--model", f"tiny-llama,{cfg_path}", "--sizes", ",".join(str(s) for s in SIZES))
    assert doc["format"] == "fp8sim-allgather-bench" and doc["version"] == 1
    m = doc["machine"]
    assert m["backend"] == "gloo" and m["world_size"] == 2 and m["device"] == "cpu"
    world = m["world_size"]
    assert doc["options"]["scales"] == "tensor" and doc["options"]["scale_call"] == "packed"
    assert doc["options"]["sizes"] == SIZES

    assert [mod["model"] for mod in doc["models"]] == ["tiny-llama", "gqa-test"]
    for mod, cfg in zip(doc["models"], (tiny, GQA)):
        params, n_scales, shard, fp8_bytes = expected(cfg, 1, "tensor", world)
        assert (mod["params"], mod["scales"], mod["shard_elements"]) == (params, n_scales, shard)
        pay = mod["fp8_payload"]
        assert pay["bytes_per_rank"] == pay["codes_bytes_per_rank"] + pay["scale_bytes_per_rank"] == fp8_bytes
        items = {it["name"]: it for it in mod["items"]}
        assert list(items) == ITEMS
        assert items["all_gather/bfloat16"]["bytes_per_rank"] == 2 * shard
        assert items["all_gather/fp8"]["bytes_per_rank"] == fp8_bytes and items["all_gather/fp8"]["calls"] == 1
        assert items["reduce_scatter/bfloat16"]["bytes_per_rank"] == 2 * shard
        assert items["reduce_scatter/float32"]["bytes_per_rank"] == 4 * shard
        for it in items.values():
            check_item(it, world)
        assert mod["fp8_vs_bf16"]["bytes"] == pytest.approx(fp8_bytes / (2 * shard))
        assert mod["fp8_vs_bf16"]["time"] == pytest.approx(items["all_gather/fp8"]["median_us"]
                                                           / items["all_gather/bfloat16"]["median_us"])
        # fp8sim speed's 6 B x params x (N-1)/N at --link-gbps X takes the two all-gathers + one reduce-scatter.
        sm = mod["speed_model"]["bfloat16_all_gather+bfloat16_reduce_scatter"]
        step = 2 * items["all_gather/bfloat16"]["median_us"] + items["reduce_scatter/bfloat16"]["median_us"]
        assert sm["step_us"] == pytest.approx(step)
        assert sm["link_gbps"] == pytest.approx(6 * params * (world - 1) / world / (step * 1e3))
    assert "| all_gather/fp8 |" in md and "## Fits" in md

    # The sweep: every size and collective, then one fit each from those points.
    pts = doc["sweep"]
    assert len(pts) == len(SIZES) * 4
    for p in pts:
        check_item(p, world)
        assert p["bytes_per_rank"] in SIZES
    fits = {(f["collective"], f["dtype"]): f for f in doc["fits"]}
    assert set(fits) == {("all_gather", "bfloat16"), ("all_gather", "uint8"), ("reduce_scatter", "bfloat16"),
                         ("reduce_scatter", "float32")}
    for (coll, dt), f in fits.items():
        mine = [p for p in pts if p["collective"] == coll and p["dtype"] == dt]
        assert f["points"] == len(SIZES)
        assert f["latency_us"] >= 0
        if f["bus_gbps"] is None:  # CPU noise can flatten a line; the fit then says so
            assert "note" in f
            continue
        assert f["bus_gbps"] > 0 and f["alg_gbps"] == pytest.approx(f["bus_gbps"] * world / (world - 1))
        errs = [abs(f["latency_us"] + p["bus_bytes"] / (f["bus_gbps"] * 1e3) - p["median_us"]) / p["median_us"]
                for p in mine]
        assert f["max_rel_err"] == pytest.approx(max(errs))
    # Each unit item's fit_us is its sweep line at its bytes (the FP8 payload on the uint8 line).
    for mod in doc["models"]:
        for it in mod["items"]:
            dt = "uint8" if it["name"] == "all_gather/fp8" else it["dtype"]
            assert it["fit_us"] == pytest.approx(bench.fit_time(fits[(it["collective"], dt)], it["bus_bytes"]))


def test_cpu_run_g128_scales_in_a_second_call(tmp_path):
    doc, _ = run_bench(tmp_path, "--model", "tiny-llama", "--layers", "2", "--scales", "g128", "--scale-call",
                       "separate", "--sizes", "none")
    tiny = json.loads((REPO / "models" / "tiny-llama.json").read_text())
    params, n_scales, shard, fp8_bytes = expected(tiny, 2, "g128", 2)
    (mod,) = doc["models"]
    assert (mod["layers"], mod["params"], mod["scales"]) == (2, params, n_scales)
    fp8 = {it["name"]: it for it in mod["items"]}["all_gather/fp8"]
    assert fp8["calls"] == 2 and fp8["dtype"] == "uint8+float32" and fp8["bytes_per_rank"] == fp8_bytes
    check_item(fp8, 2)
    assert fp8["fit_us"] is None  # no sweep, no fit
    assert doc["sweep"] == [] and doc["fits"] == []


def test_fit_recovers_a_line_and_keeps_latency_non_negative(bench):
    xs = [1 << k for k in range(20, 31)]
    ts = [25.0 + x / (300.0 * 1e3) for x in xs]  # 25 us + 300 GB/s
    pts = [{"bus_bytes": x, "median_us": t} for x, t in zip(xs, ts)]
    f = bench.make_fit(pts, 4)
    assert f["latency_us"] == pytest.approx(25.0) and f["bus_gbps"] == pytest.approx(300.0)
    assert f["alg_gbps"] == pytest.approx(400.0) and f["max_rel_err"] < 1e-9
    assert bench.fit_time(f, 1 << 30, calls=2) == pytest.approx(50.0 + (1 << 30) / 300e3)
    # Points that would give a negative intercept: latency 0, a bandwidth through them.
    lat, slope = bench.fit_line([1000.0, 2000.0, 4000.0], [0.5, 1.8, 4.0])
    assert lat == 0.0 and slope > 0
    assert bench.make_fit(pts[:1], 4)["bus_gbps"] is None


@pytest.mark.parametrize("args,code,text", [
    (["--iters", "0"], 2, "--iters must be at least 1"),
    (["--scales", "g64"], 2, "--scales"),
    (["--sizes", "6"], 2, "not a multiple of 4"),
    (["--model", "no-such-model"], 2, "no model config 'no-such-model'"),
    ([], 2, "run under torchrun"),
])
def test_bad_usage_is_one_line(args, code, text, tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", *args], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env=PLAIN_ENV)
    assert r.returncode == code, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench_allgather.py: error: ") and text in lines[0], r.stderr
    assert list(tmp_path.iterdir()) == []


def test_bad_config_is_exit_1(tmp_path):
    cfg = dict(GQA, num_key_value_heads=3)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, str(SCRIPT), "--model", str(path)], capture_output=True, text=True,
                       timeout=120, env=PLAIN_ENV)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "num_key_value_heads does not divide num_attention_heads" in lines[0], r.stderr
