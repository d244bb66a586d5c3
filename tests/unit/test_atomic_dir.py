"""essaflow.storage.atomic_dir / manifest / digest: a crash at any step of a directory swap loses neither copy, the next
reader or writer recovers, fsync covers files, directories and the parent, and a directory whose manifest is
missing or whose bytes changed is incomplete. Also the writers that use it (checkpoints, caches, storage)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from essaflow.storage import atomic_dir as ad
from essaflow.storage.digest import sha256_bytes, sha256_file, table_digest
from essaflow.storage.manifest import MANIFEST, local_digest, read_manifest, verify_manifest

REPO = Path(__file__).resolve().parents[2]


def _write(final: Path, text: str) -> dict:
    with ad.atomic_dir(final, label=text) as tmp:
        (tmp / "payload.txt").write_text(text)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "big.bin").write_bytes(text.encode() * 5000)
    return json.loads((final / MANIFEST).read_text())


def _content(final: Path) -> str | None:
    """What a reader sees: the payload of a complete, verified directory, else None."""
    manifest = ad.committed_manifest(final)
    return None if manifest is None else (final / "payload.txt").read_text()


def _siblings(final: Path) -> list[str]:
    return sorted(p.name for p in final.parent.iterdir() if p.name != final.name)


# ---------------------------------------------------------------------------------------------- digest, manifest


def test_digests_stream_files_and_hash_tables(tmp_path: Path):
    f = tmp_path / "x.bin"
    f.write_bytes(os.urandom(3 * 1024 * 1024 + 7))  # more than one chunk
    assert sha256_file(f) == (sha256_bytes(f.read_bytes()), f.stat().st_size)
    table = {"a": {"sha256": "0" * 64, "size": 1}}
    assert table_digest(table) == table_digest(dict(table)) and len(table_digest(table)) == 16


def test_manifest_is_written_last_and_names_every_other_file(tmp_path: Path):
    final = tmp_path / "art"
    manifest = _write(final, "one")
    assert manifest["label"] == "one" and set(manifest["files"]) == {"payload.txt", "sub/big.bin"}
    assert manifest["files"]["payload.txt"] == {"sha256": sha256_bytes(b"one"), "size": 3}
    assert verify_manifest(final) == manifest and _siblings(final) == []
    assert local_digest(final) == table_digest(manifest["files"])  # the manifest is not part of the content


def test_missing_or_mismatching_manifest_is_incomplete(tmp_path: Path):
    final = tmp_path / "art"
    _write(final, "one")
    (final / "sub" / "big.bin").write_bytes(b"x" * 15000)  # same size, other bytes
    assert verify_manifest(final) is None and ad.committed_manifest(final) is None
    _write(final, "two")
    (final / "payload.txt").write_text("tw")  # size differs
    assert ad.committed_manifest(final) is None
    _write(final, "three")
    (final / "sub" / "big.bin").unlink()  # a listed file is gone
    assert ad.committed_manifest(final) is None
    _write(final, "four")
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
    _write(final, "one")
    synced = [Path(p).name for kind, p in events if kind == "fsync"]
    assert {"payload.txt", "big.bin", MANIFEST, "sub"} <= set(synced)  # files and the directories' entries
    assert any(n.startswith(".art.tmp-") for n in synced)  # the staging directory itself
    assert ("fsync", str(tmp_path)) in events[events.index(("rename", str(final))) :]  # parent, after the rename


# ---------------------------------------------------------------------------------------------- crashes

_CRASHER = """
import os, shutil, sys
from pathlib import Path
from essaflow.storage import atomic_dir as ad

final, what, nth = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
module, name = {"rename": (os, "rename"), "fsync": (os, "fsync"), "rmtree": (shutil, "rmtree")}[what]
real, calls = getattr(module, name), [0]

def dying(*args, **kwargs):
    calls[0] += 1
    if calls[0] == nth:
        os._exit(17)  # a crash: no finally, no cleanup
    return real(*args, **kwargs)

setattr(module, name, dying)
with ad.atomic_dir(final, label="new") as tmp:
    (tmp / "payload.txt").write_text("new")
    (tmp / "sub").mkdir()
    (tmp / "sub" / "big.bin").write_bytes(b"new" * 5000)
"""


@pytest.mark.parametrize(
    ("what", "nth", "survivor"),
    [
        ("fsync", 1, "old"),  # while the new files are being synced
        ("fsync", 4, "old"),  # syncing the staging directory's entries
        ("rename", 1, "old"),  # about to move the old copy aside
        ("rename", 2, "old"),  # old moved aside, new not yet in place: a delete-then-rename writer loses both here
        ("fsync", 7, "new"),  # new in place, parent not yet synced
        ("rmtree", 1, "new"),  # new in place, old copy not yet removed
    ],
)
def test_a_crash_at_any_step_leaves_one_complete_copy_and_the_next_write_recovers(
    tmp_path: Path, what: str, nth: int, survivor: str
):
    final = tmp_path / "art"
    _write(final, "old")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _CRASHER, str(final), what, str(nth)], env=env, capture_output=True)
    assert proc.returncode == 17, proc.stderr.decode()  # it did die at that step
    if (what, nth) == ("rename", 2):
        assert not final.exists() and any(".old-" in n for n in _siblings(final))
    assert _content(final) == survivor  # a reader recovers and sees one complete, verified copy
    _write(final, "next")  # the next writer succeeds and clears what the dead writer left
    assert _content(final) == "next" and _siblings(final) == []


@pytest.mark.parametrize("nth", [1, 2])
def test_a_failing_rename_leaves_the_old_copy_and_no_staging(tmp_path: Path, monkeypatch, nth: int):
    final = tmp_path / "art"
    _write(final, "old")
    real, calls = os.rename, [0]

    def failing(src, dst):
        calls[0] += 1
        if calls[0] == nth:
            raise OSError(errno.EIO, "disk on fire")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError, match="disk on fire"):
        _write(final, "new")
    monkeypatch.setattr(os, "rename", real)
    assert _content(final) == "old" and _siblings(final) == []


def test_an_exception_while_writing_leaves_the_old_copy(tmp_path: Path):
    final = tmp_path / "art"
    _write(final, "old")
    with pytest.raises(RuntimeError), ad.atomic_dir(final) as tmp:
        (tmp / "payload.txt").write_text("half")
        raise RuntimeError("trainer died")
    assert _content(final) == "old" and _siblings(final) == []


def test_a_reader_restoring_between_the_writers_renames_makes_the_writer_retry(tmp_path: Path, monkeypatch):
    final = tmp_path / "art"
    _write(final, "old")
    real, calls = os.rename, [0]

    def racing(src, dst):
        calls[0] += 1
        if calls[0] == 2:  # the old copy is aside; a reader puts it back first
            assert ad.recover_dir(final)
        return real(src, dst)

    monkeypatch.setattr(os, "rename", racing)
    _write(final, "new")
    assert _content(final) == "new" and _siblings(final) == []


def test_live_writers_staging_is_left_alone(tmp_path: Path):
    final = tmp_path / "art"
    other = ad.staging_dir(final)  # ours: this process is alive
    _write(final, "one")
    assert _siblings(final) == [other.name]
    foreign = tmp_path / f".art.tmp-otherhost-{os.getpid()}-0123abcd"  # another machine's: cannot tell
    foreign.mkdir()
    _write(final, "two")
    assert set(_siblings(final)) == {other.name, foreign.name}


def test_recover_children_restores_every_missing_directory(tmp_path: Path):
    for name in ("00000001", "00000002"):
        _write(tmp_path / name, name)
    os.rename(tmp_path / "00000002", tmp_path / ".00000002.old-somehost-1-deadbeef")
    ad.recover_children(tmp_path)
    assert _content(tmp_path / "00000002") == "00000002" and _content(tmp_path / "00000001") == "00000001"


# ---------------------------------------------------------------------------------------------- writers using it


def test_essa_checkpoints_use_it_and_a_corrupt_one_is_skipped(tmp_path: Path):
    import numpy as np

    from essaflow.essa.checkpoint import latest_checkpoint, read_checkpoint, write_checkpoint

    parts = {"strategy": ({"g": 1}, {"w": np.arange(3.0)})}
    path = write_checkpoint(tmp_path, 1, parts)
    assert read_manifest(path)["generation"] == 1 and latest_checkpoint(tmp_path) == path
    write_checkpoint(tmp_path, 1, parts)  # a retried generation rewrites in place
    assert _siblings(path) == []
    newer = write_checkpoint(tmp_path, 2, {"strategy": ({"g": 2}, {"w": np.arange(2.0)})})
    assert latest_checkpoint(tmp_path) == newer and read_checkpoint(newer)[1]["strategy"][0] == {"g": 2}
    (newer / "strategy.json").write_text('{"g": 3}')
    assert latest_checkpoint(tmp_path) == path  # the corrupt newest one is skipped
    with pytest.raises(ValueError, match="incomplete or corrupt"):
        read_checkpoint(newer)


def test_grpo_commit_uses_it_and_a_corrupt_one_is_skipped(tmp_path: Path):
    from essaflow.grpo import checkpoint as ckpt

    for step in (1, 2):
        stage = ckpt.staging_dir(tmp_path, step)
        stage.mkdir()
        (stage / "trainer_state.json").write_text(json.dumps({"step": step}))
        ckpt.commit(stage, tmp_path, step)
    assert ckpt.latest_checkpoint(tmp_path).name == "2" and ckpt.load_trainer_state(tmp_path / "2") == {"step": 2}
    (tmp_path / "2" / "trainer_state.json").write_text('{"step": 9}')
    assert ckpt.latest_checkpoint(tmp_path).name == "1"


def test_storage_round_trip_keeps_the_local_manifest_and_digest(tmp_path: Path):
    from essaflow.storage import StorageError, open_store

    store = open_store(f"file://{tmp_path / 'store'}")
    local = tmp_path / "adapter"
    manifest = _write(local, "a")
    up = store.upload_dir(local, "adapters/x")  # its own manifest.json is checked, not uploaded as data
    assert up["files"] == manifest["files"] and table_digest(up["files"]) == local_digest(local)
    down = store.download_dir("adapters/x", tmp_path / "copy")
    assert verify_manifest(down)["files"] == manifest["files"]  # downloaded copies carry the manifest too
    (local / "payload.txt").write_text("b")  # now the manifest no longer describes the files
    with pytest.raises(StorageError, match="reserved"):
        store.upload_dir(local, "adapters/y")
