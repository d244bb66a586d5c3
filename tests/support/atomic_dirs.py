"""A small directory written through essaflow.storage.atomic_dir, and what a reader of it sees: shared by the unit
tests of the swap and the integration test that kills a writer at each step."""

from __future__ import annotations

import json
from pathlib import Path

from essaflow.storage import atomic_dir as ad
from essaflow.storage.manifest import MANIFEST


def write(final: Path, text: str) -> dict:
    with ad.atomic_dir(final, label=text) as tmp:
        (tmp / "payload.txt").write_text(text)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "big.bin").write_bytes(text.encode() * 5000)
    return json.loads((final / MANIFEST).read_text())


def content(final: Path) -> str | None:
    """What a reader sees: the payload of a complete, verified directory, else None."""
    manifest = ad.committed_manifest(final)
    return None if manifest is None else (final / "payload.txt").read_text()


def siblings(final: Path) -> list[str]:
    return sorted(p.name for p in final.parent.iterdir() if p.name != final.name)
