"""fp8sim: FP8 training numerics and memory, from Python.

The same C++ core as the ``fp8sim`` command line, so every result equals the command's bit for
bit: :func:`quantize` is ``fp8sim quantize``, :func:`cast` is ``fp8sim cast``, :func:`memory` is
``fp8sim memory --json``, :func:`analyze`, :func:`optim_replay` and :func:`report` are
``fp8sim analyze``, ``optim`` and ``report``. Arrays are NumPy arrays; float32, float16 and
bfloat16 (``ml_dtypes``) inputs are read in place when C-contiguous; so are torch CPU tensors,
and then the results are torch tensors too (a tensor on a GPU is refused with a TypeError: this
package computes on the CPU). Bad specs, shapes, configs and traces raise ``ValueError`` with the
library's one-line message; a file that cannot be read raises ``OSError``. The GIL is released
while the library computes, and Ctrl-C stops :func:`analyze`, :func:`optim_replay` and
:func:`report` at the next tensor with ``KeyboardInterrupt``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
import sys
import tempfile
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core, _traces

__all__ = ["Spec", "QuantizeResult", "quantize", "dequantize", "cast", "decode", "memory", "model", "list_models",
           "data_root", "analyze", "optim_replay", "report"]
__version__ = "0.1.0"

# The installed package carries its data (models, recipes, calibration, plots script); a source
# checkout's build finds its tree instead. $FP8SIM_SOURCE_DIR overrides both.
_DATA = Path(__file__).resolve().parent / "data"
if (_DATA / "models").is_dir():
    _core.set_data_root(str(_DATA))


def data_root() -> str:
    """The folder fp8sim reads models/, recipes/ and the calibration from."""
    return _core.data_root()


def list_models() -> list[str]:
    """Names of the committed model configs (what ``fp8sim memory --list-models`` lists)."""
    return _core.list_models()


# ---- arrays ------------------------------------------------------------------------------------

def _contig(x: Any, dtype: Any = None) -> np.ndarray:
    """``x`` as a C-contiguous array, copied only when it is not one (0-d stays 0-d)."""
    a = np.asarray(x, dtype=dtype)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _host_tensor(x: Any) -> None:
    """Refuses a torch tensor that is not in host memory: the package computes on the CPU."""
    if _traces.is_torch_tensor(x) and x.device.type != "cpu":
        raise TypeError(f"a torch tensor on '{x.device}': this fp8sim package computes on the CPU; pass x.cpu() "
                        "(the fp8sim command line runs the GPU kernels)")


def _like(x: Any, a: Optional[np.ndarray]) -> Any:
    """``a`` as a torch tensor sharing its memory when ``x`` is one, else ``a``."""
    if a is None or not _traces.is_torch_tensor(x):
        return a
    import torch
    return torch.from_numpy(a)


def _input(x: Any) -> tuple[np.ndarray, str]:
    """A C-contiguous view of ``x`` the core reads, and its kind (f32, bf16 or fp16). A torch CPU
    tensor is read in place (bfloat16 as its 16-bit patterns)."""
    if _traces.is_torch_tensor(x):
        _host_tensor(x)
        return _traces.array_of(x, "x")
    a = np.asarray(x)
    if a.dtype == np.float32:
        kind = "f32"
    elif a.dtype == np.float16:
        kind = "fp16"
    elif a.dtype.name == "bfloat16":  # ml_dtypes.bfloat16
        kind = "bf16"
    else:
        raise TypeError(f"fp8sim reads float32, float16 or bfloat16 (ml_dtypes) arrays, not {a.dtype}"
                        " (convert with .astype(np.float32))")
    a = _contig(a)
    if kind != "f32":
        a = a.view(np.uint16)  # the 16-bit patterns, read in place
    return a, kind


# ---- specs -------------------------------------------------------------------------------------

class Spec:
    """A quantization spec, ``FORMAT:GRANULARITY[:KEY=VALUE...]`` or a preset (``coat-opt``).

    Parsing validates it (``ValueError`` names the bad token). ``str(spec)`` is the canonical
    text (``Spec(str(s)) == s``); :meth:`nbytes` the exact storage of a tensor of a shape.

    >>> Spec("e4m3:g128:de=coat").nbytes((4096, 4096))
    18350080
    """

    __slots__ = ("_info",)

    def __init__(self, text: Union[str, "Spec"]):
        self._info = _core.spec_info(str(text))

    @property
    def text(self) -> str:
        """The canonical text form."""
        return self._info["text"]

    @property
    def format(self) -> str:
        """Storage format: e4m3, e5m2, bf16 or fp16."""
        return self._info["format"]

    @property
    def granularity(self) -> str:
        """tensor, row, col, group or block."""
        return self._info["granularity"]

    @property
    def fmax(self) -> float:
        """The storage format's largest finite value."""
        return self._info["fmax"]

    def size(self, shape: Sequence[int]) -> dict[str, int]:
        """Exact bytes of a tensor of ``shape``: codes, scales, expand (DE k and c), metadata,
        total, and the number of groups."""
        return _core.spec_size(self.text, [int(d) for d in shape])

    def nbytes(self, shape: Sequence[int]) -> int:
        """Total stored bytes (codes + scales + DE parameters) of a tensor of ``shape``."""
        return self.size(shape)["total"]

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Spec({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spec) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


# ---- quantize ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantizeResult:
    """What :func:`quantize` returns (``fp8sim quantize --out --json --codes`` in one value).

    codes: uint8 FP8 codes (uint16 bit patterns for bf16/fp16 specs), the input's shape.
    scales: float32 dequantizing scale per group, shape (group rows, group cols); None for
        unscaled 16-bit specs.
    k, c: float32 Dynamic Range Expansion exponent and centre per group (DE specs), else None.
    dequantized: float32, the input's shape.
    metrics: the document of ``fp8sim quantize --json`` (mse, nmse, snr_db, bytes, ...), without
        its ``input`` key.
    """

    spec: Spec
    codes: np.ndarray
    scales: Optional[np.ndarray]
    k: Optional[np.ndarray]
    c: Optional[np.ndarray]
    dequantized: np.ndarray
    metrics: dict[str, Any] = field(repr=False)


def quantize(x: Any, spec: Union[str, Spec], *, threads: int = 0) -> QuantizeResult:
    """Quantize ``x`` through ``spec``, dequantize it, and measure the error.

    ``x``: float32, float16 or bfloat16 array of any shape (groups follow the last dimension), or
    a torch CPU tensor of those types (read in place; the result's arrays are then torch tensors).
    A delayed-scaling spec sees one step, as the command does. ``threads=0`` uses every core.
    """
    a, kind = _input(x)
    shape = tuple(x.shape) if _traces.is_torch_tensor(x) else a.shape
    d = _core.quantize(a, kind, str(spec), threads)
    metrics = json.loads(d["metrics"])
    metrics["input_dtype"] = d["input_dtype"]
    # reshape: a 0-d input's results are 0-d too (views, no copies).
    return QuantizeResult(Spec(d["spec"]), _like(x, d["codes"].reshape(shape)), _like(x, d["scales"]),
                          _like(x, d["k"]), _like(x, d["c"]), _like(x, d["dequantized"].reshape(shape)), metrics)


def dequantize(codes: Any, scales: Any = None, spec: Union[str, Spec, None] = None, *, k: Any = None, c: Any = None,
               threads: int = 0) -> np.ndarray:
    """The float32 values of ``codes`` under ``spec`` with its per-group ``scales`` (and ``k``,
    ``c`` for DE). ``dequantize(result)`` takes all of them from a :class:`QuantizeResult`."""
    if isinstance(codes, QuantizeResult):
        r = codes
        codes, scales, spec, k, c = r.codes, r.scales, r.spec, r.k, r.c
    if spec is None:
        raise ValueError("dequantize needs the spec the codes were made with")
    for v in (codes, scales, k, c):
        _host_tensor(v)

    def f32(v: Any) -> Optional[np.ndarray]:
        return None if v is None else _contig(v, np.float32)

    given = codes
    codes = _contig(codes)
    return _like(given, _core.dequantize(codes, f32(scales), str(spec), f32(k), f32(c), threads).reshape(codes.shape))


# ---- casts -------------------------------------------------------------------------------------

def cast(x: Any, format: str = "e4m3", *, saturate: bool = True, rounding: str = "nearest", seed: int = 0,
         threads: int = 0) -> np.ndarray:
    """Element-wise codes (uint8, ``x``'s shape) of float32 / float16 / bfloat16 ``x``, without
    scaling: ``fp8sim cast``. ``format``: e4m3, e5m2, or the OCP MX 4- and 6-bit e2m1 (fp4), e2m3,
    e3m2 (one code per byte, in its low bits; no Inf or NaN, so they always saturate and NaN gives
    +max). ``saturate=False`` lets FP8 overflow become NaN (e4m3) or Inf (e5m2);
    ``rounding="stochastic"`` draws Philox word i for element i under ``seed``."""
    a, kind = _input(x)
    return _like(x, _core.cast(a, kind, format, saturate, rounding, int(seed), threads).reshape(a.shape))


def decode(codes: Any, format: str = "e4m3", *, threads: int = 0) -> np.ndarray:
    """The exact float32 values of ``codes`` (uint8) of a cast format: ``fp8sim cast --decode``
    (for the 4- and 6-bit formats, bits above the format's width are ignored)."""
    _host_tensor(codes)
    c = _contig(codes, np.uint8)
    return _like(codes, _core.decode(c, format, threads).reshape(c.shape))


# ---- models and memory -------------------------------------------------------------------------

ConfigLike = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def _config(config: ConfigLike) -> tuple[str, bool, str]:
    """(text, is_json, origin) for the core: a dict becomes JSON text, a path is checked here so
    that an unreadable file is an OSError."""
    if isinstance(config, Mapping):
        return json.dumps(config), True, "<dict>"
    text = os.fspath(config)
    if "/" in text or text.endswith(".json"):
        if not os.path.isfile(text):
            raise FileNotFoundError(2, "model config: no such file", text)
        with open(text, "rb"):  # PermissionError (an OSError) here, not a ValueError later
            pass
    return text, False, text


def model(config: ConfigLike) -> dict[str, Any]:
    """A model config as fp8sim reads it (the ``model`` entry of ``fp8sim memory --json``):
    sizes, norm, activation, head_dim and parameter counts. ``config``: a name from
    :func:`list_models`, a JSON file (fp8sim's schema or a Hugging Face ``config.json``), or a
    dict of either."""
    return json.loads(_core.model_info(*_config(config)))


def memory(config: ConfigLike, *, recipe: Optional[str] = None, gpus: int = 1, batch: int = 1, seq: int = 2048,
           zero: int = 3, fsdp: int = 1, fsdp_param_dtype: str = "bf16", checkpointing: bool = False,
           free_grads: bool = False, compile: bool = False, framework: str = "torch",
           gpu_mem_gib: Optional[float] = None, compare: bool = False) -> dict[str, Any]:
    """Per-GPU memory of one training step: the document of ``fp8sim memory --json`` with the
    same options (``compare=True``: ``--compare``; ``fsdp=2``: ``--fsdp 2``, FSDP2's buffers
    under ``zero=3``). ``recipe`` defaults to bf16, or to the framework profile's recipe;
    ``gpu_mem_gib`` to an 80 GB H100's 79.65 GiB; ``config`` as for :func:`model`."""
    text, is_json, origin = _config(config)
    return json.loads(_core.memory(text, is_json, origin, recipe, gpus, batch, seq, zero, fsdp, fsdp_param_dtype,
                                   checkpointing, free_grads, compile, framework,
                                   None if gpu_mem_gib is None else float(gpu_mem_gib), compare))


# ---- traces: analyze, optim, report ----------------------------------------------------------------

PathLike = Union[str, "os.PathLike[str]"]
# A trace: a path (HDF5 trace, .safetensors checkpoint, folder of .npy files) or a dict of named
# tensors (NumPy arrays or torch tensors), named as in a .npy folder (docs/python.md).
TraceLike = Union[PathLike, Mapping[str, Any]]

_TENSORS = "<tensors>"  # what the documents name a dict of tensors as


def analyze(trace: TraceLike, recipe: PathLike = "coat", *, step: Optional[int] = None, gemm: bool = True,
            histograms: bool = False, threads: int = 0) -> dict[str, Any]:
    """Every tensor of one step of ``trace`` through a training recipe: the document of
    ``fp8sim analyze TRACE --recipe RECIPE --json`` (``tensors``, ``aggregates``, ``layers``
    with the per-layer forward GEMM error, ``totals``, ...).

    ``trace``: a trace file (HDF5, as :class:`fp8sim.capture.TraceRecorder` writes it), a
    ``.safetensors`` checkpoint, a folder of ``.npy`` files, or a dict ``{name: array}`` of
    float32 / float16 / bfloat16 NumPy arrays or torch tensors, read in memory (nothing is
    written) and named by the rules of a ``.npy`` folder: ``X.grad``, ``X.exp_avg``,
    ``X.exp_avg_sq`` are those roles of parameter ``X``, any other name a weight; integer and
    bool tensors (buffers) are left out, as from a file (the document's ``trace`` is then
    ``"<tensors>"``). ``dict(model.state_dict())`` works as it is. ``recipe``: a name (``fp8sim recipes``) or a recipe
    .json file. ``step``: the captured step (default: the one with the most tensors);
    ``gemm=False`` skips the GEMM error (``--no-gemm``); ``histograms=True`` keeps the
    per-tensor histograms; ``threads=0`` uses every core.
    """
    if isinstance(trace, Mapping):
        return json.loads(_core.analyze(None, _traces.named_arrays(trace), _TENSORS, os.fspath(recipe), step, gemm,
                                        histograms, threads))
    return json.loads(_core.analyze(_traces.trace_path(trace), [], "", os.fspath(recipe), step, gemm, histograms,
                                    threads))


def optim_replay(trace: Optional[PathLike] = None, *, state_dict: Optional[Mapping[str, Any]] = None,
                 params: Any = None, grads: Union[None, bool, Mapping[str, Any]] = None,
                 recipes: Sequence[str] = (), steps: int = 0, update: str = "coat", rounding: str = "nearest",
                 seed: int = 0, table1: bool = True, table1_lowbit: bool = False, table1_step: Optional[int] = None,
                 drift: Optional[bool] = None, threads: int = 0) -> dict[str, Any]:
    """AdamW with low-precision moments against fp32: the document of ``fp8sim optim TRACE
    --json`` (COAT's Table 1 on the moments, the drift of each state recipe over the grad window,
    the fp32 replay, the state memory).

    From a trace file (HDF5 with a grad window, as ``TraceRecorder(..., window=(first,
    count))`` writes it), with the command's options: ``recipes`` (``--recipe``, repeatable:
    presets or ``m=SPEC,v=SPEC``), ``steps``, ``update`` (coat or torch), ``rounding``,
    ``seed``, ``table1=False`` (``--no-table1``), ``table1_lowbit=True`` (``--table1-lowbit``: the
    same measure with E2M1 / E2M3 / E3M2 moments), ``table1_step``, ``drift`` (None: as the
    command, True; False is ``--no-drift``) and ``threads``.

    Or from a PyTorch optimizer state dict, in memory: ``state_dict=optimizer.state_dict()``
    (AdamW's, or Adam's without weight decay; a checkpoint's as ``torch.load`` returns it) and
    ``params``, the parameters in the order the optimizer holds them: ``model.named_parameters()``
    when the optimizer was built from ``model.parameters()``, a dict ``{name: parameter}``, or
    just their names (shapes are checked against the moments; None: ``param.0``, ``param.1``,
    ...). Table 1 and the memory table
    use the moments (step count t) with the param groups' betas and eps. ``grads`` (``True``:
    each parameter's ``.grad``; or a dict ``{name: grad}``) adds the update the moments enter
    next -- weights, grads and the group's current ``lr`` -- as a grad window of one step, and
    ``drift`` (None: on when grads are given) replays it; the fp32 replay needs the weights after
    it, so it is skipped. Param groups must agree on betas and eps (and, with grads, on lr and
    weight_decay); the document's ``source`` is ``"<state_dict>"``.
    """
    if (trace is None) == (state_dict is None):
        raise ValueError("optim_replay takes a trace or a state_dict (one of them)")
    if isinstance(recipes, str):
        recipes = [recipes]
    common = ([str(r) for r in recipes], int(steps), update, rounding, int(seed), table1, table1_lowbit,
              table1_step)
    if state_dict is None:
        if isinstance(trace, Mapping):
            raise TypeError("optim_replay reads a trace file; for tensors in memory give state_dict= (and params=)")
        return json.loads(_core.optim(_traces.trace_path(trace), [], "", "", *common,
                                      True if drift is None else drift, threads))
    tensors, meta = _traces.state_dict_trace(state_dict, params, grads)
    window = "grad_window" in meta
    return json.loads(_core.optim(None, tensors, "<state_dict>", json.dumps(meta), *common,
                                  window if drift is None else drift, threads))


def _summary_table(doc: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The report's summary section as {recipe: {column: cell}}."""
    for sec in doc.get("sections", []):
        if sec.get("id") != "summary":
            continue
        for block in sec.get("blocks", []):
            table = block.get("table")
            if table:
                header = table["header"]
                return {row[0]: dict(zip(header[1:], row[1:])) for row in table["rows"]}
    return {}


def report(trace: Optional[TraceLike] = None, *, model: Union[PathLike, Mapping[str, Any]] = "llama2-7b",
           recipes: Union[None, str, Iterable[str]] = None, gpus: int = 4, batch: int = 2, seq: int = 2048,
           out: PathLike = "report", plots: bool = True, keep_going: bool = False) -> dict[str, Any]:
    """``fp8sim report``: writes the report folder ``out`` (report.json, report.md, report.html,
    plots) and returns what it concluded:

    ``dir``, ``files``, ``plots`` ({status, reason}), ``sections`` ([{title, status, reason}],
    what the command prints), ``summary`` ({recipe: {column: cell}}, the report's Summary
    table), ``verdict`` (report.json's ``data.verdict``: the recommendation, its rule and each
    recipe's figures and decision) and ``report`` (the path of report.json).

    ``trace`` as for :func:`analyze` (None: the committed sample trace; a dict of tensors is
    written to a temporary .safetensors file for the run and removed after); ``model``: a
    name, a config file, or a dict (a Hugging Face config, written to a temporary file);
    ``recipes``: names or recipe files (a list, or one comma-separated string; None: the
    command's default); the other keywords are the command's options (``plots=False`` is
    ``--no-plots``). The plots are drawn with this Python (``$FP8SIM_PYTHON`` overrides it) and
    need matplotlib. The package has no GPU backend, so the GPU sections (compare, bench,
    measured speed) say so, as the command does on a machine without a GPU.
    """
    names: list[str] = []
    for r in [recipes] if isinstance(recipes, str) else (recipes or []):
        names.extend(p.strip() for p in os.fspath(r).split(","))
    if any(not n for n in names):
        raise ValueError(f"recipes {recipes!r} has an empty name")
    python = "" if os.environ.get("FP8SIM_PYTHON") else sys.executable
    with tempfile.TemporaryDirectory(prefix="fp8sim-report-") as tmp:
        if isinstance(trace, Mapping):
            path: Optional[str] = os.path.join(tmp, "tensors.safetensors")
            _traces.write_safetensors(path, _traces.named_arrays(trace))
        else:
            path = None if trace is None else _traces.trace_path(trace)
        if isinstance(model, Mapping):
            model_arg = os.path.join(tmp, "config.json")
            with open(model_arg, "w") as fh:
                json.dump(model, fh)
        else:
            model_arg = _config(model)[0]  # a missing config file is an OSError here
        res = _core.report(path, model_arg, names, int(gpus), int(batch), int(seq), os.fspath(out), plots, keep_going,
                           python, "fp8sim.report (Python)")
    res["report"] = os.path.join(res["dir"], "report.json")
    with open(res["report"]) as fh:
        doc = json.load(fh)
    res["summary"] = _summary_table(doc)
    res["verdict"] = doc.get("data", {}).get("verdict")
    return res
