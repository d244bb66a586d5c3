"""The S3 server killed (SIGKILL) while a multi-part object is uploading, against a real SeaweedFS: no partial object is
ever visible, and the upload either fails cleanly, naming the operation and the key, or is retried to completion
when the server comes back within the store's retry window."""

from __future__ import annotations

import os
import threading
import time

import pytest

from essaflow.storage import MANIFEST, StorageError
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
MB = 1024 * 1024


def _artifact(tmp_path, size_mb: int = 12):
    """A directory artifact whose big file goes up in 3 parts of 5 MB (S3's smallest part)."""
    d = tmp_path / "artifact"
    d.mkdir(parents=True)
    (d / "weights.bin").write_bytes(os.urandom(size_mb * MB))
    (d / "config.json").write_text('{"r": 8}')
    return d


def _kill_after_first_part(server, store, then=None) -> dict:
    """Kill the server as soon as the first part of a multipart upload has landed (the upload is then mid-way)."""
    seen: dict = {"parts": 0}

    def after_part(**kwargs):
        seen["parts"] += 1
        if seen["parts"] == 1:
            server.service.kill()
            seen["killed_at"] = time.monotonic()
            if then is not None:
                threading.Thread(target=then, daemon=True).start()

    store.multipart_threshold, store.multipart_chunksize = 5 * MB, 5 * MB
    store.client.meta.events.register("after-call.s3.UploadPart", after_part)
    return seen


def _visible(server, prefix: str) -> list[str]:
    listed = server.client().list_objects_v2(Bucket=server.bucket, Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_a_server_killed_mid_upload_leaves_nothing_visible_and_the_error_names_the_upload(seaweedfs_factory, tmp_path):
    server = seaweedfs_factory("midupload")
    store = server.store("m", retry_timeout=2)
    seen = _kill_after_first_part(server, store)

    t0 = time.monotonic()
    with pytest.raises(StorageError) as err:
        store.upload_dir(_artifact(tmp_path), "runs/r1/checkpoints/00000002")
    failed_s = time.monotonic() - t0

    assert seen.get("killed_at"), "the server must have died mid-upload"
    msg = str(err.value)
    assert err.value.kind == "unreachable" and "upload" in msg
    assert "runs/r1/checkpoints/00000002/weights.bin" in msg, msg
    assert failed_s < 30, f"a dead server is reported within the retry window, took {failed_s:.1f}s"
    server.restart()  # serving again before the short-window store reads from it
    # the one small file may have landed before the big one; the big one, cut off, is nowhere; no manifest
    keys = _visible(server, "m/runs/r1/checkpoints/00000002/")
    assert "m/runs/r1/checkpoints/00000002/weights.bin" not in keys and not any(k.endswith(MANIFEST) for k in keys)
    with pytest.raises(StorageError, match="incomplete artifact"):
        store.read_manifest("runs/r1/checkpoints/00000002")
    # once the server is back, the same upload (a resumed run's) completes and verifies
    store.upload_dir(_artifact(tmp_path / "again"), "runs/r1/checkpoints/00000002", overwrite=True)
    store.verify("runs/r1/checkpoints/00000002")


def test_a_server_back_within_the_retry_window_gets_the_upload_retried_to_completion(seaweedfs_factory, tmp_path):
    server = seaweedfs_factory("midupload-back")
    store = server.store("m", retry_timeout=60)
    sends: list[str] = []  # every request the store puts on the wire, retries included
    store.client.meta.events.register("before-send.s3", lambda request, **_: sends.append(request.url))

    def back_once_retried():  # the server returns once the upload has sent twice to the dead one
        at_kill = len(sends)
        wait_until(lambda: len(sends) >= at_kill + 2, 60, "the upload to retry against the dead server")
        server.start()

    seen = _kill_after_first_part(server, store, then=back_once_retried)
    src = _artifact(tmp_path)

    manifest = store.upload_dir(src, "runs/r2/adapter")

    assert seen.get("killed_at"), "the server must have died mid-upload"  # the parts in flight were retried
    assert store.verify("runs/r2/adapter")["files"] == manifest["files"]
    assert store.get_bytes("runs/r2/adapter/weights.bin") == (src / "weights.bin").read_bytes()
