"""fp8sim.capture.TraceRecorder on real Hugging Face transformers models built from configs (no
download), trained a few steps with AdamW, then read by the command line (info, analyze, optim,
report). Needs torch, transformers and h5py (scripts/install_torch.sh; CI installs them): without
them these tests skip and say so. The command is $FP8SIM_CLI, else `fp8sim` on the PATH."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from fp8sim.capture import clean_name, layer_of, rank_path

NEEDS = "needs torch, transformers and h5py (FP8SIM_WITH_TORCH=1 installs them: scripts/install_torch.sh)"


def _have(*mods):
    try:
        for m in mods:
            __import__(m)
        return True
    except ImportError:
        return False


needs_torch = pytest.mark.skipif(not _have("torch", "transformers", "h5py"), reason=NEEDS)


@pytest.fixture(scope="session")
def cli():
    exe = os.environ.get("FP8SIM_CLI") or shutil.which("fp8sim")
    assert exe, "no fp8sim command: set FP8SIM_CLI to a built fp8sim or put one on the PATH"
    return exe


def run_json(cli, *args, tmp):
    out = str(tmp / f"{args[0]}.json")
    p = subprocess.run([cli, *map(str, args), "--json", out, "--quiet"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with open(out) as fh:
        return json.load(fh)


# ---- without torch -------------------------------------------------------------------------------

def test_import_needs_no_torch():
    code = "import sys, fp8sim, fp8sim.capture; assert 'torch' not in sys.modules and 'h5py' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_rank_file_names():
    assert rank_path("run.h5", None) == "run.h5"
    assert rank_path("out/run.h5", 3) == "out/run.rank3.h5"
    assert rank_path("run-{rank}.h5", 12) == "run-12.h5"
    assert rank_path("run-{rank}.h5", None) == "run-0.h5"


def test_names_and_layers():
    assert clean_name("module.model.layers.3.mlp.up_proj") == "model.layers.3.mlp.up_proj"
    assert clean_name("_fsdp_wrapped_module.gpt_neox.layers.0._checkpoint_wrapped_module.attention") == \
        "gpt_neox.layers.0.attention"
    assert clean_name("model.module_list.0") == "model.module_list.0"
    assert layer_of("model.layers.11.self_attn.q_proj") == 11
    assert layer_of("gpt_neox.layers.2.mlp.dense_h_to_4h") == 2
    assert layer_of("lm_head") == -1


# ---- with torch and transformers -----------------------------------------------------------------

def tiny(family, dtype=None):
    import torch
    import transformers as tf
    torch.manual_seed(0)
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=96, max_position_embeddings=64)
    cfg = {"llama": tf.LlamaConfig, "qwen2": tf.Qwen2Config}[family](**common)
    model = {"llama": tf.LlamaForCausalLM, "qwen2": tf.Qwen2ForCausalLM}[family](cfg)
    if dtype is not None:
        model = model.to(dtype)
    return model


def train(model, rec, steps, autocast=None, batch=2, seq=16):
    import torch
    opt = rec.optimizer
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randint(0, model.config.vocab_size, (batch, seq), generator=g)
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        rec.step(loss)
        opt.zero_grad()


@needs_torch
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_hf_model_trace_through_the_cli(family, cli, tmp_path):
    import torch
    from fp8sim.capture import TraceRecorder
    model = tiny(family)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    path = tmp_path / f"{family}.h5"
    with TraceRecorder(model, opt, path, steps=[3], window=(2, 3)) as rec:
        train(model, rec, 5)
    cfg = tmp_path / "config.json"
    model.config.to_json_file(str(cfg))

    info = run_json(cli, "info", path, tmp=tmp_path)
    assert info["model_kind"] == family
    assert info["optimizer"]["beta2"] == 0.95 and info["optimizer"]["weight_decay"] == 0.1
    assert info["grad_window"] == [2, 4]
    steps = {s["step"]: s for s in info["steps"]}
    assert sorted(steps) == [2, 3, 4, 5]
    full = steps[3]
    assert full["contents"] == "full" and full["adamw_step"] == 2
    roles = {r if isinstance(r, str) else r["role"] for r in full["roles"]}
    assert roles == {"weight", "grad", "exp_avg", "exp_avg_sq", "activation", "activation_grad"}
    n_params = len(list(model.named_parameters()))  # untied: every parameter once
    by_role = {}
    for t in full["tensors"]:
        by_role.setdefault(t["role"], []).append(t)
    assert len(by_role["weight"]) == len(by_role["exp_avg_sq"]) == n_params
    acts = {t["name"]: t for t in by_role["activation"]}
    # Per block: q/k/v input (once), o_proj input, gate/up input (once), down input, two norm
    # inputs, SiLU input, the SwiGLU multiply's two operands and the two residual branches; then
    # the final norm input and the LM-head input.
    assert len(acts) == 2 * 11 + 2
    qkv = acts["model.layers.1.self_attn.q_proj.input"]
    assert qkv["op"] == "linear_input" and qkv["layer"] == 1
    assert acts["model.layers.0.self_attn.o_proj.input"]["op"] == "attn_output"
    assert acts["model.layers.0.mlp.act_fn.input"]["op"] == "silu_input"
    assert acts["model.norm.input"]["op"] == "norm_input"
    assert acts["model.layers.1.mlp.mul.input1"]["op"] == "mul_input"
    assert acts["model.layers.1.attn_residual.branch"]["op"] == "residual_add"
    assert len(by_role["activation_grad"]) == 2 * 7 + 1  # every linear output, the LM head's too
    assert all(t["op"] == "linear_output_grad" for t in by_role["activation_grad"])

    an = run_json(cli, "analyze", path, "--recipe", "coat", tmp=tmp_path)
    assert an["step"] == 3
    assert len(an["tensors"]) == full["tensor_count"]
    assert an["unmatched_tensors"] == [] and an["nonfinite_tensors"] == []
    assert len(an["layers"]) >= 2

    op = run_json(cli, "optim", path, tmp=tmp_path)
    assert op["window"]["steps"] == 3 and op["window"]["params"] == n_params
    assert op["window"]["dropped_params"] == []

    p = subprocess.run([cli, "report", "--trace", path, "--model", cfg, "--out", tmp_path / "report", "--no-plots",
                        "--quiet"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "report" / "report.json") as fh:
        rep = json.load(fh)
    status = {s["id"]: s["status"] for s in rep["sections"]}
    for sec in ("tensors", "gemm", "optimizer"):
        assert status[sec] == "ok", (sec, status)


@needs_torch
def test_weights_moments_and_window_are_what_adamw_used(tmp_path):
    """The step group holds the state entering the update; the state group the state after it."""
    import h5py
    import numpy as np
    import torch
    from fp8sim.capture import TraceRecorder
    model = tiny("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    snaps = {}
    path = tmp_path / "t.h5"
    with TraceRecorder(model, opt, path, steps=[2], window=(3, 1), roles=["weight", "grad", "exp_avg"]) as rec:
        w = model.model.layers[0].mlp.up_proj.weight

        def snap(o, a, k):
            snaps[len(snaps) + 1] = (w.detach().clone(), w.grad.clone())
        opt.register_step_pre_hook(snap)
        train(model, rec, 3)
        after3 = w.detach().clone()
    name = "model.layers.0.mlp.up_proj.weight"
    with h5py.File(path) as f:
        s2 = f["steps/step_000002"]
        assert set(s2) == {"weight", "grad", "exp_avg"}
        np.testing.assert_array_equal(s2["weight"][name][()], snaps[2][0].numpy())
        np.testing.assert_array_equal(s2["grad"][name][()], snaps[2][1].numpy())
        assert f["steps/step_000003"].attrs["contents"] == "window"
        assert f["steps/step_000004"].attrs["contents"] == "state"
        assert f["steps/step_000004"].attrs["adamw_step"] == 3
        np.testing.assert_array_equal(f["steps/step_000004/weight"][name][()], after3.numpy())
        assert len(f["train/loss"]) == 3


@needs_torch
def test_autocast_and_bf16_parameters_store_the_dtype_the_op_saw(tmp_path):
    import h5py
    import torch
    from fp8sim.capture import TraceRecorder
    model = tiny("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with TraceRecorder(model, opt, tmp_path / "ac.h5", steps=[1], roles=["activation", "activation_grad"]) as rec:
        train(model, rec, 1, autocast=torch.bfloat16)
    with h5py.File(tmp_path / "ac.h5") as f:
        a = f["steps/step_000001/activation"]
        q = a["model.layers.0.self_attn.q_proj.input"]
        assert q.attrs["dtype"] == "bfloat16" and q.attrs["cast_from"] == "float32"
        assert a["model.layers.0.input_layernorm.input"].attrs["dtype"] == "float32"  # the residual stream
        assert f["steps/step_000001/activation_grad/lm_head.output_grad"].attrs["dtype"] == "bfloat16"

    model = tiny("qwen2", torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with TraceRecorder(model, opt, tmp_path / "bf16.h5", steps=[2]) as rec:
        train(model, rec, 2)
    with h5py.File(tmp_path / "bf16.h5") as f:
        s = f["steps/step_000002"]
        for role in ("weight", "grad", "exp_avg", "activation"):
            for ds in s[role].values():
                assert ds.attrs["dtype"] == "bfloat16", (role, ds.name)
                assert "cast_from" not in ds.attrs


@needs_torch
def test_sampling_and_size_limit(tmp_path):
    import h5py
    import torch
    from fp8sim.capture import TraceRecorder
    model = tiny("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with TraceRecorder(model, opt, tmp_path / "s.h5", steps=[1], roles=["activation"], layer_stride=2, sequences=1,
                       tokens=(4, 9)) as rec:
        train(model, rec, 1, batch=3, seq=16)
    with h5py.File(tmp_path / "s.h5") as f:
        a = f["steps/step_000001/activation"]
        layers = {int(ds.attrs["layer"]) for ds in a.values()}
        assert layers == {-1, 0}
        q = a["model.layers.0.self_attn.q_proj.input"]
        assert q.shape == (1, 5, 32) and q.attrs["tokens"] == 5

    model = tiny("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.warns(UserWarning, match="max_bytes"):
        with TraceRecorder(model, opt, tmp_path / "m.h5", steps=[1], max_bytes=20000) as rec:
            train(model, rec, 1)
    assert rec.bytes_written <= 20000
    with h5py.File(tmp_path / "m.h5") as f:
        assert f.attrs["skipped_tensors"] > 0 and f.attrs["max_bytes"] == 20000


@needs_torch
def test_explicit_modules_and_errors(tmp_path):
    import torch
    import torch.nn as nn
    from fp8sim.capture import TraceRecorder

    class Gate(nn.Module):
        def forward(self, a, b):
            return a * torch.sigmoid(b)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(8, 16)
            self.gate = Gate()
            self.down = nn.Linear(16, 8)

        def forward(self, x):
            h = self.up(x)
            return self.down(self.gate(h, h))

    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    with pytest.raises(ValueError, match="must start after step 1"):
        TraceRecorder(net, opt, tmp_path / "bad.h5", window=(1, 2))
    with pytest.raises(ValueError, match="unknown role"):
        TraceRecorder(net, opt, tmp_path / "bad.h5", roles=["weights"])
    assert not list(tmp_path.iterdir()), "a refused recorder leaves no file"
    import h5py
    with TraceRecorder(net, opt, tmp_path / "n.h5", steps=[1], modules=lambda name, m: "gate_input"
                       if isinstance(m, Gate) else None) as rec:
        net(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
    with h5py.File(tmp_path / "n.h5") as f:
        a = f["steps/step_000001/activation"]
        assert sorted(a) == ["down.input", "gate.input0", "gate.input1", "up.input"]
        assert a["gate.input0"].attrs["op"] == "gate_input"

    with pytest.raises(RuntimeError, match="boom"):
        with TraceRecorder(net, opt, tmp_path / "x.h5", steps=[2]):
            raise RuntimeError("boom")
    assert not (tmp_path / "x.h5").exists() and not list(tmp_path.glob("x.h5.tmp*"))


@needs_torch
def test_ops_without_a_module_are_what_the_block_computes(tmp_path):
    """The SwiGLU multiply's operands and the residual branches (no module of their own in Hugging
    Face blocks): their product is the down_proj input, and each branch plus the residual stream
    entering it is the next norm's input, bit for bit."""
    import h5py
    import numpy as np
    import torch
    from fp8sim.capture import TraceRecorder
    model = tiny("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with TraceRecorder(model, opt, tmp_path / "m.h5", steps=[1], roles=["activation"]) as rec:
        train(model, rec, 1)
    with h5py.File(tmp_path / "m.h5") as f:
        a = {k: v[()] for k, v in f["steps/step_000001/activation"].items()}
        ops = {k: v.attrs["op"] for k, v in f["steps/step_000001/activation"].items()}
    for L in (0, 1):
        p = f"model.layers.{L}."
        assert ops[p + "mlp.mul.input0"] == ops[p + "mlp.mul.input1"] == "mul_input"
        np.testing.assert_array_equal(a[p + "mlp.mul.input0"] * a[p + "mlp.mul.input1"], a[p + "mlp.down_proj.input"])
        silu = torch.nn.functional.silu(torch.from_numpy(a[p + "mlp.act_fn.input"])).numpy()
        np.testing.assert_array_equal(silu, a[p + "mlp.mul.input0"])
        assert ops[p + "attn_residual.branch"] == ops[p + "mlp_residual.branch"] == "residual_add"
        mid = a[p + "input_layernorm.input"] + a[p + "attn_residual.branch"]
        np.testing.assert_array_equal(mid, a[p + "post_attention_layernorm.input"])
        nxt = a["model.norm.input"] if L == 1 else a["model.layers.1.input_layernorm.input"]
        np.testing.assert_array_equal(mid + a[p + "mlp_residual.branch"], nxt)


@needs_torch
def test_optimizer_state_dict_equals_the_recorded_trace(cli, tmp_path):
    """fp8sim.optim_replay on optimizer.state_dict() with the parameters and their grads, taken
    just before update 3, gives the Table 1, memory and one-step drift that `fp8sim optim` gives
    on a trace recorded around that update."""
    import torch
    import fp8sim
    from fp8sim.capture import TraceRecorder
    model = tiny("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    got = {}

    def before_update(o, args, kwargs):
        if sum(1 for _ in o.state.values()) and next(iter(o.state.values()))["step"] == 2:
            got["doc"] = fp8sim.optim_replay(state_dict=o.state_dict(), params=model.named_parameters(), grads=True)
    opt.register_step_pre_hook(before_update)
    path = tmp_path / "w.h5"
    with TraceRecorder(model, opt, path, steps=[3], window=(3, 1), roles=["weight", "grad", "exp_avg",
                                                                         "exp_avg_sq"]) as rec:
        train(model, rec, 3)
    want = run_json(cli, "optim", path, "--table1-step", 3, tmp=tmp_path)
    doc = got["doc"]
    for key in ("table1", "table1_details", "memory", "drift"):
        assert doc[key] == want[key], key
    assert doc["window"]["params"] == want["window"]["params"] == len(list(model.parameters()))
    # A checkpoint's state dict (tensors saved and loaded) reads the same.
    buf = tmp_path / "opt.pt"
    torch.save(opt.state_dict(), buf)
    names = [n for n, _ in model.named_parameters()]
    loaded = fp8sim.optim_replay(state_dict=torch.load(buf), params=names)
    assert loaded["table1_details"]["adamw_step"] == 3 and loaded["drift"] is None
    # A model's state dict as it is: its weights under a recipe, in memory.
    weights = fp8sim.analyze(dict(model.state_dict()), "coat")
    assert len(weights["tensors"]) == len(model.state_dict()) and weights["trace"] == "<tensors>"


@needs_torch
def test_ddp_ranks_write_one_file_each(cli, tmp_path):
    """Two processes (gloo) train a DDP-wrapped model: each rank writes its file, with its rank."""
    import socket
    import h5py
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = os.path.join(os.path.dirname(__file__), "ddp_record.py")
    p = subprocess.run([sys.executable, worker, str(tmp_path), str(port)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    files = sorted(os.listdir(tmp_path))
    assert files == ["run.rank0.h5", "run.rank1.h5"], files
    for rank in (0, 1):
        path = tmp_path / f"run.rank{rank}.h5"
        with h5py.File(path) as f:
            assert f.attrs["rank"] == rank and f.attrs["world_size"] == 2
            assert "model.layers.0.mlp.up_proj.weight" in f["steps/step_000002/weight"]  # no DDP "module."
            inputs = f["steps/step_000002/activation/model.layers.0.self_attn.q_proj.input"][()]
        info = run_json(cli, "info", path, tmp=tmp_path)
        assert info["model_kind"] == "llama" and [s["step"] for s in info["steps"]] == [2]
        if rank == 0:
            first = inputs
    assert not (first == inputs).all()  # each rank saw its own batch


@needs_torch
def test_fsdp_ranks_write_their_shards(cli, tmp_path):
    """FSDP2 (fully_shard over two gloo processes): each rank writes the shards it holds (dim 0
    halved), with its rank, under the model's own class name."""
    import json as _json
    import socket
    import h5py
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = os.path.join(os.path.dirname(__file__), "ddp_record.py")
    p = subprocess.run([sys.executable, worker, str(tmp_path), str(port), "fsdp"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(os.listdir(tmp_path)) == ["run.rank0.h5", "run.rank1.h5"]
    shards = []
    for rank in (0, 1):
        path = tmp_path / f"run.rank{rank}.h5"
        with h5py.File(path) as f:
            assert f.attrs["rank"] == rank and f.attrs["world_size"] == 2
            cfg = _json.loads(f.attrs["model_config"])
            assert cfg["name"] == "LlamaForCausalLM", cfg["name"]  # not fully_shard's FSDPLlamaForCausalLM
            w = f["steps/step_000002/weight/model.layers.0.mlp.up_proj.weight"][()]
            assert w.shape == (32, 32)  # this rank's half of the (64, 32) weight
            assert f["steps/step_000002/exp_avg/model.layers.0.mlp.up_proj.weight"].shape == (32, 32)
            shards.append(w)
        info = run_json(cli, "info", path, tmp=tmp_path)
        assert info["model_kind"] == "llama" and [s["step"] for s in info["steps"]] == [2]
    assert not (shards[0] == shards[1]).all()  # two different halves


@needs_torch
def test_bring_your_own_model_example(tmp_path):
    """python/examples/byo_model.py, the README's example, as a user runs it."""
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "byo_model.py")
    with open(example) as fh:
        code = fh.read().split('"""', 2)[2].lstrip("\n")  # the script without its docstring
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")) as fh:
        assert "```python\n" + code + "```" in fh.read(), "README.md shows another script"
    p = subprocess.run([sys.executable, example, str(tmp_path / "llama.h5")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines[:3]] == ["layer -1", "layer  0", "layer  1"], p.stdout
    assert "GEMM output SNR" in lines[1] and "GiB/GPU at peak" in lines[-1], p.stdout
