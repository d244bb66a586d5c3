"""essaflow.storage.atomic_dir / manifest / digest: a failing step of a directory swap loses neither copy, the next
reader or writer recovers, fsync covers files, directories and the parent, and a directory whose manifest is missing
or whose bytes changed is incomplete; also the writers that use it (checkpoints, caches, storage). A writer process
killed mid-swap: tests/integration/test_atomic_dir_crash.py."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from essaflow.storage import atomic_dir as ad
from essaflow.storage.manifest import MANIFEST, local_digest, read_manifest, verify_manifest
from essaflow.storage.sha256 import sha256_bytes, sha256_file, table_digest
from tests.support import atomic_dirs as dirs

# ---------------------------------------------------------------------------------------------- digest, manifest


def test_digests_stream_files_and_hash_tables(tmp_path: Path):
    f = tmp_path / "x.bin"
    f.write_bytes(os.urandom(3 * 1024 * 1024 + 7))  # more than one chunk
    assert sha256_file(f) == (sha256_bytes(f.read_bytes()), f.stat().st_size)
    table = {"a": {"sha256": "0" * 64, "size": 1}}
    assert table_digest(table) == table_digest(dict(table)) and len(table_digest(table)) == 16


def test_manifest_is_written_last_and_names_every_other_file(tmp_path: Path):
    final = tmp_path / "art"
    manifest = dirs.write(final, "one")
    assert manifest["label"] == "one" and set(manifest["files"]) == {"payload.txt", "sub/big.bin"}
    assert manifest["files"]["payload.txt"] == {"sha256": sha256_bytes(b"one"), "size": 3}
    assert verify_manifest(final) == manifest and dirs.siblings(final) == []
    assert local_digest(final) == table_digest(manifest["files"])  # the manifest is not part of the content


def test_missing_or_mismatching_manifest_is_incomplete(tmp_path: Path):
    final = tmp_path / "art"
    dirs.write(final, "one")
    (final / "sub" / "big.bin").write_bytes(b"x" * 15000)  # same size, other bytes
    assert verify_manifest(final) is None and ad.committed_manifest(final) is None
    dirs.write(final, "two")
    (final / "payload.txt").write_text("tw")  # size differs
    assert ad.committed_manifest(final) is None
    dirs.write(final, "three")
    (final / "sub" / "big.bin").unlink()  # a listed file is gone
    assert ad.committed_manifest(final) is None
    dirs.write(final, "four")
    (final / MANIFEST).unlink()
    assert ad.committed_manifest(final) is None  # no manifest: incomplete, however complete the files look
    (final / MANIFEST).write_text('{"files": {"payload.txt": ')  # torn manifest
    assert ad.committed_manifest(final) is None


@pytest.mark.parametrize("rel", ["../outside", "/etc/passwd", "a/../../b", "", MANIFEST, "a\\b"])
def test_manifest_cannot_name_a_path_outside_its_directory(tmp_path: Path, rel: str):
    (tmp_path / MANIFEST).write_text(json.dumps({"files": {rel: {"sha256": "0" * 64, "size": 0}}}))
    assert read_manifest(tmp_path) is None


# ---------------------------------------------------------------------------------------------- fsync


def test_fsync_covers_every_file_every_directory_and_the_parent_after_the_rename(tmp_path: Path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", str(dst)))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    final = tmp_path / "art"
    dirs.write(final, "one")
    synced = [Path(p).name for kind, p in events if kind == "fsync"]
    assert {"payload.txt", "big.bin", MANIFEST, "sub"} <= set(synced)  # files and the directories' entries
    assert any(n.startswith(".art.tmp-") for n in synced)  # the staging directory itself
    assert ("fsync", str(tmp_path)) in events[events.index(("rename", str(final))) :]  # parent, after the rename


# ---------------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize("nth", [1, 2])
def test_a_failing_rename_leaves_the_old_copy_and_no_staging(tmp_path: Path, monkeypatch, nth: int):
    final = tmp_path / "art"
    dirs.write(final, "old")
    real, calls = os.rename, [0]

    def failing(src, dst):
        calls[0] += 1
        if calls[0] == nth:
            raise OSError(errno.EIO, "disk on fire")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError, match="disk on fire"):
        dirs.write(final, "new")
    monkeypatch.setattr(os, "rename", real)
    assert dirs.content(final) == "old" and dirs.siblings(final) == []


def test_an_exception_while_writing_leaves_the_old_copy(tmp_path: Path):
    final = tmp_path / "art"
    dirs.write(final, "old")
    with pytest.raises(RuntimeError), ad.atomic_dir(final) as tmp:
        (tmp / "payload.txt").write_text("half")
        raise RuntimeError("trainer died")
    assert dirs.content(final) == "old" and dirs.siblings(final) == []


def test_a_reader_restoring_between_the_writers_renames_makes_the_writer_retry(tmp_path: Path, monkeypatch):
    final = tmp_path / "art"
    dirs.write(final, "old")
    real, calls = os.rename, [0]

    def racing(src, dst):
        calls[0] += 1
        if calls[0] == 2:  # the old copy is aside; a reader puts it back first
            assert ad.recover_dir(final)
        return real(src, dst)

    monkeypatch.setattr(os, "rename", racing)
    dirs.write(final, "new")
    assert dirs.content(final) == "new" and dirs.siblings(final) == []


def test_live_writers_staging_is_left_alone(tmp_path: Path):
    final = tmp_path / "art"
    other = ad.staging_dir(final)  # ours: this process is alive
    dirs.write(final, "one")
    assert dirs.siblings(final) == [other.name]
    foreign = tmp_path / f".art.tmp-otherhost-{os.getpid()}-0123abcd"  # another machine's: cannot tell
    foreign.mkdir()
    dirs.write(final, "two")
    assert set(dirs.siblings(final)) == {other.name, foreign.name}


def test_recover_children_restores_every_missing_directory(tmp_path: Path):
    for name in ("00000001", "00000002"):
        dirs.write(tmp_path / name, name)
    os.rename(tmp_path / "00000002", tmp_path / ".00000002.old-somehost-1-deadbeef")
    ad.recover_children(tmp_path)
    assert dirs.content(tmp_path / "00000002") == "00000002" and dirs.content(tmp_path / "00000001") == "00000001"


# ---------------------------------------------------------------------------------------------- writers using it


def test_essa_checkpoints_use_it_and_a_corrupt_one_is_skipped(tmp_path: Path):
    import numpy as np

    from essaflow.essa.checkpoint import FORMAT, read_checkpoint, write_checkpoint
    from essaflow.storage.checkpoint_dirs import latest_checkpoint

    parts = {"strategy": ({"g": 1}, {"w": np.arange(3.0)})}
    path = write_checkpoint(tmp_path, 1, parts)
    assert read_manifest(path)["generation"] == 1 and latest_checkpoint(tmp_path, FORMAT) == path
    write_checkpoint(tmp_path, 1, parts)  # a retried generation rewrites in place
    assert dirs.siblings(path) == []
    newer = write_checkpoint(tmp_path, 2, {"strategy": ({"g": 2}, {"w": np.arange(2.0)})})
    assert latest_checkpoint(tmp_path, FORMAT) == newer and read_checkpoint(newer)[1]["strategy"][0] == {"g": 2}
    (newer / "strategy.json").write_text('{"g": 3}')
    assert latest_checkpoint(tmp_path, FORMAT) == path  # the corrupt newest one is skipped
    with pytest.raises(ValueError, match="incomplete or corrupt"):
        read_checkpoint(newer)


def test_grpo_commit_uses_it_and_a_corrupt_one_is_skipped(tmp_path: Path):
    from essaflow.grpo import checkpoint as ckpt
    from essaflow.storage.checkpoint_dirs import latest_checkpoint

    for step in (1, 2):
        stage = ckpt.step_staging_dir(tmp_path, step)
        stage.mkdir()
        (stage / "trainer_state.json").write_text(json.dumps({"step": step}))
        ckpt.commit(stage, tmp_path, step)
    assert latest_checkpoint(tmp_path).name == "2" and ckpt.load_trainer_state(tmp_path / "2") == {"step": 2}
    (tmp_path / "2" / "trainer_state.json").write_text('{"step": 9}')
    assert latest_checkpoint(tmp_path).name == "1"


def test_storage_round_trip_keeps_the_local_manifest_and_digest(tmp_path: Path):
    from essaflow.storage import StorageError, open_store

    store = open_store(f"file://{tmp_path / 'store'}")
    local = tmp_path / "adapter"
    manifest = dirs.write(local, "a")
    up = store.upload_dir(local, "adapters/x")  # its own manifest.json is checked, not uploaded as data
    assert up["files"] == manifest["files"] and table_digest(up["files"]) == local_digest(local)
    down = store.download_dir("adapters/x", tmp_path / "copy")
    assert verify_manifest(down)["files"] == manifest["files"]  # downloaded copies carry the manifest too
    (local / "payload.txt").write_text("b")  # now the manifest no longer describes the files
    with pytest.raises(StorageError, match="reserved"):
        store.upload_dir(local, "adapters/y")
