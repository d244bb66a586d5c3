"""Directory artifacts: publish a local directory to the store, fetch a verified local copy (cached by digest)."""

from __future__ import annotations

from pathlib import Path

from essaflow.storage import ArtifactStore, open_store
from essaflow.storage.atomic_dir import committed_manifest
from essaflow.storage.cache_dir import cache_root
from essaflow.storage.manifest import manifest_digest


def publish_dir(store: ArtifactStore, prefix: str, local_dir: Path, overwrite: bool = False) -> tuple[str, str]:
    """Upload a directory artifact (a no-op for identical content); returns (uri, digest)."""
    manifest = store.upload_dir(Path(local_dir), prefix, overwrite=overwrite)
    return store.url(prefix), manifest_digest(manifest)


def fetch_dir(uri: str, digest: str | None = None) -> Path:
    """A verified local copy of the directory artifact at `uri`, cached by digest (downloaded once per machine)."""
    store = open_store(uri)
    if digest is None:
        digest = manifest_digest(store.read_manifest(""))
    local = cache_root() / "artifacts" / digest
    if committed_manifest(local) is None:  # absent, or not complete and intact: (re)download, swapped in whole
        store.download_dir("", local)
    return local
