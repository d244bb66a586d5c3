"""Is a checkpoint's weight file whole? The safetensors headers and shard indexes, read without loading a tensor.

A broken header (a truncated download, a file overwritten by an HTML error page) otherwise surfaces minutes into a
run as `SafetensorError: header too large`, naming no file. The format (github.com/huggingface/safetensors): an
8-byte little-endian header length N, N bytes of JSON ({name: {dtype, shape, data_offsets: [begin, end]}, and an
optional "__metadata__"}), then the tensor bytes, which the largest `end` must reach exactly.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

#: the safetensors library refuses headers above 100 MB ("header too large")
MAX_HEADER = 100_000_000


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with one .safetensors file's framing, as words after its name (None: it reads)."""
    size = path.stat().st_size
    if size < 8:
        return f"is {size} bytes long: too short for a safetensors header (a truncated download?)"
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER or 8 + n > size:
            return f"has a broken header (it claims {n:,} header bytes in a {size:,}-byte file): download it again"
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, ValueError):
            return "has a header that is not JSON: the file is corrupt; download it again"
    if not isinstance(header, dict):
        return "has a header that is not a JSON object: the file is corrupt; download it again"
    return _data_problem(header, size - 8 - n)


def _data_problem(header: dict, data_bytes: int) -> str | None:
    """The tensors' byte ranges must lie in the data section and end where it ends (as safetensors checks)."""
    ends = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return f"has a header entry {name!r} without data_offsets: the file is corrupt; download it again"
        ends.append(offsets[1])
    if max(ends, default=0) != data_bytes:
        return f"holds {data_bytes:,} bytes of tensor data where its header says {max(ends, default=0):,} (truncated?)"
    return None


def index_problem(path: Path) -> str | None:
    """A sharded checkpoint's index (*.index.json): JSON with a weight_map whose shards are all present."""
    try:
        weight_map = json.loads(path.read_text()).get("weight_map")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return "is not a JSON object: the file is corrupt; download it again"
    if not isinstance(weight_map, dict):
        return "has no weight_map (the shard of each tensor)"
    missing = sorted({str(s) for s in weight_map.values()} - {p.name for p in path.parent.iterdir()})
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return f"names shard(s) that are missing: {shown}"
    return None


def weights_problem(checkpoint: Path) -> str | None:
    """The first broken weight file of a checkpoint directory, named, with what is wrong (None: all read)."""
    for index in sorted(checkpoint.glob("*.safetensors.index.json")):
        problem = index_problem(index)
        if problem:
            return f"{index.name} {problem}"
    for weights in sorted(checkpoint.glob("*.safetensors")):
        problem = safetensors_problem(weights)
        if problem:
            return f"{weights.name} {problem}"
    return None
