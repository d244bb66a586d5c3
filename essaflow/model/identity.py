"""Model identity by content: the string cache keys (the SFT adapter's, above all) use for a base model.

It changes whenever the weights a load would read change, and only then:

- a GGUF file (or `builtin:smollm2-135m-instruct`): the file's SHA-256 (essaflow.model.gguf);
- a built-in tiny model (`builtin:tiny`, `builtin:tiny-countdown`, ...): its recipe's digest (the checkpoint is a
  pure function of it);
- a local directory: the digest of its files (essaflow.storage.digest_cache, remembered per file stat, so an unchanged
  15 GB checkpoint costs a stat per file, and retrained weights copied over it are a new identity);
- `s3://` prefix: the objects' ETags and sizes (one listing, nothing downloaded);
- a hub id: the commit the revision resolves to (the hub when reachable, else the local HF cache), so `main`
  moving forward is a new identity.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from essaflow.config_base import ConfigError
from essaflow.model.gguf import gguf_digest, is_gguf_name
from essaflow.model.tiny_recipe import BUILTIN_MODELS
from essaflow.storage.hub import hub_commit
from essaflow.storage.sha256 import sha256_bytes

log = logging.getLogger(__name__)

BUILTIN_TINY = "builtin:tiny"


class NamedModel(Protocol):
    """What identity needs of a model config: where the checkpoint is and which revision (no import, no cycle)."""

    name_or_path: str
    revision: str | None


def model_identity(cfg: NamedModel) -> str:
    """`<name_or_path>@<content digest or resolved commit>` (see the module docstring)."""
    name = cfg.name_or_path
    if name in BUILTIN_MODELS:
        return f"{name}@{BUILTIN_MODELS[name].recipe.digest()}"
    if is_gguf_name(name):
        return f"{name}@{gguf_digest(name)[:16]}"
    if name.startswith("s3://"):
        return f"{name}@{s3_version(name)}"
    local = Path(name).expanduser()
    if local.is_dir():
        from essaflow.storage.digest_cache import tree_digest

        return f"{name}@{tree_digest(local)}"
    return f"{name}@{hub_commit(name, cfg.revision, field='model.name_or_path')}"


def s3_version(uri: str) -> str:
    """Digest of the (key, ETag, size) listing under an s3:// prefix; an empty prefix is an error."""
    import json

    from essaflow.storage import open_store

    versions = open_store(uri).versions("")
    if not versions:
        raise ConfigError(f"model.name_or_path: no objects under {uri}")
    return sha256_bytes(json.dumps(versions, sort_keys=True).encode())[:16]


#: what transformers loads weights from (a sharded checkpoint names its shards in an index .json)
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")
#: what a tokenizer is read from (one of them; tokenizer_config.json alone serves byte-level tokenizers)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "*.tiktoken",
                   "tokenizer_config.json")  # fmt: skip


def checkpoint_problem(checkpoint: Path) -> str | None:
    """What keeps a local checkpoint directory from loading, as the words after its path (None: it has config.json,
    weights whose safetensors headers and shard index read, and tokenizer files)."""
    if not (checkpoint / "config.json").is_file():
        return "is a directory without config.json (not a checkpoint)"
    missing = [
        f"{what} ({', '.join(patterns)})"
        for what, patterns in (("weights", WEIGHT_FILES), ("tokenizer files", TOKENIZER_FILES))
        if not any(any(checkpoint.glob(p)) for p in patterns)
    ]
    if missing:
        return f"has config.json but no {' and no '.join(missing)}"
    from essaflow.model.weights_check import weights_problem

    broken = weights_problem(checkpoint)
    return f"has a broken weight file: {broken}" if broken else None
