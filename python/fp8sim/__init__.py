"""fp8sim: FP8 training numerics and memory, from Python.

The same C++ core as the ``fp8sim`` command line, so every result equals the command's bit for
bit: :func:`quantize` is ``fp8sim quantize``, :func:`cast` is ``fp8sim cast``, :func:`memory` is
``fp8sim memory --json``. Arrays are NumPy arrays; float32, float16 and bfloat16 (``ml_dtypes``)
inputs are read in place when C-contiguous. Bad specs, shapes and configs raise ``ValueError``
with the library's one-line message; a config file that cannot be read raises ``OSError``.
The GIL is released while the library computes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core

__all__ = ["Spec", "QuantizeResult", "quantize", "dequantize", "cast", "decode", "memory", "model", "list_models",
           "data_root"]
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


def _input(x: Any) -> tuple[np.ndarray, str]:
    """A C-contiguous view of ``x`` the core reads, and its kind (f32, bf16 or fp16)."""
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

    ``x``: float32, float16 or bfloat16 array of any shape (groups follow the last dimension).
    A delayed-scaling spec sees one step, as the command does. ``threads=0`` uses every core.
    """
    a, kind = _input(x)
    d = _core.quantize(a, kind, str(spec), threads)
    metrics = json.loads(d["metrics"])
    metrics["input_dtype"] = d["input_dtype"]
    # reshape: a 0-d input's results are 0-d too (views, no copies).
    return QuantizeResult(Spec(d["spec"]), d["codes"].reshape(a.shape), d["scales"], d["k"], d["c"],
                          d["dequantized"].reshape(a.shape), metrics)


def dequantize(codes: Any, scales: Any = None, spec: Union[str, Spec, None] = None, *, k: Any = None, c: Any = None,
               threads: int = 0) -> np.ndarray:
    """The float32 values of ``codes`` under ``spec`` with its per-group ``scales`` (and ``k``,
    ``c`` for DE). ``dequantize(result)`` takes all of them from a :class:`QuantizeResult`."""
    if isinstance(codes, QuantizeResult):
        r = codes
        codes, scales, spec, k, c = r.codes, r.scales, r.spec, r.k, r.c
    if spec is None:
        raise ValueError("dequantize needs the spec the codes were made with")

    def f32(v: Any) -> Optional[np.ndarray]:
        return None if v is None else _contig(v, np.float32)

    codes = _contig(codes)
    return _core.dequantize(codes, f32(scales), str(spec), f32(k), f32(c), threads).reshape(codes.shape)


# ---- casts -------------------------------------------------------------------------------------

def cast(x: Any, format: str = "e4m3", *, saturate: bool = True, rounding: str = "nearest", seed: int = 0,
         threads: int = 0) -> np.ndarray:
    """Element-wise codes (uint8, ``x``'s shape) of float32 / float16 / bfloat16 ``x``, without
    scaling: ``fp8sim cast``. ``format``: e4m3, e5m2, or the OCP MX 4- and 6-bit e2m1 (fp4), e2m3,
    e3m2 (one code per byte, in its low bits; no Inf or NaN, so they always saturate and NaN gives
    +max). ``saturate=False`` lets FP8 overflow become NaN (e4m3) or Inf (e5m2);
    ``rounding="stochastic"`` draws Philox word i for element i under ``seed``."""
    a, kind = _input(x)
    return _core.cast(a, kind, format, saturate, rounding, int(seed), threads).reshape(a.shape)


def decode(codes: Any, format: str = "e4m3", *, threads: int = 0) -> np.ndarray:
    """The exact float32 values of ``codes`` (uint8) of a cast format: ``fp8sim cast --decode``
    (for the 4- and 6-bit formats, bits above the format's width are ignored)."""
    c = _contig(codes, np.uint8)
    return _core.decode(c, format, threads).reshape(c.shape)


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
           zero: int = 3, checkpointing: bool = False, free_grads: bool = False, compile: bool = False,
           framework: str = "torch", gpu_mem_gib: Optional[float] = None, compare: bool = False) -> dict[str, Any]:
    """Per-GPU memory of one training step: the document of ``fp8sim memory --json`` with the
    same options (``compare=True``: ``--compare``). ``recipe`` defaults to bf16, or to the
    framework profile's recipe; ``gpu_mem_gib`` to an 80 GB H100's 79.65 GiB; ``config`` as for
    :func:`model`."""
    text, is_json, origin = _config(config)
    return json.loads(_core.memory(text, is_json, origin, recipe, gpus, batch, seq, zero, checkpointing, free_grads,
                                   compile, framework,
                                   None if gpu_mem_gib is None else float(gpu_mem_gib), compare))
