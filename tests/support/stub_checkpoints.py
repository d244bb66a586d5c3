"""Checkpoint directories with the files check-config looks for and nothing a model could load from: `{}` JSON, and
safetensors files holding no tensor (an 8-byte header length and the header `{}`: whole, as the header check asks)."""

from __future__ import annotations

import json
from pathlib import Path

#: a safetensors file with no tensors: header length 2 (little-endian u64), header `{}`, no data
EMPTY_SAFETENSORS = (2).to_bytes(8, "little") + b"{}"


def stub_checkpoint(directory: Path, *files: str) -> Path:
    """`directory` holding config.json and `files`, each empty of content but well framed."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", *files):
        path = directory / name
        if name.endswith(".safetensors"):
            path.write_bytes(EMPTY_SAFETENSORS)
        elif name.endswith(".index.json"):
            shards = [f for f in files if f.endswith(".safetensors")]
            path.write_text(json.dumps({"weight_map": {f"t{i}": shard for i, shard in enumerate(shards)}}))
        else:
            path.write_text("{}")
    return directory
