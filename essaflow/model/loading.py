"""Load base models and tokenizers, attach LoRA, save and load adapters (safetensors only)."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from essaflow.config_base import ConfigError
from essaflow.data.config import DataConfig
from essaflow.model.config import ModelConfig, check_supported
from essaflow.model.devices import resolve_device
from essaflow.model.gguf import gguf_checkpoint, is_gguf_name
from essaflow.model.identity import BUILTIN_TINY, checkpoint_problem, model_identity, s3_version  # noqa: F401 - callers import these here
from essaflow.model.quantization import quantize_base
from essaflow.model.tiny import builtin_path
from essaflow.model.tiny_recipe import BUILTIN_MODELS
from essaflow.storage.atomic_dir import atomic_dir
from essaflow.storage.cache_dir import cache_root

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

WEIGHT_BARS = ("Loading weights",)
"""The tqdm bars transformers (5.x) draws on stderr for every model it loads: several a run, between the pipeline's
own progress lines. Hidden; its other bars (a hub download's) are kept."""


def _hide_weight_bars(factory, args, kwargs, then=None):
    """transformers' tqdm hook: a bar of WEIGHT_BARS is built disabled (it still iterates), any other as asked for,
    through the hook that was set before (`then`) when there was one."""
    if kwargs.get("desc") in WEIGHT_BARS:
        kwargs = {**kwargs, "disable": True}
    return then(factory, args, kwargs) if then is not None else factory(*args, **kwargs)


def quiet_weight_loading() -> None:
    """Hide transformers' weight-loading bars in this process. A transformers without the hook (4.x) draws such a
    bar only for sharded checkpoints and is left as it is."""
    from transformers.utils import logging as hf_logging

    set_hook = getattr(hf_logging, "set_tqdm_hook", None)
    if set_hook is not None:
        set_hook(functools.partial(_hide_weight_bars, then=set_hook(None)))


quiet_weight_loading()  # every stage that loads a model imports this module


def _checked_checkpoint(path: str, name_or_path: str) -> str:
    problem = checkpoint_problem(Path(path).expanduser())
    if problem:  # FileNotFoundError: a retry cannot help (tasks/retry.py), the task fails at once
        where = f"{path} (from {name_or_path})" if path != name_or_path else path
        raise FileNotFoundError(f"model.name_or_path: {where} {problem}")
    return path


def resolve_model_path(name_or_path: str, dtype: str = "float32") -> str:
    """Map a built-in tiny model ('builtin:tiny', 'builtin:tiny-countdown', ...) to its checkpoint (built once), a
    GGUF file (or 'builtin:smollm2-135m-instruct') to its checkpoint dequantized to `dtype` (converted once,
    essaflow.model.gguf), download an s3:// prefix to the cache; pass hub ids through. A local (or downloaded)
    directory without weights or tokenizer files is a FileNotFoundError naming what is missing."""
    if name_or_path in BUILTIN_MODELS:
        return str(builtin_path(name_or_path))
    if is_gguf_name(name_or_path):
        return str(gguf_checkpoint(name_or_path, dtype))
    if name_or_path.startswith("s3://"):
        from essaflow.storage import open_store

        # keyed by the objects' versions too: weights rewritten at the same prefix are downloaded afresh
        name = name_or_path.removeprefix("s3://").rstrip("/").replace("/", "__")
        target = cache_root() / "models" / f"{name}@{s3_version(name_or_path)}"
        if not (target / "config.json").exists():
            open_store(name_or_path).download_dir("", target)
        return _checked_checkpoint(str(target), name_or_path)
    if Path(name_or_path).expanduser().is_dir():
        return _checked_checkpoint(name_or_path, name_or_path)
    return name_or_path


def load_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    path = resolve_model_path(cfg.name_or_path, cfg.dtype)
    tok = AutoTokenizer.from_pretrained(path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    tok.padding_side = "left"  # generation pads on the left; training builds its own right-padded batches
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def token_cap_tokenizer(cfg: ModelConfig | None, data: DataConfig) -> PreTrainedTokenizerBase | None:
    """The tokenizer data.max_prompt_tokens counts prompts with (essaflow.data.prepare): the model's, loaded only
    when the data config sets that cap."""
    return load_tokenizer(cfg) if data.max_prompt_tokens is not None and cfg is not None else None


def load_base_model(cfg: ModelConfig) -> PreTrainedModel:
    """Load the causal LM from disk onto cfg.device (never with remote code unless cfg.trust_remote_code)."""
    torch.set_num_threads(cfg.torch_threads)
    device = resolve_device(cfg.device)
    path = resolve_model_path(cfg.name_or_path, cfg.dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code, dtype=_DTYPES[cfg.dtype]
        )
    except SafetensorError as err:  # corrupt bytes past a sound header: bad input, which no retry or resume fixes
        raise ConfigError(
            f"model.name_or_path: {path}: a weight file does not load ({err}); download it again"
        ) from None
    model.eval()
    return model.to(device)


def attach_lora(model: PreTrainedModel, cfg: ModelConfig, seed: int = 0) -> PeftModel:
    """Attach a fresh LoRA adapter (A Kaiming-uniform, B zero, as peft initialises it)."""
    torch.manual_seed(seed)
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


#: LoraConfig fields peft keeps as sets: written in sorted order, not in this process's hash order
_SET_FIELDS = ("target_modules", "exclude_modules", "modules_to_save")


def stable_adapter_config(out_dir: str | Path) -> None:
    """Sort the set-valued fields of out_dir/adapter_config.json, so the same adapter has the same bytes (and
    digest) whichever process wrote it (peft dumps a set in PYTHONHASHSEED order)."""
    path = Path(out_dir) / "adapter_config.json"
    if not path.exists():
        return
    cfg = json.loads(path.read_text())
    for key in _SET_FIELDS:
        if isinstance(cfg.get(key), list) and all(isinstance(v, str) for v in cfg[key]):
            cfg[key] = sorted(cfg[key])
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def embedding_layers_to_save(model: PeftModel) -> bool | str:
    """peft's `save_embedding_layers` for every adapter essaflow saves (here, ESSA's export, F-GRPO's checkpoints):
    "auto" (peft decides) when the LoRA targets an embedding layer, else False,
    which is what "auto" decides for a vocabulary never resized (essaflow resizes none) without looking for the
    base's config.json at its recorded path: peft warns when that path is gone (an SFT adapter cached by another
    checkout names that checkout's base)."""
    from peft.utils.constants import EMBEDDING_LAYER_NAMES

    targets = [getattr(c, "target_modules", None) for c in getattr(model, "peft_config", {}).values()]
    if any(isinstance(t, str) or any(n in EMBEDDING_LAYER_NAMES for n in t or ()) for t in targets):
        return "auto"
    return False


def save_adapter(
    model: PeftModel,
    out_dir: str | Path,
    tokenizer: PreTrainedTokenizerBase | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write adapter_config.json + adapter_model.safetensors (+ tokenizer) into out_dir.

    `state_dict`: the adapter's tensors by the model's parameter names, when the model holds only shards of them."""
    out = Path(out_dir)
    embeddings = embedding_layers_to_save(model)
    model.save_pretrained(out, safe_serialization=True, state_dict=state_dict, save_embedding_layers=embeddings)
    stable_adapter_config(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def save_adapter_atomic(
    model: PeftModel,
    dest_dir: str | Path,
    tokenizer: PreTrainedTokenizerBase | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """`save_adapter` into a temporary sibling, manifest.json last, then swapped in as dest_dir.

    An existing dest_dir stays in place until the new adapter is complete (see essaflow.storage.atomic_dir).
    """
    dest = Path(dest_dir)
    with atomic_dir(dest) as tmp:
        save_adapter(model, tmp, tokenizer, state_dict)
    return dest


def load_adapter(base: PreTrainedModel, adapter_dir: str | Path, trainable: bool = False) -> PeftModel:
    """Put a saved LoRA adapter on top of a base model."""
    return PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=trainable)


def load_model_with_adapter(
    cfg: ModelConfig, adapter_dir: str | Path | None, quantize: bool = True
) -> tuple[PeftModel, PreTrainedTokenizerBase]:
    """Base + adapter (or a fresh LoRA when adapter_dir is None) and the tokenizer, ready for inference.

    With ``quantize`` (default) the base's linear layers are quantised as cfg.quantization says, after the adapter
    is attached (essaflow.model.quantization); an unsupported setting fails here, before the weights are read.
    """
    if quantize:
        check_supported(cfg.quantization, resolve_device(cfg.device), cfg.dtype)
    tok = load_tokenizer(cfg)
    base = load_base_model(cfg)
    model = attach_lora(base, cfg) if adapter_dir is None else load_adapter(base, adapter_dir)
    model.eval()
    if quantize:
        quantize_base(model, cfg.quantization)
    return model, tok


def export_merged(cfg: ModelConfig, adapter_dir: str | Path | None, out_dir: str | Path) -> Path:
    """Base + adapter merged into plain weights (W0 + scaling B A), saved with the tokenizer: what vLLM serves.

    Loaded on the CPU for the merge, so the caller's GPU holds only the serving engine.
    """
    cpu = cfg.model_copy(update={"device": "cpu"})
    if adapter_dir:  # full precision: W0 + scaling B A cannot be written into a quantised weight
        model, tok = load_model_with_adapter(cpu, adapter_dir, quantize=False)
    else:
        model, tok = load_base_model(cpu), load_tokenizer(cpu)
    merged = model.merge_and_unload() if isinstance(model, PeftModel) else model
    out = Path(out_dir)
    merged.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
