"""Record fp8sim traces (traces/FORMAT.md) from your own PyTorch training loop.

:class:`TraceRecorder` attaches to a model and an optimizer that you already have and writes, for
the steps you choose, the tensors an FP8 recipe would quantize: weights, gradients and AdamW
moments with the optimizer's hyper-parameters (so ``fp8sim optim`` replays them), and the
activations and activation gradients of one forward/backward::

    from fp8sim.capture import TraceRecorder

    with TraceRecorder(model, optimizer, "run.h5", steps=[100], window=(100, 4)) as rec:
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            rec.step(loss)            # optional: stores the step's loss
            optimizer.zero_grad()

Everything is pure Python over torch and h5py, both imported when a recorder is made, so
``import fp8sim`` works without them. The file is written as tensors arrive (each is copied to
the host and compressed at once) and renamed into place when the recorder closes; an exception
inside the ``with`` block removes the partial file.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import sys
import warnings
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

__all__ = ["TraceRecorder", "TraceWriter", "ROLES", "layer_of", "rank_path"]

FORMAT_NAME = "fp8sim-trace"
FORMAT_VERSION = 1
RECORDER_VERSION = "1.0"

ROLES = ("weight", "grad", "exp_avg", "exp_avg_sq", "activation", "activation_grad")

# Chunks of at most this many bytes: big enough for deflate to work, small enough that a reader
# touching one tensor never inflates more than it needs.
CHUNK_BYTES = 256 * 1024


def _torch():
    try:
        import torch
    except ImportError as e:  # the rest of fp8sim works without PyTorch
        raise ImportError("fp8sim.capture needs PyTorch: pip install torch") from e
    return torch


def _h5py():
    try:
        import h5py
    except ImportError as e:
        raise ImportError("fp8sim.capture writes HDF5 through h5py: pip install h5py") from e
    return h5py


# ---- writer ------------------------------------------------------------------------------------

def _chunk_shape(shape, itemsize):
    """Chunk along the leading axes so one chunk holds at most CHUNK_BYTES."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return None
    row = itemsize * int(np.prod(shape[1:], dtype=np.int64))
    if row <= CHUNK_BYTES:
        return (max(1, min(shape[0], CHUNK_BYTES // max(1, row))),) + shape[1:]
    return (1,) + _chunk_shape(shape[1:], itemsize)


def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def tensor_to_stored(t):
    """``(numpy array as stored, dtype name, source dtype name or None)`` of a torch tensor on any
    device. bfloat16 is kept bit-exactly as its uint16 pattern; float64 (not a trace dtype)
    becomes float32 and the source dtype says so; a DTensor contributes its local shard."""
    torch = _torch()
    t = t.detach()
    if hasattr(t, "to_local"):  # torch.distributed DTensor (FSDP2): this rank's shard
        t = t.to_local()
    source = None
    if t.dtype == torch.float64:
        t, source = t.float(), "float64"
    t = t.cpu().contiguous()
    if t.dtype == torch.float32:
        return t.numpy(), "float32", source
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16), "bfloat16", source
    if t.dtype == torch.float16:
        return t.numpy(), "float16", source
    raise ValueError(f"unsupported tensor dtype {t.dtype} (trace dtypes: float32, bfloat16, float16)")


class TraceWriter:
    """Writes a trace to PATH.tmp.<pid> and renames it into place on :meth:`close`: a failed
    capture never leaves a partial trace behind. ``max_bytes`` bounds the tensor bytes (before
    compression) it accepts; tensors past the bound are skipped and counted."""

    def __init__(self, path, attrs: Mapping[str, Any], max_bytes: Optional[int] = None):
        h5py = _h5py()
        self.path = os.fspath(path)
        self.tmp = f"{self.path}.tmp.{os.getpid()}"
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        # v110 object headers and chunk indexes carry checksums: a corrupted file is detected
        # by HDF5 instead of being misread. HDF5 >= 1.10 reads these files.
        self.f = h5py.File(self.tmp, "w", libver=("v110", "v110"))
        self.f.attrs["format"] = FORMAT_NAME
        self.f.attrs["format_version"] = np.int64(FORMAT_VERSION)
        for k, v in attrs.items():
            if v is not None:
                self.f.attrs[k] = v
        self.f.create_group("steps")
        self.bytes_logical = 0
        self.max_bytes = max_bytes
        self.skipped = 0  # tensors left out by max_bytes

    def step_group(self, step: int, **attrs):
        g = self.f.require_group(f"steps/step_{step:06d}")
        g.attrs["step"] = np.int64(step)
        for k, v in attrs.items():
            if v is not None:
                g.attrs[k] = v
        return g

    def add_tensor(self, step: int, role: str, name: str, t, **attrs):
        """Stores tensor ``t`` as ``steps/step_S/<role>/<name>``; returns the dataset, or None when
        ``max_bytes`` leaves it out. A name already taken in the step gets ``@2``, ``@3``... (a
        module called twice in one forward)."""
        if role not in ROLES:
            raise ValueError(f"unknown role '{role}' (valid: {', '.join(ROLES)})")
        arr, dtype_name, source = tensor_to_stored(t)
        if arr.size == 0:
            return None
        if self.max_bytes is not None and self.bytes_logical + arr.nbytes > self.max_bytes:
            if self.skipped == 0:
                warnings.warn(f"fp8sim.capture: {self.path}: max_bytes={self.max_bytes} reached; further tensors "
                              "are left out (the root attribute 'skipped_tensors' counts them)", stacklevel=3)
            self.skipped += 1
            return None
        g = self.step_group(step).require_group(role)
        key, k = name, 1
        while key in g:
            k += 1
            key = f"{name}@{k}"
        ds = g.create_dataset(key, data=arr, chunks=_chunk_shape(arr.shape, arr.itemsize), shuffle=True,
                              compression="gzip", compression_opts=6, fletcher32=True)
        ds.attrs["role"] = role
        ds.attrs["dtype"] = dtype_name
        ds.attrs["step"] = np.int64(step)
        if source is not None:
            ds.attrs["source_dtype"] = source
        for k2, v in attrs.items():
            if v is None:
                continue
            if isinstance(v, (list, tuple)):
                v = ",".join(str(x) for x in v)
            ds.attrs[k2] = v
        self.bytes_logical += arr.nbytes
        return ds

    def add_meta(self, name: str, arr):
        self.f.create_dataset(name, data=np.asarray(arr))

    def close(self):
        if self.max_bytes is not None:
            self.f.attrs["max_bytes"] = np.int64(self.max_bytes)
            self.f.attrs["skipped_tensors"] = np.int64(self.skipped)
        self.f.close()
        os.replace(self.tmp, self.path)

    def abort(self):
        try:
            self.f.close()
        finally:
            if os.path.exists(self.tmp):
                os.remove(self.tmp)


# ---- names -------------------------------------------------------------------------------------

# Block index from a module path: Llama/Mistral/Qwen2/OLMo/GPT-NeoX "layers.N.", GPT-2 "h.N.",
# "blocks.N.", "layer.N.".
_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")
# Path segments that wrappers insert: DDP's "module.", FSDP's "_fsdp_wrapped_module.", activation
# checkpointing's "_checkpoint_wrapped_module.", torch.compile's "_orig_mod.".
_WRAPPER_RE = re.compile(r"(?:^|(?<=\.))(?:module|_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)\.")
# Linear layers whose input is the attention output: Llama/Mistral/Qwen2/OLMo o_proj, GPT-NeoX
# attention.dense, nn.MultiheadAttention out_proj, GPT-2 attn.c_proj.
_ATTN_OUT_RE = re.compile(r"(?:^|\.)(?:o_proj|out_proj|attention\.dense|attn\.c_proj)$")


def layer_of(name: str) -> int:
    """Transformer block index of a module or parameter path, -1 outside the blocks."""
    m = _LAYER_RE.search("." + name + ".")
    return int(m.group(1)) if m else -1


def clean_name(name: str) -> str:
    """A module path without the segments that DDP, FSDP, checkpointing and compile wrappers add."""
    return _WRAPPER_RE.sub("", name)


def rank_path(path: str, rank: Optional[int]) -> str:
    """The file of one rank: ``{rank}`` in ``path`` is replaced, else ``.rankN`` goes before the
    extension (``run.h5`` -> ``run.rank3.h5``); ``rank=None`` (not distributed) leaves it."""
    path = os.fspath(path)
    if rank is None:
        return path.replace("{rank}", "0") if "{rank}" in path else path
    if "{rank}" in path:
        return path.replace("{rank}", str(rank))
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext}"


def _distributed():
    """(rank, world_size) when torch.distributed is initialized, else None."""
    torch = _torch()
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def _module_kind(mod) -> str:
    """Parameter op: linear, norm, embedding or other."""
    nn = _torch().nn
    if isinstance(mod, nn.Linear):
        return "linear"
    if isinstance(mod, nn.Embedding):
        return "embedding"
    if _is_norm(mod):
        return "norm"
    return "other"


def _is_norm(mod) -> bool:
    nn = _torch().nn
    types = tuple(t for t in (nn.LayerNorm, getattr(nn, "RMSNorm", None), nn.GroupNorm) if t is not None)
    # Hugging Face norms are their own classes: LlamaRMSNorm, Qwen2RMSNorm, MistralRMSNorm,
    # OlmoLayerNorm, ...
    return isinstance(mod, types) or type(mod).__name__.endswith(("Norm", "NormF", "Norm2d"))


_SILU_NAMES = ("silu", "swish")
_ACT_TYPES_NAMES = ("SiLU", "GELU", "ReLU", "Tanh", "Sigmoid", "Mish", "ELU", "SELU", "CELU", "LeakyReLU", "Softplus",
                    "Hardswish", "Hardsigmoid", "ReLU6", "GLU")


def _act_op(mod) -> Optional[str]:
    """``silu_input`` for SiLU modules, ``act_input`` for other activation functions (nn.GELU,
    transformers' GELUActivation, NewGELUActivation, ...), None for anything else."""
    cls = type(mod).__name__
    if cls in _ACT_TYPES_NAMES or cls.endswith("Activation") or cls.startswith(("GELU", "PytorchGELU")):
        return "silu_input" if any(s in cls.lower() for s in _SILU_NAMES) else "act_input"
    return None


def _class_name(m):
    """The model's class name. FSDP2's fully_shard swaps a module's class for a subclass named
    FSDP<name>; the trace names the model's own class."""
    name = type(m).__name__
    if name.startswith("FSDP") and any(c.__name__ == name[4:] for c in type(m).__mro__[1:]):
        return name[4:]
    return name


def _unwrap_model(model):
    """The module under DDP / FSDP / compile wrappers (for its Hugging Face config)."""
    seen = 0
    while seen < 8:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None or inner is model:
            break
        model, seen = inner, seen + 1
    return model


def _unwrap_optimizer(opt):
    """The torch optimizer under wrappers that keep it in ``.optimizer`` (Accelerate, DeepSpeed)."""
    torch = _torch()
    seen = 0
    while seen < 8 and not type(opt).__module__.startswith("torch.optim"):
        inner = getattr(opt, "optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer):
            break
        opt, seen = inner, seen + 1
    return opt


def _state_step(st) -> Optional[int]:
    if "step" not in st:
        return None
    s = st["step"]
    return int(s.item() if hasattr(s, "item") else s)


def _float(v):
    return float(v.item() if hasattr(v, "item") else v)


def _autocast_dtype(device_type: str):
    """The dtype autocast runs lower-precision ops in on this device type, or None when off."""
    torch = _torch()
    try:
        on = torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4: no device argument
        on = torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()
    if not on:
        return None
    try:
        return torch.get_autocast_dtype(device_type)
    except AttributeError:
        return torch.get_autocast_cpu_dtype() if device_type == "cpu" else torch.get_autocast_gpu_dtype()


StepsLike = Union[int, Iterable[int]]
ModulesLike = Union[None, Sequence[str], Mapping[str, Any], Callable[[str, Any], Any]]


def _parse_steps(steps: StepsLike) -> set:
    if isinstance(steps, int):
        return {steps}
    out = set()
    for s in steps:
        if isinstance(s, int) or (hasattr(s, "__index__") and not isinstance(s, bool)):
            out.add(int(s))
        else:
            raise TypeError(f"steps holds {s!r}: give optimizer step numbers (1-based ints)")
    return out


# ---- the recorder ------------------------------------------------------------------------------

class TraceRecorder:
    """Records a trace of the training loop that drives ``model`` and ``optimizer``.

    Steps are optimizer steps, 1-based: step S is the S-th ``optimizer.step()`` counting the
    steps the optimizer's state already holds (a resumed run keeps its numbering). For each step
    S in ``steps`` the trace holds, as traces/FORMAT.md defines them:

    - ``weight``, ``exp_avg``, ``exp_avg_sq``: the values entering update S, and ``grad``: what
      update S consumes (after clipping and unscaling); read by a pre-hook on
      ``optimizer.step()``; the step group carries the update's ``lr`` and ``adamw_step``;
    - ``activation`` and ``activation_grad``: from the first forward/backward of step S (the
      first micro-batch under gradient accumulation) run with grad enabled and the model in
      training mode: the input of every linear layer (one tensor for q/k/v and gate/up, with all
      consumers in ``modules``; the o_proj input as ``attn_output``), the input of every norm and
      the output of a norm that no linear layer consumes (``norm_output``), the input of every
      activation function (``silu_input`` / ``act_input``), the operands of a Hugging Face
      SwiGLU multiply (``mul_input``) and the branches its blocks add to the residual stream
      (``residual_add``), which have no module (:meth:`_attach_moduleless` says what maps to
      what), the gradient of every linear output, and the inputs of the modules that
      ``modules`` adds. Under ``torch.autocast`` a
      linear input is stored in the dtype the matmul computes in (``cast_from`` names the dtype
      it arrived in); bf16 models store bf16 tensors as they are.

    ``window=(first, count)`` stores a grad window for ``fp8sim optim``: the state entering
    ``first``, the grads and lr of ``count`` steps, and the state after them (in step
    ``first + count``), for the parameters matching ``window_params`` (a regex; default all).

    Options: ``roles`` limits what full dumps store; ``params`` (regex) limits their parameters;
    ``modules`` hooks more modules: a list of names or regexes (their inputs become op
    ``module_input``), a dict ``{regex: op}`` or ``{regex: (op, {arg_index: suffix})}``, or a
    function ``(name, module) -> op | None``; ``layer_stride=n`` keeps the activations of every
    n-th block (``layers=[...]`` names them); ``sequences=k`` and ``tokens=(start, stop)`` cut
    each (batch, seq, ...) activation to a window; ``max_bytes`` bounds the stored tensor bytes.
    Under torch.distributed each rank writes its own file (:func:`rank_path`) with ``rank`` and
    ``world_size`` attributes; sharded parameters (FSDP) are stored as the rank's shard.
    ``attrs`` adds or overrides root attributes (``model_kind``, ``training``, ...).
    """

    def __init__(self, model, optimizer, path, steps: StepsLike = (), *, window: Optional[Sequence[int]] = None,
                 window_params: Optional[str] = None, roles: Iterable[str] = ROLES, params: Optional[str] = None,
                 modules: ModulesLike = None, layer_stride: int = 1, layers: Optional[Iterable[int]] = None,
                 sequences: Optional[int] = None, tokens: Optional[Sequence[int]] = None,
                 max_bytes: Optional[int] = None, attrs: Optional[Mapping[str, Any]] = None):
        torch = _torch()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        self.model = model
        self.optimizer = _unwrap_optimizer(optimizer)
        if not isinstance(self.optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
        self.steps = _parse_steps(steps)
        self.roles = set(roles)
        bad = self.roles - set(ROLES)
        if bad:
            raise ValueError(f"unknown role(s) {sorted(bad)}; valid: {', '.join(ROLES)}")
        if window is not None:
            if len(window) != 2 or int(window[1]) < 1:
                raise ValueError(f"window wants (first, count) with count >= 1, got {window!r}")
            window = (int(window[0]), int(window[0]) + int(window[1]) - 1)
        self.window = window
        self.window_re = re.compile(window_params) if window_params else None
        self.params_re = re.compile(params) if params else None
        if layer_stride < 1:
            raise ValueError(f"layer_stride must be >= 1, got {layer_stride}")
        self.layer_stride = int(layer_stride)
        self.layers = None if layers is None else {int(x) for x in layers}
        if sequences is not None and sequences < 1:
            raise ValueError(f"sequences must be >= 1, got {sequences}")
        self.sequences = sequences
        if tokens is not None and (len(tokens) != 2 or not 0 <= tokens[0] < tokens[1]):
            raise ValueError(f"tokens wants (start, stop) with 0 <= start < stop, got {tokens!r}")
        self.tokens = None if tokens is None else (int(tokens[0]), int(tokens[1]))

        self.params = self._param_table()
        self.done_steps = max([_state_step(st) or 0 for st in self.optimizer.state.values()] or [0])
        if self.window is not None and self.window[0] <= self.done_steps:
            raise ValueError(f"the grad window starts at step {self.window[0]}, but the optimizer has already "
                             f"taken {self.done_steps} steps")
        if self.window is not None and self.window[0] == 1:
            raise ValueError("the grad window must start after step 1 (AdamW has no state before its first update)")

        dist = _distributed()
        self.rank, self.world_size = dist if dist else (None, None)
        self.path = rank_path(path, self.rank)
        root = self._root_attrs()
        root.update(attrs or {})
        self.writer = TraceWriter(self.path, root, max_bytes=max_bytes)
        self.losses = []
        self._window_t0 = None
        self._window_lrs = []
        self._armed = None          # the step whose activations the current forward records
        self._acts_taken = set()    # steps whose activations are recorded
        self._shared = {}           # input key -> dataset of a linear input (q/k/v share one)
        self._norm_out = {}         # input key -> (norm name, output) not yet consumed by a linear
        self._handles = []
        self._closed = False
        try:
            self._attach(modules)
        except BaseException:
            self.abort()
            raise

    # -- set-up --

    def _param_table(self):
        """One entry per distinct parameter (tied ones once, under their first name, with
        aliases)."""
        seen = {}
        for mod_name, mod in self.model.named_modules():
            for pname, p in mod.named_parameters(recurse=False):
                full = clean_name(f"{mod_name}.{pname}" if mod_name else pname)
                if id(p) in seen:
                    seen[id(p)]["aliases"].append(full)
                    continue
                seen[id(p)] = {"name": full, "param": p, "module": clean_name(mod_name), "op": _module_kind(mod),
                               "aliases": []}
        return list(seen.values())

    def _root_attrs(self):
        torch, h5py = _torch(), _h5py()
        inner = _unwrap_model(self.model)
        cfg = getattr(inner, "config", None)
        if cfg is not None and hasattr(cfg, "to_dict"):
            d = cfg.to_dict()
            arch = d.get("architectures") or [_class_name(inner)]
            d.setdefault("name", d.get("_name_or_path") or arch[0])
            kind = d.get("model_type") or "generic"
            model_config = json.dumps(d, default=str)
        else:
            kind = "generic"
            model_config = json.dumps({"name": _class_name(inner), "kind": "generic", "modules": str(inner)[:4000]})
        opt = self.optimizer
        g = opt.param_groups[0]
        attrs = {
            "producer": f"fp8sim.capture.TraceRecorder {RECORDER_VERSION}; torch {torch.__version__}; "
                        f"h5py {h5py.__version__}; python {platform.python_version()}",
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(["python"] + sys.argv) if sys.argv and sys.argv[0] else None,
            "model_kind": kind,
            "model_config": model_config,
            "optimizer": f"{type(opt).__module__.split('.')[0]}.optim.{type(opt).__name__}"
                         if type(opt).__module__.startswith("torch.optim") else
                         f"{type(opt).__module__}.{type(opt).__name__}",
            "lr": np.float64(_float(g["lr"])) if "lr" in g else None,
        }
        if "betas" in g:
            attrs["beta1"] = np.float64(_float(g["betas"][0]))
            attrs["beta2"] = np.float64(_float(g["betas"][1]))
        for k in ("eps", "weight_decay"):
            if k in g:
                attrs[k] = np.float64(_float(g[k]))
        impl = "fused" if g.get("fused") else "foreach" if g.get("foreach") else "single-tensor or torch's default"
        groups = [{k: (_float(v) if k in ("lr", "eps", "weight_decay") else list(map(_float, v)) if k == "betas" else v)
                   for k, v in grp.items() if k in ("lr", "betas", "eps", "weight_decay")} |
                  {"params": len(grp["params"])} for grp in opt.param_groups]
        attrs["optimizer_options"] = json.dumps({
            "implementation": impl, "amsgrad": bool(g.get("amsgrad", False)), "maximize": bool(g.get("maximize", False)),
            "capturable": bool(g.get("capturable", False)), "differentiable": bool(g.get("differentiable", False)),
            "param_groups": groups})
        attrs["training"] = json.dumps({
            "recorder": {"steps": sorted(self.steps), "window": list(self.window) if self.window else None,
                         "roles": sorted(self.roles), "layer_stride": self.layer_stride,
                         "layers": sorted(self.layers) if self.layers is not None else None,
                         "sequences": self.sequences, "tokens": list(self.tokens) if self.tokens else None},
            "params": int(sum(e["param"].numel() for e in self.params))})
        dist = _distributed()
        if dist:
            attrs["rank"], attrs["world_size"] = np.int64(dist[0]), np.int64(dist[1])
        return attrs

    def _custom_rule(self, modules: ModulesLike):
        """(name, module) -> (op, {arg index: suffix} or None) or None, from the ``modules`` option."""
        if modules is None:
            return lambda name, mod: None
        if callable(modules):
            def rule(name, mod):
                r = modules(name, mod)
                if r is None or r is False:
                    return None
                return ("module_input", None) if r is True else (r, None) if isinstance(r, str) else r
            return rule
        if isinstance(modules, Mapping):
            pats = [(re.compile(k), v if isinstance(v, tuple) else (v, None)) for k, v in modules.items()]
        else:
            pats = [(re.compile(f"^{re.escape(k)}$" if not any(c in k for c in "^$*+?[(|\\") else k),
                     ("module_input", None)) for k in modules]

        def rule(name, mod):
            for pat, spec in pats:
                if pat.search(name):
                    return spec
            return None
        return rule

    def _attach(self, modules: ModulesLike):
        torch = _torch()
        opt = self.optimizer
        self._handles.append(opt.register_step_pre_hook(lambda o, a, k: self._before_update()))
        self._handles.append(opt.register_step_post_hook(lambda o, a, k: self._after_update()))
        if not ({"activation", "activation_grad"} & self.roles) or not self.steps:
            return
        self._handles.append(self.model.register_forward_pre_hook(lambda m, a: self._arm()))
        self._handles.append(self.model.register_forward_hook(lambda m, a, o: self._disarm()))
        rule = self._custom_rule(modules)
        for raw, mod in self.model.named_modules():
            name = clean_name(raw)
            if mod is self.model:
                continue
            custom = rule(name, mod)
            if custom is not None:
                self._handles.append(mod.register_forward_pre_hook(self._custom_hook(name, *custom), with_kwargs=True))
            elif isinstance(mod, torch.nn.Linear):
                self._handles.append(mod.register_forward_pre_hook(self._linear_pre(name)))
                self._handles.append(mod.register_forward_hook(self._linear_post(name)))
            elif _is_norm(mod):
                self._handles.append(mod.register_forward_pre_hook(self._norm_pre(name), with_kwargs=True))
                self._handles.append(mod.register_forward_hook(self._norm_post(name)))
            elif _act_op(mod) is not None:
                self._handles.append(mod.register_forward_pre_hook(self._input_hook(name, _act_op(mod)),
                                                                   with_kwargs=True))
        self._attach_moduleless()

    def _attach_moduleless(self):
        """The ops that Hugging Face blocks compute in ``forward`` without a module of their own,
        recorded from the outputs of the modules that feed them, under the names a model with
        such modules gets (scripts/capture_models.py):

        - the SwiGLU multiply ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` of a module with
          children ``gate_proj``, ``up_proj``, ``down_proj`` and ``act_fn`` (Llama, Mistral,
          Qwen2, OLMo): its operands as ``<mlp>.mul.input0`` (the ``act_fn`` output) and
          ``<mlp>.mul.input1`` (the ``up_proj`` output), op ``mul_input``; its product is the
          ``down_proj`` input (``linear_input``);
        - the residual adds ``x + self_attn(input_layernorm(x))`` and ``x + mlp(...)`` of a
          pre-norm block (children ``input_layernorm``, ``mlp`` and ``self_attn`` or
          ``attention``; Llama, Mistral, Qwen2, OLMo, GPT-NeoX): the branch added, i.e. the
          attention and MLP outputs, as ``<block>.attn_residual.branch`` and
          ``<block>.mlp_residual.branch``, op ``residual_add``; the residual stream itself is the
          next norm's input (``norm_input``; the last block's is the final norm's).

        Blocks with post-norms (OLMo-2, Gemma 2/3: a ``post_feedforward_layernorm`` child) add the
        post-norms' outputs, which are recorded as ``norm_output``; a model whose multiply or
        residual adds are modules of their own (``mul``, ``attn_residual``, ``mlp_residual``) is
        recorded through ``modules=`` instead."""
        for raw, mod in self.model.named_modules():
            name = clean_name(raw)
            kids = dict(mod.named_children())
            if {"gate_proj", "up_proj", "down_proj", "act_fn"} <= kids.keys() and "mul" not in kids:
                mul = f"{name}.mul" if name else "mul"
                for child, operand in (("act_fn", "input0"), ("up_proj", "input1")):
                    self._handles.append(kids[child].register_forward_hook(
                        self._output_hook(f"{mul}.{operand}", "mul_input", mul)))
            attn = "self_attn" if "self_attn" in kids else "attention" if "attention" in kids else None
            if (attn and {"mlp", "input_layernorm"} <= kids.keys() and "post_feedforward_layernorm" not in kids
                    and not {"attn_residual", "mlp_residual"} & kids.keys()):
                for child, add in ((attn, "attn_residual"), ("mlp", "mlp_residual")):
                    res = f"{name}.{add}" if name else add
                    self._handles.append(kids[child].register_forward_hook(
                        self._output_hook(f"{res}.branch", "residual_add", res)))

    # -- activations --

    def _arm(self):
        torch = _torch()
        s = self.done_steps + 1
        if (self._armed is None and s in self.steps and s not in self._acts_taken and torch.is_grad_enabled()
                and self.model.training):
            self._armed = s
            self._shared, self._norm_out = {}, {}

    def _disarm(self):
        if self._armed is None:
            return
        s = self._armed
        # Norm outputs that no linear layer consumed (OLMo-2's post-norms, q/k norms, ...).
        for name, out in self._norm_out.values():
            self._act(s, "activation", f"{name}.output", "norm_output", name, out)
        self._acts_taken.add(s)
        self._armed, self._shared, self._norm_out = None, {}, {}

    def _layer_kept(self, name):
        L = layer_of(name)
        if L < 0:
            return True
        if self.layers is not None:
            return L in self.layers
        return L % self.layer_stride == 0

    def _window_cut(self, t):
        """The activation cut to ``sequences`` and ``tokens`` (tensors of rank >= 3 only)."""
        if t.dim() >= 3:
            if self.sequences is not None:
                t = t[:self.sequences]
            if self.tokens is not None:
                t = t[:, self.tokens[0]:self.tokens[1]]
        return t

    def _act(self, step, role, name, op, module, t, modules=None, **extra):
        if role not in self.roles or not self._layer_kept(module):
            return None
        t = self._window_cut(t)
        tokens = int(t.shape[0] * t.shape[1]) if t.dim() >= 3 else None
        return self.writer.add_tensor(step, role, name, t, op=op, module=module, modules=modules,
                                      layer=np.int64(layer_of(module)),
                                      tokens=np.int64(tokens) if tokens is not None else None, **extra)

    @staticmethod
    def _key(x):
        return (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype)

    @staticmethod
    def _first_tensor(args, kwargs=None):
        torch = _torch()
        for a in args:
            if isinstance(a, torch.Tensor):
                return a
        for a in (kwargs or {}).values():
            if isinstance(a, torch.Tensor):
                return a
        return None

    def _linear_pre(self, name):
        torch = _torch()

        def hook(mod, args):
            s = self._armed
            if s is None or not args or not isinstance(args[0], torch.Tensor):
                return
            x = args[0]
            key = self._key(x)
            ds = self._shared.get(key)
            if ds is not None:  # shared input (q/k/v, gate/up): one tensor, several consumers
                ds.attrs["modules"] = ds.attrs["modules"] + "," + name
                return
            norm = self._norm_out.pop(key, None)
            seen, cast_from = x, None
            ac = _autocast_dtype(x.device.type)
            if ac is not None and x.is_floating_point() and x.dtype != ac:
                seen, cast_from = x.to(ac), _dtype_name(x.dtype)  # what the matmul computes with
            op = "attn_output" if _ATTN_OUT_RE.search(name) else "linear_input"
            ds = self._act(s, "activation", f"{name}.input", op, name, seen, modules=[name], cast_from=cast_from,
                           norm=norm[0] if norm else None)
            if ds is not None:
                self._shared[key] = ds
        return hook

    def _linear_post(self, name):
        torch = _torch()

        def hook(mod, args, out):
            s = self._armed
            if s is None or not isinstance(out, torch.Tensor) or not out.requires_grad:
                return
            if "activation_grad" not in self.roles or not self._layer_kept(name):
                return

            def on_grad(g):
                self._act(s, "activation_grad", f"{name}.output_grad", "linear_output_grad", name, g,
                          modules=[name])
            out.register_hook(on_grad)
        return hook

    def _norm_pre(self, name):
        def hook(mod, args, kwargs):
            if self._armed is None:
                return
            x = self._first_tensor(args, kwargs)
            if x is not None:
                self._act(self._armed, "activation", f"{name}.input", "norm_input", name, x)
        return hook

    def _norm_post(self, name):
        torch = _torch()

        def hook(mod, args, out):
            if self._armed is not None and isinstance(out, torch.Tensor):
                self._norm_out[self._key(out)] = (name, out)
        return hook

    def _input_hook(self, name, op):
        def hook(mod, args, kwargs):
            if self._armed is None:
                return
            x = self._first_tensor(args, kwargs)
            if x is not None:
                self._act(self._armed, "activation", f"{name}.input", op, name, x)
        return hook

    def _output_hook(self, name, op, module):
        """Forward hook storing the module's output (the first tensor of a tuple) as ``name``."""
        torch = _torch()

        def hook(mod, args, out):
            if self._armed is None:
                return
            t = out if isinstance(out, torch.Tensor) else self._first_tensor(out if isinstance(out, tuple) else ())
            if t is not None:
                self._act(self._armed, "activation", name, op, module, t)
        return hook

    def _custom_hook(self, name, op, picks):
        torch = _torch()

        def hook(mod, args, kwargs):
            if self._armed is None:
                return
            if picks:
                for i, suffix in picks.items():
                    if i < len(args) and isinstance(args[i], torch.Tensor):
                        self._act(self._armed, "activation", f"{name}.{suffix}", op, name, args[i])
                return
            ts = [a for a in args if isinstance(a, torch.Tensor)]
            if not ts:
                x = self._first_tensor((), kwargs)
                ts = [x] if x is not None else []
            for i, x in enumerate(ts):
                self._act(self._armed, "activation", f"{name}.input" if len(ts) == 1 else f"{name}.input{i}", op,
                          name, x)
        return hook

    # -- parameters and optimizer state --

    def _in_window(self, s):
        return self.window is not None and self.window[0] <= s <= self.window[1]

    def _window_param(self, e):
        return self.window_re is None or self.window_re.search(e["name"]) is not None

    def _param_attrs(self, e, group):
        return {"module": e["module"], "op": e["op"], "layer": np.int64(layer_of(e["name"])), "param": e["name"],
                "aliases": e["aliases"] or None,
                "lr": np.float64(_float(group["lr"])) if group and "lr" in group else None,
                "weight_decay": np.float64(_float(group["weight_decay"])) if group and "weight_decay" in group else None}

    def _groups(self):
        return {id(p): g for g in self.optimizer.param_groups for p in g["params"]}

    def _before_update(self):
        """Pre-hook of optimizer.step(): weights and moments entering update S, grads of S."""
        s = self.done_steps + 1
        full, win = s in self.steps, self._in_window(s)
        if not (full or win):
            return
        first = win and s == self.window[0]
        groups = self._groups()
        states = self.optimizer.state
        t_before = max([_state_step(st) or 0 for st in states.values()] or [0])
        lr0 = self.optimizer.param_groups[0].get("lr")
        self.writer.step_group(s, lr=np.float64(_float(lr0)) if lr0 is not None else None,
                               adamw_step=np.int64(t_before), contents="full" if full else "window")
        if win:
            self._window_lrs.append(_float(lr0))
            if first:
                self._window_t0 = t_before
        w = self.writer
        for e in self.params:
            p = e["param"]
            in_win = win and self._window_param(e)
            full_p = full and (self.params_re is None or self.params_re.search(e["name"]) is not None)
            if not (full_p or in_win):
                continue
            attrs = self._param_attrs(e, groups.get(id(p)))
            st = states.get(p, {})
            if (full_p and "weight" in self.roles) or (first and in_win):
                w.add_tensor(s, "weight", e["name"], p.data, **attrs)
            if p.grad is not None and ((full_p and "grad" in self.roles) or in_win):
                w.add_tensor(s, "grad", e["name"], p.grad, **attrs)
            for role in ("exp_avg", "exp_avg_sq"):
                if role in st and ((full_p and role in self.roles) or (first and in_win)):
                    w.add_tensor(s, role, e["name"], st[role], **attrs)

    def _after_update(self):
        self.done_steps += 1
        s = self.done_steps
        if self.window is not None and s == self.window[1]:
            nxt = s + 1
            self.writer.step_group(nxt, contents="state",
                                   adamw_step=np.int64(self._window_t0 + len(self._window_lrs)))
            groups = self._groups()
            for e in self.params:
                if not self._window_param(e):
                    continue
                p = e["param"]
                attrs = self._param_attrs(e, groups.get(id(p)))
                self.writer.add_tensor(nxt, "weight", e["name"], p.data, **attrs)
                st = self.optimizer.state.get(p, {})
                for role in ("exp_avg", "exp_avg_sq"):
                    if role in st:
                        self.writer.add_tensor(nxt, role, e["name"], st[role], **attrs)
            self.writer.f.attrs["grad_window"] = np.array(self.window, dtype=np.int64)
        self.writer.f.flush()

    # -- the user's side --

    def step(self, loss=None):
        """Call after ``optimizer.step()``: stores ``loss`` (a float or a tensor) as the loss of the
        step just taken (the step group's ``loss`` when that step is captured, and /train/loss)."""
        if loss is None:
            return
        v = _float(loss.detach() if hasattr(loss, "detach") else loss)
        self.losses.append(v)
        name = f"steps/step_{self.done_steps:06d}"
        if name in self.writer.f:
            self.writer.f[name].attrs["loss"] = np.float64(v)

    def detach(self):
        """Removes every hook; the model and optimizer are as before."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def close(self):
        """Removes the hooks and completes the file (renamed into place); returns its path."""
        if self._closed:
            return self.path
        self.detach()
        self._closed = True
        if self.window is not None and "grad_window" not in self.writer.f.attrs:
            warnings.warn(f"fp8sim.capture: training stopped before the grad window {self.window[0]}.."
                          f"{self.window[1]} ended: {self.path} holds no complete window", stacklevel=2)
        if self.losses:
            self.writer.add_meta("train/loss", np.array(self.losses, dtype=np.float32))
        self.writer.close()
        return self.path

    def abort(self):
        """Removes the hooks and the partial file."""
        self.detach()
        if not self._closed:
            self._closed = True
            self.writer.abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    @property
    def bytes_written(self) -> int:
        """Tensor bytes stored so far, before compression."""
        return self.writer.bytes_logical
