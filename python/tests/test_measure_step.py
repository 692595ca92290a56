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
