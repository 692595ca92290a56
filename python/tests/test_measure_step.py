"""scripts/measure_step.py's pieces that run without a GPU: the replay of an allocator history to
its peak (--snapshot) and the torch loop that holds its logits through backward, as the torch
reference loop does (the memory model's `torch` profile judges only such runs)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module")
def ms():
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("measure_step", SCRIPTS / "measure_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def frame(filename, line, name="f"):
    return {"filename": filename, "line": line, "name": name}


def test_live_at_peak_replays_to_the_peak_and_groups_by_site(ms):
    model = frame("/x/modeling.py", 10, "forward")
    generic = frame("/site/torch/nn/modules/module.py", 1700, "_call_impl")
    other = frame("/x/modeling.py", 20, "forward")
    events = [
        {"action": "alloc", "addr": 1, "size": 100, "frames": [generic, model]},  # site: modeling.py:10
        {"action": "alloc", "addr": 2, "size": 50, "frames": [other]},
        {"action": "free_requested", "addr": 900, "size": 30, "frames": []},  # from before the recording
        {"action": "free_completed", "addr": 900, "size": 30, "frames": []},
        {"action": "alloc", "addr": 3, "size": 200, "frames": [model]},  # the peak: 1000 + 100 + 50 - 30 + 200
        {"action": "free_requested", "addr": 3, "size": 200, "frames": []},
        {"action": "free_completed", "addr": 3, "size": 200, "frames": []},
        {"action": "alloc", "addr": 4, "size": 150, "frames": []},  # 1270 < 1320
    ]
    live = ms.live_at_peak({"device_traces": [events]}, 1000)
    assert live["peak_bytes"] == 1320
    assert live["event_index"] == 4
    assert live["before_step_alive_at_peak"] == 970
    assert live["traced_alive_at_peak"] == 350
    sites = {s["site"]: s for s in live["sites"]}
    assert sites["modeling.py:10(forward)"]["bytes"] == 300
    assert sites["modeling.py:10(forward)"]["blocks"] == 2
    assert sites["modeling.py:20(forward)"]["bytes"] == 50
    assert "(no Python frame)" not in sites  # block 4 came after the peak
    assert sum(s["bytes"] for s in live["sites"]) == live["traced_alive_at_peak"]


def test_gc_clock_counts_collections_by_generation_only_while_active(ms):
    """The timed steps' garbage-collector record: a full collection inside the clock counts as one
    generation-2 collection with its time; reset() zeroes both; nothing counts once the clock exits."""
    import gc

    with ms.GcClock() as clock:
        assert clock in gc.callbacks
        gc.collect(2)
        assert clock.n[2] >= 1 and clock.ms > 0.0
        clock.reset()
        assert clock.n == [0, 0, 0] and clock.ms == 0.0
        gc.collect(0)
        assert clock.n[0] >= 1 and clock.n[2] == 0
    assert clock not in gc.callbacks
    gc.collect(2)
    assert clock.n[2] == 0


def test_torch_loop_holds_its_logits(tmp_path):
    out = tmp_path / "check.json"
    r = subprocess.run([sys.executable, str(SCRIPTS / "measure_step.py"), "--check", "--framework", "torch",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["loop_holds_logits"] is True
    assert "holding logits through backward" in doc["training"]
    r = subprocess.run([sys.executable, str(SCRIPTS / "measure_step.py"), "--check", "--framework", "hf",
                        "--coat-first-config", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "--coat-first-config is for --framework coat" in r.stderr


class FakeStepper:
    """A step that runs up to `limit` micro-batches and is out of memory above it, as the capped
    allocator answers; records the micro-batches stepped."""

    class Opt:
        def zero_grad(self, set_to_none=True):
            pass

    def __init__(self, limit, error=None):
        self.limit, self.error, self.stepped = limit, error, []
        self.s = type("S", (), {"opt": FakeStepper.Opt()})()

    def batch(self, b, seq):
        return b, seq

    def step(self, inp, tgt):
        self.stepped.append(inp)
        if self.error is not None:
            raise self.error
        if inp > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def sync(self):
        pass


def test_check_batches_tries_only_the_given_micro_batches_as_the_search_does(ms):
    args = type("A", (), {"seq": 16, "max_batch_limit": 256})()
    caps = []
    st = FakeStepper(17)
    found = ms.max_batch(st, args, 80.0, cap=caps.append)
    assert found["max_batch"] == 17 and found["tried"]["17"] is True and found["tried"]["18"] is False
    assert caps == [80.0, None]
    caps.clear()
    st = FakeStepper(17)
    check = ms.check_batches(st, args, 80.0, [18, 17, 17], cap=caps.append)
    assert check == {"cap_gib": 80.0, "tried": {"17": True, "18": False}}
    assert st.stepped == [17, 18]  # ascending, each once: nothing else is compiled or run
    assert caps == [80.0, None]
    check = ms.check_batches(FakeStepper(40), args, 80.0, [17, 18], cap=lambda c: None)
    assert check["tried"] == {"17": True, "18": True}
    # Anything but an out-of-memory error is a failure of the run, not an answer.
    with pytest.raises(RuntimeError, match="bad kernel"):
        ms.check_batches(FakeStepper(40, RuntimeError("bad kernel")), args, 80.0, [1], cap=lambda c: None)


def test_check_batches_needs_the_cap_and_positive_micro_batches(ms, tmp_path):
    assert ms.parse_batches("30,31") == [30, 31]
    for bad in ("", "x", "3,0", "-1"):
        with pytest.raises(ValueError):
            ms.parse_batches(bad)
    out = tmp_path / "check.json"
    script = str(SCRIPTS / "measure_step.py")
    cases = [(["--check-batches", "3,4"], "--check-batches needs --max-batch CAP_GIB"),
             (["--max-batch", "80", "--check-batches", "3,x"], "--check-batches"),
             (["--max-batch", "0"], "--max-batch must be a positive number")]
    for extra, needle in cases:
        r = subprocess.run([sys.executable, script, "--check", "--framework", "torch", "--out", str(out), *extra],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 2, r.stderr
        assert needle in r.stderr
        assert not out.exists()


def torchrun(*args, nproc=2, timeout=600):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                           str(SCRIPTS / "measure_step.py"), *args], capture_output=True, text=True, timeout=timeout)


def shard_elements(shape, n, rank):
    """FSDP2's dim-0 shard of a parameter on `rank` of n: torch.chunk's rows (ceil(rows / n) per
    rank, the last ranks short or empty), every other dimension whole."""
    rows, rest = shape[0], 1
    for d in shape[1:]:
        rest *= d
    c = -(-rows // n)
    return max(0, min(rows, (rank + 1) * c) - rank * c) * rest


@pytest.mark.parametrize("dist,framework,extra", [("fsdp2", "torch", []), ("ddp", "hf", ["--checkpointing"])])
def test_data_parallel_ranks_each_measure_their_share(dist, framework, extra, tmp_path):
    """Under torchrun on gloo every rank measures its step and rank 0 writes them all: FSDP2's
    ranks hold dim-0 shards of the fp32 parameters that add up to the model, with their gradients
    and both AdamW moments; DDP's ranks each hold the whole model."""
    out = tmp_path / "dp.json"
    r = torchrun("--check", "--dist", dist, "--framework", framework, *extra, "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["gpus"] == 2 and doc["dist"] == dist and doc["zero"] == (3 if dist == "fsdp2" else 0)
    assert doc["checkpointing"] == bool(extra)
    (run,) = doc["runs"]
    assert [x["rank"] for x in run["ranks"]] == [0, 1]
    assert run["measured_bytes"] == run["ranks"][0]["measured_bytes"]
    sys.path.insert(0, str(SCRIPTS))
    import measure_step as ms_mod
    cfg = doc["model_config"]
    # The parameter shapes, from the model the script builds (built here on the CPU, not sharded).
    with torch.device("cpu"):
        if framework == "torch":
            model = ms_mod.ref.Model(cfg)
        else:
            from transformers import LlamaForCausalLM
            model = LlamaForCausalLM(ms_mod.hf_llama_config(cfg, "sdpa"))
    shapes = [tuple(p.shape) for p in model.parameters()]
    whole = sum(p.numel() for p in model.parameters()) * 4
    assert doc["params"] == whole // 4
    per_rank = []
    for rank, x in enumerate(run["ranks"]):
        mb, db = x["measured_bytes"], x["detail_bytes"]
        local = sum(shard_elements(s, 2, rank) for s in shapes) * 4 if dist == "fsdp2" else whole
        assert db["parameters"] == local
        assert mb["gradients"] == local
        # exp_avg and exp_avg_sq of every local parameter; AdamW's step counters are 4-byte scalars
        assert 2 * local <= mb["optimizer"] <= 2 * local + 4 * len(shapes)
        per_rank.append(local)
    if dist == "fsdp2":
        assert sum(per_rank) == whole


def test_data_parallel_needs_torchrun_and_an_eager_framework(tmp_path):
    out = tmp_path / "dp.json"
    r = subprocess.run([sys.executable, str(SCRIPTS / "measure_step.py"), "--check", "--dist", "fsdp2", "--out",
                        str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "runs under torchrun" in r.stderr
    r = torchrun("--check", "--dist", "ddp", "--compile", "--out", str(out))
    assert r.returncode != 0 and "not --compile" in r.stderr
    assert not out.exists()
