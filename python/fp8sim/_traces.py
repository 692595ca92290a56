"""Inputs of fp8sim.analyze, optim_replay and report: trace paths, named arrays (NumPy or torch)
and PyTorch optimizer state dicts, turned into what the C++ core reads. torch is never imported
here: a torch tensor is recognised by its type's module and converted through its own methods."""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Any, Iterable, Mapping, Optional, Union

import numpy as np

# (name, C-contiguous array, kind) as fp8sim._core takes them; kind: f32, bf16 or fp16.
Named = list[tuple[str, np.ndarray, str]]


def is_torch_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "dtype")


def array_of(x: Any, what: str) -> tuple[np.ndarray, str]:
    """A C-contiguous array the core reads and its kind, from a NumPy array (float32, float16,
    bfloat16) or a torch tensor on any device (copied to the host only when it is not there; a
    DTensor gives its local shard; bfloat16 is passed as its 16-bit patterns)."""
    if is_torch_tensor(x):
        t = x.detach()
        if hasattr(t, "to_local"):  # torch.distributed DTensor: this rank's shard
            t = t.to_local()
        t = t.cpu().contiguous()
        name = str(t.dtype).replace("torch.", "")
        if name == "float32":
            return t.numpy(), "f32"
        if name == "float16":
            return t.numpy().view(np.uint16), "fp16"
        if name == "bfloat16":
            # torch has no uint16 for every version; int16 holds the same bits.
            import torch
            return t.view(torch.int16).numpy().view(np.uint16), "bf16"
        raise TypeError(f"{what}: fp8sim reads float32, float16 or bfloat16 tensors, not {name} (convert with .float())")
    from . import _input  # the package's NumPy path (dtype checks, 16-bit views)
    try:
        return _input(x)
    except TypeError as e:
        raise TypeError(f"{what}: {e}") from None


def _integral(x: Any) -> bool:
    """An integer or bool tensor (a buffer such as position ids), which a trace has no use for."""
    dt = str(x.dtype).replace("torch.", "") if is_torch_tensor(x) else np.asarray(x).dtype.name
    return dt == "bool" or dt.startswith(("int", "uint"))


def named_arrays(tensors: Mapping[str, Any]) -> Named:
    """The mapping's float arrays, in its order, for the core; integer and bool tensors are left
    out, as the readers of .npy folders and checkpoints leave them."""
    out: Named = []
    for name, x in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be strings, not {type(name).__name__} ({name!r})")
        if _integral(x):
            continue
        a, kind = array_of(x, name)
        out.append((name, a, kind))
    return out


def trace_path(trace: Union[str, "os.PathLike[str]"]) -> str:
    """The path as text; a missing or unreadable file is an OSError here, before the core runs."""
    path = os.fspath(trace)
    if not isinstance(path, str):
        path = os.fsdecode(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "trace: no such file or folder", path)
    if not os.access(path, os.R_OK):
        raise PermissionError(13, "trace: cannot be read", path)
    return path


# ---- safetensors (report's in-memory tensors) -----------------------------------------------------

_ST_DTYPE = {"f32": "F32", "bf16": "BF16", "fp16": "F16"}


def write_safetensors(path: str, tensors: Named) -> None:
    """The tensors as a safetensors file (8-byte header length, JSON header, data), bit for bit."""
    header: dict[str, Any] = {}
    offset = 0
    for name, a, kind in tensors:
        header[name] = {"dtype": _ST_DTYPE[kind], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data start 8-byte aligned, as the format recommends
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for _, a, _ in tensors:
            fh.write(a.tobytes())


# ---- PyTorch optimizer state dicts ----------------------------------------------------------------

def _number(v: Any) -> float:
    return float(v.item() if hasattr(v, "item") else v)


def _param_list(params: Any, count: int) -> tuple[list[str], Optional[list[Any]]]:
    """(names, values or None) of the optimizer's parameters in its order."""
    if params is None:
        return [f"param.{i}" for i in range(count)], None
    if isinstance(params, Mapping):
        items = list(params.items())
    else:
        items = list(params)
    if items and all(isinstance(x, str) for x in items):
        names, values = list(items), None
    elif all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in items):
        names, values = [x[0] for x in items], [x[1] for x in items]
    else:
        raise TypeError("params must be a dict {name: parameter}, pairs (name, parameter) such as "
                        "model.named_parameters(), or a list of names")
    if len(names) != count:
        raise ValueError(f"the state dict's param_groups hold {count} parameters; params gives {len(names)} "
                         "(give them in the order the optimizer holds them)")
    if len(set(names)) != len(names):
        raise ValueError("params names a parameter twice")
    return names, values


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def state_dict_trace(state_dict: Mapping[str, Any], params: Any = None,
                     grads: Union[None, bool, Mapping[str, Any]] = None) -> tuple[Named, dict[str, Any]]:
    """The tensors and attributes of a one-step trace holding what AdamW's next update consumes.

    ``state_dict`` is ``torch.optim.AdamW(...).state_dict()`` (or Adam's): ``state`` maps each
    parameter's index to its ``step``, ``exp_avg`` and ``exp_avg_sq``; ``param_groups`` holds
    the hyper-parameters and the indices, whose order (group by group) is the optimizer's order
    of parameters. ``params`` names them in that order (see optim_replay). The trace's step is
    t + 1, where t is the moments' step count: the update they enter, with the group's current
    ``lr``. With ``grads`` (a dict by name, or True for each parameter's ``.grad``) it also
    holds the weights and grads of that update, as a grad window of one step."""
    if not isinstance(state_dict, Mapping) or "state" not in state_dict or "param_groups" not in state_dict:
        raise ValueError("state_dict must be what torch.optim.Optimizer.state_dict() returns: "
                         "{'state': {...}, 'param_groups': [...]}")
    groups = list(state_dict["param_groups"])
    order = [(i, g) for g in groups for i in g["params"]]
    names, values = _param_list(params, len(order))
    state = state_dict["state"]
    if grads is not None and grads is not False and values is None:
        raise ValueError("grads need the weights too: give params as name -> parameter (model.named_parameters())")
    if grads is True:
        grad_of = {n: getattr(v, "grad", None) for n, v in zip(names, values)}
        if all(g is None for g in grad_of.values()):
            raise ValueError("grads=True, but no parameter has a .grad (call it after backward())")
    elif isinstance(grads, Mapping):
        unknown = sorted(set(grads) - set(names))
        if unknown:
            raise ValueError(f"grads names {len(unknown)} parameter(s) that params does not: {', '.join(unknown[:3])}")
        grad_of = dict(grads)
    elif grads is None or grads is False:
        grad_of = None
    else:
        raise TypeError("grads must be None, True (each parameter's .grad) or a dict {name: grad}")

    tensors: Named = []
    used_groups, steps = [], set()
    for k, ((index, group), name) in enumerate(zip(order, names)):
        st = state.get(index)
        if st is None:  # a parameter the optimizer has not updated yet (frozen, or no grad so far)
            continue
        if "exp_avg" not in st or "exp_avg_sq" not in st:
            raise ValueError(f"the state of '{name}' holds no exp_avg / exp_avg_sq ({', '.join(map(str, st))}): "
                             "not an Adam or AdamW state dict")
        if "step" in st:
            steps.add(int(_number(st["step"])))
        used_groups.append(group)
        m, v = st["exp_avg"], st["exp_avg_sq"]
        if values is not None and _shape(values[k]) != _shape(m):
            raise ValueError(f"'{name}' has shape {_shape(values[k])} but its exp_avg {_shape(m)}: give params in "
                             "the order the optimizer holds them")
        g = grad_of.get(name) if grad_of is not None else None
        if g is not None:  # a parameter without a grad stays out of the window (its moments count)
            if _shape(g) != _shape(m):
                raise ValueError(f"the grad of '{name}' has shape {_shape(g)}, its parameter {_shape(m)}")
            tensors.append((name, *array_of(values[k], name)))
            tensors.append((f"{name}.grad", *array_of(g, f"{name}.grad")))
        tensors.append((f"{name}.exp_avg", *array_of(m, f"{name}.exp_avg")))
        tensors.append((f"{name}.exp_avg_sq", *array_of(v, f"{name}.exp_avg_sq")))
    if not used_groups:
        raise ValueError("the state dict holds no optimizer state (take it after the first optimizer.step())")
    if len(steps) > 1:
        raise ValueError(f"the parameters' step counts differ ({min(steps)}..{max(steps)}): the replay needs "
                         "moments of one step count")
    t = steps.pop() if steps else 0

    def common(key: str, what: str) -> Any:
        vals = {json.dumps(g.get(key), default=_number) for g in used_groups}
        if len(vals) > 1:
            raise ValueError(f"the param groups differ in {what} ({', '.join(sorted(vals))}); the replay uses one value")
        return used_groups[0].get(key)

    betas = common("betas", "betas")
    if betas is None:
        raise ValueError("the param groups hold no betas: not an Adam or AdamW state dict")
    g0 = used_groups[0]
    window = grad_of is not None and any(n.endswith(".grad") for n, _, _ in tensors)
    weight_decay = _number(common("weight_decay", "weight_decay") if window else g0.get("weight_decay", 0.0))
    lr = _number(common("lr", "lr") if window else g0.get("lr", 0.0))
    if window and g0.get("decoupled_weight_decay") is False and weight_decay != 0:
        raise ValueError("the state dict is torch.optim.Adam's with weight_decay (an L2 penalty in the gradient); "
                         "the replay models AdamW's decoupled decay")
    impl = "fused" if g0.get("fused") else "foreach" if g0.get("foreach") else "single-tensor or torch's default"
    eps = _number(common("eps", "eps"))
    meta = {
        "step": t + 1, "adamw_step": t, "lr": lr, "contents": "full",
        "producer": "fp8sim.optim_replay(state_dict=...)",
        "optimizer": {"name": "torch.optim.AdamW", "lr": lr, "beta1": _number(betas[0]), "beta2": _number(betas[1]),
                      "eps": eps, "weight_decay": weight_decay,
                      "options": {"implementation": impl, "amsgrad": bool(g0.get("amsgrad", False)),
                                  "maximize": bool(g0.get("maximize", False))}},
    }
    if window:
        meta["grad_window"] = [t + 1, t + 1]
    if not all(math.isfinite(x) for x in (lr, eps, weight_decay)):
        raise ValueError("the state dict's lr, eps and weight_decay must be finite numbers")
    return tensors, meta

