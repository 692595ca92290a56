#!/usr/bin/env python3
"""COAT's own published implementation (PyPI fp8-coat 1.0.11) for scripts/measure_step.py.

The measuring script imports this module and calls, in order:

    setup(sdist_or_dir, workdir)          # COAT on sys.path, optimizer extension built, shims
    model = build_model(cfg, checkpointing, device)
    opt = build_optimizer(model, lr)
    training_setup()                      # how the step loop must run the forward / loss / step
    saved_tensor_terms(cfg, batch, seq)   # what COAT's code keeps for backward, term by term

The model and optimizer are built the way COAT's published Llama training path builds them
(fp8-coat's coat_llama_convert_from_hf.py plus the ToolBench example's train_fp8.py with the HF
Trainer and CoatFP8Trainer.create_optimizer); docs/dev-notes/coat-implementation.md gives the
evidence for every setting and every saved-tensor term. COAT's model code needs transformers
4.45.2; its Triton kernels and optimizer extension need a CUDA device.

Every failure is a RuntimeError whose message is one line starting with "measure_coat:".
"""
import dataclasses
import glob
import os
import sys
import tarfile

_VERSION = "fp8-coat 1.0.11"
_TRANSFORMERS_VERSION = "4.45.2"
_state = {"ready": False, "root": None}


def _fail(stage, err=None):
    """A one-line RuntimeError for `stage`, with the first line of `err` when given."""
    msg = f"measure_coat: {stage}"
    if err is not None:
        text = str(err).strip().splitlines()
        msg += f": {type(err).__name__}: {text[0] if text else ''}"
    return RuntimeError(msg)


def _coat_root(path):
    """The directory that holds COAT's `coat` package inside `path` (itself or one level down)."""
    if os.path.isfile(os.path.join(path, "coat", "__init__.py")):
        return path
    found = sorted(glob.glob(os.path.join(path, "*", "coat", "__init__.py")))
    return os.path.dirname(os.path.dirname(found[0])) if found else None


def _kernels_tarball(root, workdir):
    """A tarball of `root`'s coat/optimizer/kernels, laid out as bench_peers.build_coat expects
    (a top directory holding coat/optimizer/kernels)."""
    path = os.path.join(workdir, "coat_kernels.tar")
    with tarfile.open(path, "w") as t:
        t.add(os.path.join(root, "coat", "optimizer", "kernels"), arcname="coat_src/coat/optimizer/kernels")
    return path


def setup(sdist_or_dir, workdir, build_extension=True):
    """Makes COAT importable: unpacks the sdist (or takes an unpacked directory), puts it first on
    sys.path, builds COAT's optimizer extension with bench_peers.build_coat and registers it under
    the name COAT's optimizer imports (`qoptim_cuda`, fp8-coat coat/optimizer/fp8_adamw.py:23),
    and supplies Optimizer._cuda_graph_capture_health_check where this torch lacks it
    (CoatAdamW.step calls it, fp8_adamw.py:272). build_extension=False skips the CUDA build (for
    checking the rest without a GPU; build_optimizer then fails)."""
    import importlib

    if not os.path.exists(sdist_or_dir):
        raise _fail(f"no such COAT sdist or directory: {sdist_or_dir}")
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as e:
        raise _fail(f"cannot create workdir {workdir}", e)

    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        from bench_peers import build_coat
    except Exception as e:
        raise _fail("cannot import build_coat from scripts/bench_peers.py", e)

    ext_dir = os.path.join(workdir, "coat_ext")
    if os.path.isdir(sdist_or_dir):
        root = _coat_root(sdist_or_dir)
        if root is None:
            raise _fail(f"no coat/__init__.py in {sdist_or_dir} or one level below")
        sdist = None
    else:
        # build_coat unpacks the sdist into ext_dir; the same copy serves as COAT's source.
        sdist = sdist_or_dir
        if not build_extension:
            try:
                with tarfile.open(sdist) as t:
                    try:
                        t.extractall(ext_dir, filter="data")
                    except TypeError:
                        t.extractall(ext_dir)
            except (OSError, tarfile.TarError) as e:
                raise _fail(f"cannot unpack {sdist}", e)
        root = None

    try:
        import torch
    except Exception as e:
        raise _fail("cannot import torch", e)
    try:
        import transformers
    except Exception as e:
        raise _fail("cannot import transformers", e)
    if transformers.__version__ != _TRANSFORMERS_VERSION:
        raise _fail(f"COAT's Llama code needs transformers {_TRANSFORMERS_VERSION}, found "
                    f"{transformers.__version__} at {os.path.dirname(transformers.__file__)}")

    if build_extension:
        if not torch.cuda.is_available():
            raise _fail("building COAT's optimizer extension needs a CUDA device; none is visible")
        try:
            src = sdist if sdist is not None else _kernels_tarball(root, workdir)
            mod = build_coat(src, ext_dir)
        except Exception as e:
            raise _fail("building COAT's optimizer extension (qoptim_cuda) failed", e)
        if not (hasattr(mod, "fp8_adamw_step") and hasattr(mod, "fp8_adamw_expand_step")):
            raise _fail("the built qoptim_cuda lacks fp8_adamw_step / fp8_adamw_expand_step")
        sys.modules["qoptim_cuda"] = mod

    if root is None:
        root = _coat_root(ext_dir)
        if root is None:
            raise _fail(f"no coat/__init__.py in the unpacked {sdist_or_dir}")
    if root not in sys.path:
        sys.path.insert(0, root)

    try:
        coat_llama = importlib.import_module("coat.models.coat_llama")
    except Exception as e:
        raise _fail("cannot import coat.models.coat_llama", e)
    loaded = os.path.abspath(coat_llama.__file__)
    if not loaded.startswith(os.path.abspath(root) + os.sep):
        # Another copy came first on sys.path: accept it only when it is the same source.
        ours = os.path.join(root, "coat", "models", "coat_llama.py")
        with open(loaded, "rb") as a, open(ours, "rb") as b:
            if a.read() != b.read():
                raise _fail(f"coat imported from {loaded} differs from {ours} (another coat is installed)")
    _state["root"] = root
    _state["coat_llama"] = coat_llama

    if build_extension:
        try:
            fp8_adamw = importlib.import_module("coat.optimizer.fp8_adamw")
        except Exception as e:
            raise _fail("cannot import coat.optimizer.fp8_adamw", e)
        cls = fp8_adamw.CoatAdamW
        if not hasattr(cls, "_cuda_graph_capture_health_check"):
            # torch removed this private check; COAT's step calls it only as a guard.
            cls._cuda_graph_capture_health_check = lambda self: None
        _state["CoatAdamW"] = cls
    _state["ready"] = True


def _require_ready():
    if not _state["ready"]:
        raise _fail("setup() has not run (or failed)")


_CFG_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings")


def _check_cfg(cfg):
    missing = [k for k in _CFG_KEYS if k not in cfg]
    if missing:
        raise _fail(f"model config lacks {', '.join(missing)}")
    extra = [k for k in cfg if k not in _CFG_KEYS]
    if extra:
        raise _fail(f"model config has keys this module does not pass on: {', '.join(sorted(extra))}")
    h, nh, kvh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    if h % nh or nh % kvh:
        raise _fail(f"hidden_size {h}, heads {nh}, kv heads {kvh} do not divide")
    for k in ("hidden_size", "intermediate_size"):
        if cfg[k] % 16:
            # COAT quantizes rows in groups of 16 (QuantizationConfig.group_size).
            raise _fail(f"{k} {cfg[k]} is not a multiple of COAT's group size 16")


def quantization_config():
    """COAT's QuantizationConfig as its published scripts create it: HfArgumentParser fills
    the dataclass fields' defaults (fp8-coat coat/utils/_fp8_quantization_config.py:8-31), and the
    ToolBench convert/train scripts pass exactly those values (fabit/fwbit/fobit E4M3, babit/bwbit/
    bobit E5M2, group_size 16, optimizer states E4M3/E4M3 with expansion, qgroup_size 128,
    expand_min 16). The class's own __init__ default for pad_to_multiple_of (0) differs from the
    field default (8); nothing in COAT's Llama path reads it."""
    _require_ready()
    from coat.utils._fp8_quantization_config import QuantizationConfig

    return QuantizationConfig(**{f.name: f.default for f in dataclasses.fields(QuantizationConfig)})


def build_model(cfg, checkpointing, device):
    """A randomly initialised CoatLlamaForCausalLM in fp32 on `device`, in train mode, built as
    COAT's coat_llama_convert_from_hf.py builds it (CoatLlamaConfig + coat_fp8_args,
    AutoModelForCausalLM.from_config: fp32, SDPA attention) with use_cache off as train_fp8.py sets it.
    checkpointing=True wraps every decoder layer in HF's gradient checkpointing with
    use_reentrant=False: CoatLlamaModel honours gradient_checkpointing_enable, but its decoder
    layer returns a nested tuple, which HF's default (reentrant) checkpoint detaches from autograd."""
    _require_ready()
    _check_cfg(cfg)
    import torch
    from transformers import AutoModelForCausalLM

    CoatLlamaConfig = _state["coat_llama"].CoatLlamaConfig
    try:
        config = CoatLlamaConfig(**cfg)
        config.coat_fp8_args = dataclasses.asdict(quantization_config())
        config.use_cache = False
    except Exception as e:
        raise _fail("CoatLlamaConfig rejected the model config", e)
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as e:
        raise _fail("constructing CoatLlamaForCausalLM failed", e)
    if type(model).__name__ != "CoatLlamaForCausalLM":
        raise _fail(f"AutoModelForCausalLM built {type(model).__name__}, not CoatLlamaForCausalLM")
    if model.config._attn_implementation != "sdpa":
        raise _fail(f"attention implementation is {model.config._attn_implementation}, not sdpa")
    model.train()
    if checkpointing:
        try:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        except Exception as e:
            raise _fail("gradient_checkpointing_enable failed", e)
        if not model.model.gradient_checkpointing:
            raise _fail("gradient checkpointing did not switch on in CoatLlamaModel")
    return model


def optimizer_settings():
    """CoatAdamW's settings as CoatFP8Trainer.create_optimizer (fp8-coat coat/fp8_trainer.py:135-168)
    passes them under the ToolBench FP8 script: betas/eps from TrainingArguments' defaults
    (0.9, 0.999, 1e-8), weight decay 0.0 (the script's --weight_decay 0.), two parameter groups
    (decay / no decay by Trainer.get_decay_parameter_names), qargs = the QuantizationConfig."""
    return {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0}


def build_optimizer(model, lr):
    """CoatAdamW over `model` with CoatFP8Trainer.create_optimizer's parameter groups and settings."""
    _require_ready()
    cls = _state.get("CoatAdamW")
    if cls is None:
        raise _fail("setup() ran without building the optimizer extension; CoatAdamW is unavailable")
    from transformers import Trainer

    s = optimizer_settings()
    try:
        decay = set(Trainer.get_decay_parameter_names(None, model))
    except Exception as e:
        raise _fail("Trainer.get_decay_parameter_names failed", e)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in named if n in decay], "weight_decay": s["weight_decay"]},
        {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
    ]
    try:
        return cls(groups, lr=lr, betas=s["betas"], eps=s["eps"], qargs=quantization_config())
    except Exception as e:
        raise _fail("CoatAdamW construction failed", e)


def training_setup():
    """How COAT's published path runs one step on one GPU (HF Trainer, --bf16 True, no FSDP)."""
    return {
        "framework": _VERSION,
        "param_dtype": "float32",
        "grad_dtype": "float32",
        "autocast": True,
        "autocast_dtype": "bfloat16",
        "autocast_scope": "model forward including the loss; backward and optimizer step outside",
        "loss": "model(input_ids=ids, labels=ids).loss (transformers 4.45.2 LlamaForCausalLM.forward: "
                "fp32 logits, torch CrossEntropyLoss; COAT's Liger loss is not reached)",
        "attention_mask": "none (causal SDPA, flash backend)",
        "drop_model_output_before_backward": True,
        "grad_clip_max_norm": 1.0,
        "zero_grad": "set_to_none",
        "fp8_manager_first_microbatch": True,
        "notes": ("Params fp32: from_pretrained without torch_dtype (train_fp8.py) and CoatAdamW's "
                  "kernel reads fp32 scales of the param's dtype (fp8_adamw.py:128, "
                  "fp8_adamw_expand_cuda_kernel.cu:234), so bf16 params cannot step. HF Trainer bf16 "
                  "with accelerate = torch.autocast(bf16) around model.forward. Keep only the loss from "
                  "the output (the Trainer's compute_loss does), so the fp32 logits are freed before "
                  "backward. Trainer clips gradients at max_grad_norm 1.0 by default. "
                  "FP8Manager.is_first_microbatch stays True (nothing in COAT's trainer path clears it), "
                  "so each forward re-derives the FP8 weight scales. COAT's multi-GPU runs use FSDP, "
                  "whose bf16 mixed precision gives the layers bf16 weight copies; on one GPU there is "
                  "no FSDP and the layers see the fp32 weights. The first step creates CoatAdamW's "
                  "state (so its peak differs from later steps) and compiles COAT's Triton kernels: "
                  "measure a later step."),
    }


def _param_shapes(cfg):
    """(name, shape) of every distinct parameter of CoatLlamaForCausalLM for `cfg`."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = h // nh
    out = [("model.embed_tokens.weight", (v, h))]
    per_layer = [("BeforeAttention.q_proj.weight", (nh * hd, h)), ("BeforeAttention.k_proj.weight", (kvh * hd, h)),
                 ("BeforeAttention.v_proj.weight", (kvh * hd, h)), ("AfterAttention.o_proj.weight", (h, nh * hd)),
                 ("MLPResidual.gate_proj.weight", (i, h)), ("MLPResidual.up_proj.weight", (i, h)),
                 ("MLPResidual.down_proj.weight", (h, i)), ("input_layernorm.weight", (h,)),
                 ("post_attention_layernorm.weight", (h,))]
    for layer in range(cfg["num_hidden_layers"]):
        out += [(f"model.layers.{layer}.{n}", s) for n, s in per_layer]
    out.append(("model.norm.weight", (h,)))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (v, h)))
    return out


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def saved_tensor_terms(cfg, batch, seq, checkpointing=False):
    """Every tensor COAT's training step holds, as read from fp8-coat 1.0.11 (and transformers
    4.45.2 / torch for the parts COAT takes from them), for `batch` x `seq` tokens under
    training_setup(). Each entry: name, kind (saved = held from forward to backward; persistent =
    held across steps; optimizer = CoatAdamW state, made at the first step; transient = freed
    within the op that makes it), per ("layer": one per decoder layer; "model": once;
    "param_tensor": summed over every parameter tensor; "linear": one per linear layer, at most one
    layer's worth alive at a time), count, shape, dtype, bytes_each, bytes (= bytes_each * count),
    alloc_bytes (each tensor rounded up to the CUDA caching allocator's 512-byte block),
    bytes_per_token where the term scales with tokens, source, note.
    checkpointing=True lists what non-reentrant checkpointing keeps instead of the layer terms."""
    _check_cfg(cfg)
    if batch < 1 or seq < 2:
        raise _fail(f"batch {batch} / seq {seq} out of range (batch >= 1, seq >= 2)")
    h, i, v, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    hd = h // nh
    T = batch * seq
    Ts = batch * (seq - 1)
    size = {"float8_e4m3fn": 1, "float8_e5m2": 1, "bfloat16": 2, "float32": 4, "int64": 8}
    C = "fp8-coat 1.0.11 "
    TF = "transformers 4.45.2 "
    terms = []

    def rnd(b):
        return (b + 511) // 512 * 512

    def add(name, kind, per, count, shape, dtype, source, note="", tokens=None, nbytes=None):
        each = nbytes if nbytes is not None else _numel(shape) * size[dtype]
        e = {"name": name, "kind": kind, "per": per, "count": count, "shape": list(shape), "dtype": dtype,
             "bytes_each": each, "bytes": each * count, "alloc_bytes": rnd(each) * count, "source": source}
        if tokens:
            e["bytes_per_token"] = each / tokens
        if note:
            e["note"] = note
        terms.append(e)

    # ---- parameters and gradients --------------------------------------------------------
    shapes = _param_shapes(cfg)
    n_params = sum(_numel(s) for _, s in shapes)
    add("params (fp32 master = compute weights)", "persistent", "model", 1, (n_params,), "float32",
        C + "coat/models/coat_llama.py:146-148,372,514-516,1219,1384",
        "AutoModelForCausalLM.from_config / from_pretrained without torch_dtype: fp32")
    add("param grads", "persistent", "model", 1, (n_params,), "float32",
        C + "coat/activation/real_quantization/linear.py:194,292 (bfloat16 weight grad, cast by autograd to the fp32 param)",
        "made in backward, freed by zero_grad(set_to_none)")
    add("FP8 weight scale cache (<linear>_fp8_scale)", "persistent", "layer", 7 * L, (), "float32",
        C + "coat/utils/_fp8_weightcache.py:94-98",
        "weight_memory_efficient=True keeps only the per-tensor scale (0-dim, param dtype) as a module "
        "attribute; the FP8 weight and its transpose are recomputed in every forward and backward")

    # ---- model level, outside the decoder layers ------------------------------------------
    add("input_ids (embedding backward indices)", "saved", "model", 1, (batch, seq), "int64",
        C + "coat/models/coat_llama.py:1273 embed_tokens", "the batch tensor itself", tokens=T)
    add("RoPE cos", "saved", "model", 1, (1, seq, hd), "float32",
        C + "coat/models/coat_llama.py:1303 rotary_emb; " + TF + "models/llama/modeling_llama.py:220,277",
        "one tensor shared by every layer's q*cos / k*cos; fp32 because hidden_states (embedding output) is fp32")
    add("RoPE sin", "saved", "model", 1, (1, seq, hd), "float32",
        C + "coat/models/coat_llama.py:1303 rotary_emb; " + TF + "models/llama/modeling_llama.py:220,277",
        "shared by every layer")
    add("embedding output (fp32)", "transient", "model", 1, (batch, seq, h), "float32",
        C + "coat/activation/real_quantization/func_quantize.py:46-50 Coat_quantize_bgn_func",
        "Coat_quantize_bgn saves nothing; the fp32 residual lives until layer 0's AfterAttention add",
        tokens=T)
    add("final norm: fp32 copy of input", "saved", "model", 1, (batch, seq, h), "float32",
        TF + "models/llama/modeling_llama.py:124-126 LlamaRMSNorm", "saved by pow and mul", tokens=T)
    add("final norm: rsqrt(variance)", "saved", "model", 1, (batch, seq, 1), "float32",
        TF + "models/llama/modeling_llama.py:126 LlamaRMSNorm", tokens=T)
    add("final norm: normalised bf16 (weight * x)", "saved", "model", 1, (batch, seq, h), "bfloat16",
        TF + "models/llama/modeling_llama.py:127 LlamaRMSNorm",
        "fp32 weight * bf16 -> fp32 output", tokens=T)
    add("lm_head input (autocast bf16 copy of the fp32 norm output)", "saved", "model", 1, (batch, seq, h),
        "bfloat16", TF + "models/llama/modeling_llama.py:1214", tokens=T)
    add("lm_head weight bf16 copy (autocast cast cache)", "saved", "model", 1, (v, h), "bfloat16",
        TF + "models/llama/modeling_llama.py:1214", "held by the autocast cache and linear's backward")
    add("logits fp32 (.float())", "transient", "model", 1, (batch, seq, v), "float32",
        TF + "models/llama/modeling_llama.py:1214,1219",
        "part of the model output; freed before backward when only the loss is kept; the bf16 matmul "
        "output (2 B/elem) is freed by the .float()", tokens=T)
    add("shift_logits fp32 contiguous copy", "transient", "model", 1, (Ts, v), "float32",
        TF + "models/llama/modeling_llama.py:1221", "alive together with logits and log_softmax output "
        "at the end of forward", tokens=T)
    add("CrossEntropy log_softmax output", "saved", "model", 1, (Ts, v), "float32",
        TF + "models/llama/modeling_llama.py:1229 CrossEntropyLoss", "torch log_softmax saves its result",
        tokens=T)
    add("CrossEntropy targets (shift_labels)", "saved", "model", 1, (Ts,), "int64",
        TF + "models/llama/modeling_llama.py:1222,1229", tokens=T)

    # ---- per decoder layer ----------------------------------------------------------------
    if checkpointing:
        add("checkpointed layer input: hidden_states (layer 0 fp32, others bf16)", "saved", "layer", L,
            (batch, seq, h), "bfloat16", C + "coat/models/coat_llama.py:1318-1330",
            "layer 0's input is the fp32 embedding output (twice this size)", tokens=T)
        add("checkpointed layer input: quant_hidden_states", "saved", "layer", L, (batch, seq, h),
            "float8_e4m3fn", C + "coat/models/coat_llama.py:1318-1330", tokens=T)
        add("checkpointed layer input: scale_hidden_states", "saved", "layer", L, (batch, seq, h // 16),
            "bfloat16", C + "coat/models/coat_llama.py:1318-1330", tokens=T)
        for where, line in (("BeforeAttention", "280"), ("MLPResidual", "677")):
            add(f"{where} rmsnorm rstd (ctx attribute, not packed by checkpoint hooks)", "saved", "layer", L,
                (T,), "float32", C + f"coat/models/coat_llama.py:{line}; "
                "coat/activation/real_quantization/func_rmsnorm.py:238", tokens=T)
        return terms

    g = 16
    add("BeforeAttention in_x (layer input, FP8)", "saved", "layer", L, (batch, seq, h), "float8_e4m3fn",
        C + "coat/models/coat_llama.py:272 _CoatLlamaBeforeAttentionResidual.forward", tokens=T)
    add("BeforeAttention in_s (1x16 group scales of in_x)", "saved", "layer", L, (batch, seq, h // g), "bfloat16",
        C + "coat/models/coat_llama.py:272; coat/activation/real_quantization/add_fwd.py:178", tokens=T)
    add("BeforeAttention ln_x_t (RMSNorm output, FP8, transposed 2-D)", "saved", "layer", L, (h, T),
        "float8_e4m3fn", C + "coat/models/coat_llama.py:272; coat/activation/real_quantization/func_rmsnorm.py:269",
        "input of the Q/K/V weight-gradient GEMMs", tokens=T)
    add("BeforeAttention ln_s (per-tensor scale)", "saved", "layer", L, (), "bfloat16",
        C + "coat/models/coat_llama.py:272; coat/activation/real_quantization/func_rmsnorm.py:268")
    add("BeforeAttention rstd (ctx.ln_utils)", "saved", "layer", L, (T,), "float32",
        C + "coat/models/coat_llama.py:280; coat/activation/real_quantization/func_rmsnorm.py:238", tokens=T)
    add("SDPA query (bf16 after RoPE, autocast cast)", "saved", "layer", L, (batch, nh, seq, hd), "bfloat16",
        C + "coat/models/coat_llama.py:1037,1062 LlamaSdpaAttentionWithoutLinear",
        "RoPE on the bf16 projection with fp32 cos/sin gives fp32; autocast casts to bf16 for SDPA", tokens=T)
    add("SDPA key (bf16, repeated to all query heads)", "saved", "layer", L, (batch, nh, seq, hd), "bfloat16",
        C + "coat/models/coat_llama.py:1044,1062", "repeat_kv copies kv heads up to num_attention_heads",
        tokens=T)
    add("SDPA value (bf16, repeated to all query heads)", "saved", "layer", L, (batch, nh, seq, hd), "bfloat16",
        C + "coat/models/coat_llama.py:1045,1062", "with num_key_value_heads == num_attention_heads this is "
        "a view of the v_proj output (same size)", tokens=T)
    add("SDPA logsumexp", "saved", "layer", L, (batch, nh, seq), "float32",
        C + "coat/models/coat_llama.py:1062 (torch flash attention)", tokens=T)
    add("AfterAttention flash_x (attention output, bf16) = SDPA's saved output", "saved", "layer", L,
        (batch, seq, nh * hd), "bfloat16", C + "coat/models/coat_llama.py:440 _CoatLlamaAfterAttentionResidual",
        "COAT keeps the bf16 attention output (not its FP8 copy) and re-quantizes it in backward (:476); "
        "it shares storage with the output SDPA saves, so it is counted once", tokens=T)
    add("AfterAttention flash_s (per-tensor scale)", "saved", "layer", L, (), "bfloat16",
        C + "coat/models/coat_llama.py:440; coat/activation/real_quantization/_quantize_pertensor.py:139")
    add("MLPResidual in_x (FP8)", "saved", "layer", L, (batch, seq, h), "float8_e4m3fn",
        C + "coat/models/coat_llama.py:665 _CoatLlamaMLPResidual.forward", tokens=T)
    add("MLPResidual in_s (1x16 group scales)", "saved", "layer", L, (batch, seq, h // g), "bfloat16",
        C + "coat/models/coat_llama.py:665; coat/activation/real_quantization/add_fwd.py:178", tokens=T)
    add("MLPResidual ln_x_t (RMSNorm output, FP8, transposed 2-D)", "saved", "layer", L, (h, T), "float8_e4m3fn",
        C + "coat/models/coat_llama.py:665; coat/activation/real_quantization/func_rmsnorm.py:269", tokens=T)
    add("MLPResidual ln_s", "saved", "layer", L, (), "bfloat16", C + "coat/models/coat_llama.py:665")
    add("MLPResidual rstd (ctx.ln_utils)", "saved", "layer", L, (T,), "float32",
        C + "coat/models/coat_llama.py:677; coat/activation/real_quantization/func_rmsnorm.py:238", tokens=T)
    add("MLPResidual gate_x (gate_proj output, FP8)", "saved", "layer", L, (batch, seq, i), "float8_e4m3fn",
        C + "coat/models/coat_llama.py:647,665; coat/activation/real_quantization/linear.py:190", tokens=T)
    add("MLPResidual gate_s (1x16 group scales)", "saved", "layer", L, (batch, seq, i // g), "bfloat16",
        C + "coat/models/coat_llama.py:647,665; coat/activation/real_quantization/linear.py:192", tokens=T)
    add("MLPResidual up_x (up_proj output, FP8)", "saved", "layer", L, (batch, seq, i), "float8_e4m3fn",
        C + "coat/models/coat_llama.py:648,665", tokens=T)
    add("MLPResidual up_s (1x16 group scales)", "saved", "layer", L, (batch, seq, i // g), "bfloat16",
        C + "coat/models/coat_llama.py:648,665", tokens=T)
    add("MLPResidual silu_x (SiLU output, FP8)", "saved", "layer", L, (batch, seq, i), "float8_e4m3fn",
        C + "coat/models/coat_llama.py:651,665; coat/activation/real_quantization/silu_fwd.py:166", tokens=T)
    add("MLPResidual silu_s (1x16 group scales)", "saved", "layer", L, (batch, seq, i // g), "bfloat16",
        C + "coat/models/coat_llama.py:651,665; coat/activation/real_quantization/silu_fwd.py:167", tokens=T)
    add("MLPResidual mul_x_t (SiLU*up, FP8, transposed 2-D)", "saved", "layer", L, (i, T), "float8_e4m3fn",
        C + "coat/models/coat_llama.py:654,665; coat/activation/real_quantization/mul_fwd.py:243",
        "input of the down_proj weight-gradient GEMM; the untransposed FP8 product is not kept", tokens=T)
    add("MLPResidual mul_s", "saved", "layer", L, (), "bfloat16",
        C + "coat/models/coat_llama.py:665; coat/activation/real_quantization/mul_fwd.py:242")

    # ---- transients of the FP8 weight path (one linear's worth at a time) -----------------
    for name, shape in (("q_proj", (nh * hd, h)), ("gate_proj", (i, h))):
        n = _numel(shape)
        add(f"forward weight-scale pass, {name}: |W| fp32 temp + FP8 W + FP8 W^T", "transient", "linear", 1,
            shape, "float32", C + "coat/utils/_fp8_weightcache.py:94; "
            "coat/activation/real_quantization/_division_transpose.py:168-175",
            "x.abs() (4 B/elem) then two FP8 copies (1 B/elem each), all dropped at once", nbytes=6 * n)
    add("forward FP8 weights of one module (Q,K,V or gate,up,down)", "transient", "linear", 1, (), "float8_e4m3fn",
        C + "coat/models/coat_llama.py:263-265,643-645; coat/activation/real_quantization/_division.py:174",
        "freed when the module's forward returns; the MLP holds gate+up+down at once",
        nbytes=3 * i * h)

    # ---- optimizer ------------------------------------------------------------------------
    q = 128
    groups_total = sum((_numel(s) + q - 1) // q for _, s in shapes)
    add("CoatAdamW exp_avg (FP8 E4M3, param shape)", "optimizer", "param_tensor", 1, (n_params,),
        "float8_e4m3fn", C + "coat/optimizer/fp8_adamw.py:127")
    add("CoatAdamW exp_avg_sq (FP8 E4M3, param shape)", "optimizer", "param_tensor", 1, (n_params,),
        "float8_e4m3fn", C + "coat/optimizer/fp8_adamw.py:133")
    for nm, line in (("scale_exp_avg", 128), ("expand_exp_avg", 130), ("sqrt_minmax_exp_avg", 131),
                     ("scale_exp_avg_sq", 134), ("expand_exp_avg_sq", 136), ("sqrt_minmax_exp_avg_sq", 137)):
        add(f"CoatAdamW {nm} (param dtype, ceil(numel/128) per tensor)", "optimizer", "param_tensor", 1,
            (groups_total,), "float32", C + f"coat/optimizer/fp8_adamw.py:124,{line}",
            "one value per 128-element group of the flattened tensor, rounded up per tensor; "
            "the kernel reads these as fp32 (fp8_adamw_expand_cuda_kernel.cu:234-240)")
    add("CoatAdamW step counters", "optimizer", "param_tensor", len(shapes), (), "float32",
        C + "coat/optimizer/fp8_adamw.py:119", "CPU tensors (torch.tensor(0.0)): no GPU memory", nbytes=0)
    return terms


if __name__ == "__main__":  # a module of measure_step.py, not a command
    print(__doc__.strip() + "\n\nRun scripts/measure_step.py --framework coat --help.")
