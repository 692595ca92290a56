"""fp8sim.analyze, optim_replay and report against the command line: the same input gives the same
JSON. Inputs: the committed sample trace, tensors in memory (the command reads the same tensors
as a folder of .npy files) and an optimizer state dict rebuilt from the sample trace (the
command replays the trace itself). The command is $FP8SIM_CLI, else `fp8sim` on the PATH."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import h5py
import ml_dtypes
import numpy as np
import pytest

import fp8sim

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "traces" / "tiny-llama-s300.h5"


@pytest.fixture(scope="session")
def cli():
    exe = os.environ.get("FP8SIM_CLI") or shutil.which("fp8sim")
    assert exe, "no fp8sim command: set FP8SIM_CLI to a built fp8sim or put one on the PATH"
    return exe


def cli_json(cli, tmp, *args):
    out = tmp / f"{args[0]}-{len(list(tmp.iterdir()))}.json"
    p = subprocess.run([cli, *map(str, args), "--json", out, "--quiet"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())


# ---- analyze ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("recipe", ["coat", "te", "deepseek"])
def test_analyze_equals_the_command(cli, tmp_path, recipe):
    assert fp8sim.analyze(SAMPLE, recipe) == cli_json(cli, tmp_path, "analyze", SAMPLE, "--recipe", recipe)


def test_analyze_options_equal_the_commands(cli, tmp_path):
    got = fp8sim.analyze(str(SAMPLE), "mxfp8", step=301, gemm=False, histograms=True, threads=1)
    assert got == cli_json(cli, tmp_path, "analyze", SAMPLE, "--recipe", "mxfp8", "--step", 301, "--no-gemm",
                           "--histograms")
    assert got["step"] == 301 and got["layers"] == []
    recipe = tmp_path / "mine.json"
    recipe.write_text(json.dumps({"name": "mine", "base": "coat",
                                  "rules": [{"role": "weight", "op": "linear", "spec": "e5m2:g32"}]}))
    assert fp8sim.analyze(SAMPLE, recipe) == cli_json(cli, tmp_path, "analyze", SAMPLE, "--recipe", recipe)


def tensors():
    """Named tensors of every dtype and role a folder of .npy files can hold."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 64)).astype(np.float32)
    return {
        "model.layers.0.mlp.up_proj.weight": w,
        "model.layers.0.mlp.up_proj.weight.grad": (rng.standard_normal((48, 64)) * 1e-3).astype(np.float32),
        "model.layers.0.mlp.up_proj.weight.exp_avg": (rng.standard_normal((48, 64)) * 1e-4).astype(np.float32),
        "model.layers.0.mlp.up_proj.weight.exp_avg_sq": (rng.random((48, 64)) * 1e-8).astype(np.float32),
        "model.layers.1.self_attn.q_proj.weight": rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16),
        "model.norm.weight": (1 + rng.standard_normal(64) * 0.1).astype(np.float16),
        "model.embed_tokens.weight": rng.standard_normal((100, 64)).astype(np.float32),
        "position_ids": np.arange(16),  # ignored by both
    }


def test_analyze_of_tensors_in_memory_equals_a_npy_folder(cli, tmp_path):
    ts = tensors()
    before = {k: v.copy() for k, v in ts.items()}
    folder = tmp_path / "npy"
    folder.mkdir()
    for name, a in ts.items():
        np.save(folder / f"{name}.npy", a)
    listing = sorted(os.listdir(tmp_path))
    got = fp8sim.analyze(ts, "coat")
    assert sorted(os.listdir(tmp_path)) == listing
    want = cli_json(cli, tmp_path, "analyze", folder, "--recipe", "coat")
    assert got.pop("trace") == "<tensors>" and want.pop("trace")
    assert got == want
    assert len(got["tensors"]) == len(ts) - 1
    for k, v in ts.items():  # read in place, left alone
        assert v.tobytes() == before[k].tobytes()


# ---- optim -----------------------------------------------------------------------------------------

def test_optim_equals_the_command(cli, tmp_path):
    assert fp8sim.optim_replay(SAMPLE) == cli_json(cli, tmp_path, "optim", SAMPLE)
    got = fp8sim.optim_replay(SAMPLE, recipes=["coat", "m=e4m3:g128,v=e5m2:g128"], steps=3, update="torch",
                              rounding="stochastic", seed=7, table1_step=301, threads=1)
    assert got == cli_json(cli, tmp_path, "optim", SAMPLE, "--recipe", "coat", "--recipe", "m=e4m3:g128,v=e5m2:g128",
                           "--steps", 3, "--update", "torch", "--rounding", "stochastic", "--seed", 7,
                           "--table1-step", 301)
    got = fp8sim.optim_replay(SAMPLE, recipes="bf16", table1_lowbit=True, drift=False)
    assert got == cli_json(cli, tmp_path, "optim", SAMPLE, "--recipe", "bf16", "--table1-lowbit", "--no-drift")
    assert set(got["table1_lowbit"]["mse"]) == {"E2M1", "E2M1+Expand", "E2M3", "E2M3+Expand", "E3M2", "E3M2+Expand"}
    with pytest.raises(ValueError, match="table1_lowbit"):
        fp8sim.optim_replay(SAMPLE, table1=False, table1_lowbit=True)
    got = fp8sim.optim_replay(SAMPLE, recipes="bf16", table1=False, drift=False)
    assert got == cli_json(cli, tmp_path, "optim", SAMPLE, "--recipe", "bf16", "--no-table1", "--no-drift")
    assert got["table1_skipped"] and got["drift_skipped"]


def sample_state_dict():
    """The sample trace's first window step as PyTorch would hold it just before that update:
    AdamW's state dict (moments after 294 steps), the weights, and the grads of the window's
    parameters."""
    with h5py.File(SAMPLE) as f:
        first = int(f.attrs["grad_window"][0])
        s = f[f"steps/step_{first:06d}"]
        names = sorted(s["exp_avg"])
        t = int(s.attrs["adamw_step"])
        state = {i: {"step": float(t), "exp_avg": s["exp_avg"][n][()], "exp_avg_sq": s["exp_avg_sq"][n][()]}
                 for i, n in enumerate(names)}
        params = {n: s["weight"][n][()] for n in names}
        window = set(f[f"steps/step_{first + 1:06d}/grad"])
        grads = {n: s["grad"][n][()] for n in names if n in window}
        group = {"lr": float(s.attrs["lr"]), "betas": (float(f.attrs["beta1"]), float(f.attrs["beta2"])),
                 "eps": float(f.attrs["eps"]), "weight_decay": float(f.attrs["weight_decay"]), "amsgrad": False,
                 "maximize": False, "foreach": False, "fused": False, "params": list(range(len(names)))}
    return {"state": state, "param_groups": [group]}, params, grads, first


def test_optim_of_a_state_dict_equals_the_command_on_the_trace(cli, tmp_path):
    sd, params, grads, first = sample_state_dict()
    got = fp8sim.optim_replay(state_dict=sd, params=params, grads=grads)
    want = cli_json(cli, tmp_path, "optim", SAMPLE, "--table1-step", first, "--steps", 1)
    for key in ("table1", "table1_ratio_to_e4m3", "table1_details", "memory", "drift", "definitions"):
        assert got[key] == want[key], key
    assert got["source"] == "<state_dict>"
    assert got["window"]["steps"] == 1 and got["window"]["params"] == want["window"]["params"] == len(grads)
    assert "end-of-window weights" in got["fp32_replay"]["skipped"]
    # Without grads: Table 1 and memory only; names are enough.
    alone = fp8sim.optim_replay(state_dict=sd, params=list(params))
    assert alone["table1"] == want["table1"] and alone["memory"] == want["memory"]
    assert alone["drift"] is None and alone["drift_skipped"] and alone["window"]["steps"] == 0


def test_state_dict_mistakes_are_one_line_errors():
    sd, params, grads, _ = sample_state_dict()
    with pytest.raises(ValueError, match="state_dict must be"):
        fp8sim.optim_replay(state_dict={"exp_avg": 1})
    with pytest.raises(ValueError, match="params gives 2"):
        fp8sim.optim_replay(state_dict=sd, params=list(params)[:2])
    shuffled = dict(reversed(list(params.items())))
    with pytest.raises(ValueError, match="order the optimizer holds them"):
        fp8sim.optim_replay(state_dict=sd, params=shuffled)
    with pytest.raises(ValueError, match="grads need the weights"):
        fp8sim.optim_replay(state_dict=sd, params=list(params), grads=grads)
    sd2 = {"state": dict(sd["state"]), "param_groups": sd["param_groups"]}
    sd2["state"][0] = {"momentum_buffer": np.zeros(3, np.float32)}
    with pytest.raises(ValueError, match="not an Adam or AdamW state dict"):
        fp8sim.optim_replay(state_dict=sd2, params=params)
    amsgrad = {"state": sd["state"], "param_groups": [dict(sd["param_groups"][0], amsgrad=True)]}
    with pytest.raises(ValueError, match="amsgrad=True"):
        fp8sim.optim_replay(state_dict=amsgrad, params=params)
    with pytest.raises(ValueError, match="a trace or a state_dict"):
        fp8sim.optim_replay()


# ---- report ----------------------------------------------------------------------------------------

def summary_of(doc):
    sec = next(s for s in doc["sections"] if s["id"] == "summary")
    table = next(b["table"] for b in sec["blocks"] if "table" in b)
    return {r[0]: dict(zip(table["header"][1:], r[1:])) for r in table["rows"]}


def test_report_equals_the_command(cli, tmp_path):
    p = subprocess.run([cli, "report", SAMPLE, "--recipes", "bf16,te,coat", "--no-plots", "--out", tmp_path / "cli",
                        "--quiet"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    want = json.loads((tmp_path / "cli" / "report.json").read_text())
    got = fp8sim.report(SAMPLE, recipes=["bf16", "te,coat"], plots=False, out=tmp_path / "pkg")
    assert got["dir"] == str(tmp_path / "pkg") and "report.json" in got["files"]
    assert got["plots"]["status"] == "skipped"
    assert got["verdict"] == want["data"]["verdict"] and got["verdict"]["recommendation"]
    assert got["summary"] == summary_of(want) and set(got["summary"]) == {"bf16", "te", "coat"}
    mine = json.loads(Path(got["report"]).read_text())
    # Where each read the speed calibration: the installed package carries its own copy.
    cal_mine, cal_want = mine["data"]["speed"]["timing"]["calibration"], want["data"]["speed"]["timing"]["calibration"]
    mine = json.loads(json.dumps(mine).replace(json.dumps(cal_mine)[1:-1], json.dumps(cal_want)[1:-1]))
    for key in ("analyze", "optim", "memory", "speed"):
        for doc in (mine, want):
            doc["data"][key].pop("command_line", None)  # how each was asked for
        assert mine["data"][key] == want["data"][key], key
    assert {s["title"]: s["status"] for s in got["sections"]} == {s["title"]: s["status"] for s in want["sections"]}


def test_report_of_tensors_and_a_config_dict(tmp_path):
    cfg = json.loads((REPO / "tests" / "data" / "hf" / "Qwen2-0.5B" / "config.json").read_text())
    got = fp8sim.report(tensors(), model=cfg, recipes="bf16,coat", gpus=1, plots=False, out=tmp_path / "r")
    status = {s["title"]: s["status"] for s in got["sections"]}
    assert status["Quantization error of the trace's tensors"] == "ok", status
    assert status["Memory per GPU"] == "ok", status
    assert set(got["summary"]) == {"bf16", "coat"}
    assert sorted(os.listdir(tmp_path)) == ["r"]  # the temporary tensors and config are gone


# ---- errors ----------------------------------------------------------------------------------------

def test_trace_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        fp8sim.analyze(tmp_path / "missing.h5")
    with pytest.raises(FileNotFoundError):
        fp8sim.report(tmp_path / "missing.h5", out=tmp_path / "r")
    with pytest.raises(FileNotFoundError):
        fp8sim.report(SAMPLE, model=tmp_path / "config.json", out=tmp_path / "r")
    with pytest.raises(ValueError, match="unknown model"):
        fp8sim.report(SAMPLE, model="nope", out=tmp_path / "r")
    text = tmp_path / "t.h5"
    text.write_text("not a trace")
    with pytest.raises(ValueError, match="t.h5") as e:
        fp8sim.analyze(text)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="unknown recipe"):
        fp8sim.analyze(SAMPLE, "nope")
    with pytest.raises(ValueError, match="does not record the optimizer's beta1"):
        fp8sim.optim_replay(tensors_folder(tmp_path))
    with pytest.raises(TypeError, match="float64"):
        fp8sim.analyze({"w": np.ones((4, 4))})
    with pytest.raises(ValueError, match="holds no float32"):  # integer buffers are left out
        fp8sim.analyze({"position_ids": np.arange(4)})
    with pytest.raises(TypeError, match="state_dict="):
        fp8sim.optim_replay({"w": np.ones((4, 4), np.float32)})
    with pytest.raises(ValueError, match="empty name"):
        fp8sim.report(SAMPLE, recipes="bf16,,coat", out=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def tensors_folder(tmp_path):
    folder = tmp_path / "npy"
    folder.mkdir(exist_ok=True)
    for name, a in tensors().items():
        np.save(folder / f"{name}.npy", a)
    return folder
