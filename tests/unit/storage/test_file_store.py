"""FileStore (file:// artifact storage): round trips, atomicity, manifests, integrity; S3Store construction offline."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
from pathlib import Path

import pytest

from essaflow.storage import MANIFEST, FileStore, S3Store, StorageError, open_store, s3_settings_from_env


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    s = open_store(f"file://{tmp_path / 'store'}")
    assert isinstance(s, FileStore)
    return s


def _make_dir(root: Path) -> dict[str, bytes]:
    files = {"weights.bin": os.urandom(3000), "cfg/adapter.json": b'{"r": 8}', "cfg/deep/tok.txt": b"a b c"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def _all_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_uri_forms(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = open_store("file://.essaflow/store")
    assert rel.uri == f"file://{tmp_path}/.essaflow/store"  # relative to the cwd, made absolute
    assert open_store(str(tmp_path / "x")).uri == f"file://{tmp_path}/x"
    assert open_store(f"file://{tmp_path}/y").child("a/b").uri == f"file://{tmp_path}/y/a/b"
    with pytest.raises(StorageError, match="unsupported storage URI scheme 'gs'"):
        open_store("gs://bucket/x")


def test_bytes_json_exists_list_roundtrip(store: FileStore):
    sha = store.put_bytes("runs/1/a.bin", b"\x00\x01")
    assert sha == hashlib.sha256(b"\x00\x01").hexdigest()
    assert store.get_bytes("runs/1/a.bin") == b"\x00\x01"
    store.put_json("runs/1/m.json", {"k": [1.5, None], "s": "é"})
    assert store.get_json("runs/1/m.json") == {"k": [1.5, None], "s": "é"}
    store.put_bytes("runs/10/b.bin", b"b")
    assert store.exists("runs/1/a.bin") and not store.exists("runs/1/zz")
    assert store.list() == ["runs/1/a.bin", "runs/1/m.json", "runs/10/b.bin"]
    assert store.list("runs/1") == ["runs/1/a.bin", "runs/1/m.json"]  # a directory, not a string prefix
    assert store.child("runs").list("10") == ["10/b.bin"]
    assert store.url("runs/1/a.bin") == store.uri + "/runs/1/a.bin"
    store.put_bytes("runs/1/a.bin", b"new")  # overwrite is atomic too
    assert store.get_bytes("runs/1/a.bin") == b"new"
    store.delete_prefix("runs/1")
    assert store.list() == ["runs/10/b.bin"]


@pytest.mark.parametrize("key", ["../escape", "a/../../b", "a//b", "", "a\\b", "./a"])
def test_bad_keys_rejected(store: FileStore, key: str):
    with pytest.raises(StorageError) as ei:
        store.put_bytes(key, b"x")
    assert ei.value.kind == "invalid"


def test_missing_object_names_key(store: FileStore, tmp_path: Path):
    with pytest.raises(StorageError, match="object not found: file://.*/no/such.json") as ei:
        store.get_json("no/such.json")
    assert ei.value.kind == "missing_object"
    with pytest.raises(StorageError, match="no/such.bin"):
        store.download_file("no/such.bin", tmp_path / "dl" / "f.bin")
    assert not (tmp_path / "dl" / "f.bin").exists() and _all_files(tmp_path / "dl") == []


def test_failed_write_leaves_old_content_and_no_temp_file(store: FileStore, monkeypatch):
    store.put_bytes("k.json", b"old")

    def boom(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(StorageError, match="No space left"):
        store.put_bytes("k.json", b"new content")
    monkeypatch.undo()
    assert store.get_bytes("k.json") == b"old"
    assert _all_files(store.root) == ["k.json"]  # the temp file is gone


def test_temp_files_are_never_listed(store: FileStore):
    store.put_bytes("d/a.bin", b"a")
    (store.root / "d" / ".b.bin.essaflow-tmp-123abc").write_bytes(b"half")  # a writer that crashed
    assert store.list() == ["d/a.bin"]


def test_upload_dir_writes_manifest_last_and_download_verifies(store: FileStore, tmp_path: Path, monkeypatch):
    files = _make_dir(tmp_path / "src")
    landed: list[str] = []  # keys in the order they appear in the store (an atomic rename or link each)
    real_replace, real_link = os.replace, os.link

    def replace(src, dst):
        real_replace(src, dst)
        landed.append(Path(dst).relative_to(store.root).as_posix())

    def link(src, dst):
        real_link(src, dst)
        landed.append(Path(dst).relative_to(store.root).as_posix())

    with monkeypatch.context() as m:
        m.setattr(os, "replace", replace)
        m.setattr(os, "link", link)
        manifest = store.upload_dir(tmp_path / "src", "runs/r1/adapter")
    assert landed[-1] == f"runs/r1/adapter/{MANIFEST}"
    assert sorted(landed[:-1]) == sorted(f"runs/r1/adapter/{rel}" for rel in files)
    assert manifest["files"]["weights.bin"] == {
        "sha256": hashlib.sha256(files["weights.bin"]).hexdigest(),
        "size": len(files["weights.bin"]),
    }
    assert store.get_json(f"runs/r1/adapter/{MANIFEST}") == manifest
    assert store.verify("runs/r1/adapter") == manifest

    out = store.download_dir("runs/r1/adapter", tmp_path / "out")
    assert {rel: (out / rel).read_bytes() for rel in _all_files(out) if rel != MANIFEST} == files
    assert json.loads((out / MANIFEST).read_text()) == manifest  # the local copy carries it, written last
    # a second download replaces the directory as a whole (stale files disappear)
    (out / "stale.txt").write_text("x")
    store.download_dir("runs/r1/adapter", out)
    assert _all_files(out) == sorted([*files, MANIFEST])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src", "store"]  # no temp dirs left


def test_interrupted_upload_dir_leaves_no_manifest(store: FileStore, tmp_path: Path, monkeypatch):
    _make_dir(tmp_path / "src")
    real = os.replace
    calls = []

    def flaky(src, dst):  # the second file's write fails
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.EIO, "disk went away")
        real(src, dst)

    with monkeypatch.context() as m, pytest.raises(StorageError, match="disk went away"):
        m.setattr(os, "replace", flaky)
        store.upload_dir(tmp_path / "src", "ckpt/5")
    assert not store.exists(f"ckpt/5/{MANIFEST}") and len(store.list("ckpt/5")) == 1
    with pytest.raises(StorageError, match="incomplete artifact") as ei:
        store.download_dir("ckpt/5", tmp_path / "out")
    assert ei.value.kind == "incomplete" and not (tmp_path / "out").exists()


def test_checksum_mismatch_detected(store: FileStore, tmp_path: Path):
    _make_dir(tmp_path / "src")
    store.upload_dir(tmp_path / "src", "art")
    target = store.root / "art" / "cfg" / "adapter.json"
    target.write_bytes(b'{"r": 9}')  # same size, different content
    with pytest.raises(StorageError, match="checksum mismatch.*cfg/adapter.json") as ei:
        store.download_dir("art", tmp_path / "out")
    assert ei.value.kind == "integrity"
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src", "store"]
    with pytest.raises(StorageError, match="cfg/adapter.json"):
        store.verify("art")
    target.unlink()
    with pytest.raises(StorageError, match="cfg/adapter.json listed in the manifest is missing"):
        store.verify("art")


def test_download_dir_refuses_without_manifest(store: FileStore, tmp_path: Path):
    store.put_bytes("half/a.bin", b"a")
    with pytest.raises(StorageError, match=f"incomplete artifact: no {MANIFEST}"):
        store.download_dir("half", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_manifest_cannot_escape_the_target_dir(store: FileStore, tmp_path: Path):
    store.put_bytes("evil/x", b"x")
    bad = {"files": {"../../pwned.txt": {"sha256": hashlib.sha256(b"x").hexdigest(), "size": 1}}, "created": ""}
    store.put_bytes(f"evil/{MANIFEST}", json.dumps(bad).encode())
    with pytest.raises(StorageError, match="invalid storage key|malformed manifest"):
        store.download_dir("evil", tmp_path / "a" / "out")
    assert not list(tmp_path.rglob("pwned.txt"))


def test_upload_dir_is_idempotent_and_refuses_silent_replacement(store: FileStore, tmp_path: Path):
    _make_dir(tmp_path / "src")
    first = store.upload_dir(tmp_path / "src", "ds/abc")
    assert store.upload_dir(tmp_path / "src", "ds/abc") == first  # same files: a no-op
    (tmp_path / "src" / "weights.bin").write_bytes(b"other")
    with pytest.raises(StorageError, match="different artifact is already committed") as ei:
        store.upload_dir(tmp_path / "src", "ds/abc")
    assert ei.value.kind == "conflict" and store.verify("ds/abc") == first
    second = store.upload_dir(tmp_path / "src", "ds/abc", overwrite=True)
    assert second["files"]["weights.bin"]["size"] == 5 and store.verify("ds/abc") == second


def test_manifest_commit_is_first_writer_wins(store: FileStore):
    # the commit is a conditional create (create_json's, as leases use): the first writer wins, the second is told
    assert store.create_json(f"a/{MANIFEST}", {}) is True
    assert store.create_json(f"a/{MANIFEST}", {"x": 1}) is False
    assert store.get_json(f"a/{MANIFEST}") == {} and store.list("a") == [f"a/{MANIFEST}"]


def test_upload_download_file(store: FileStore, tmp_path: Path):
    src = tmp_path / "f.bin"
    src.write_bytes(b"z" * 5000)
    assert store.upload_file(src, "files/f.bin") == hashlib.sha256(b"z" * 5000).hexdigest()
    out = store.download_file("files/f.bin", tmp_path / "dl" / "f.bin")
    assert out.read_bytes() == b"z" * 5000 and os.listdir(out.parent) == ["f.bin"]
    with pytest.raises(StorageError, match="local file not found"):
        store.upload_file(tmp_path / "missing.bin", "x")


# ------------------------------------------------------------------------------------- S3 settings (no network)


def test_s3_settings_from_env_precedence():
    env = {
        "AWS_ENDPOINT_URL": "http://generic:1",
        "AWS_ENDPOINT_URL_S3": "http://s3specific:2",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "SK",
    }
    assert s3_settings_from_env(env) == {
        "endpoint_url": "http://s3specific:2",
        "region": "eu-west-1",
        "access_key": "AK",
        "secret_key": "SK",
    }
    env |= {"ESSAFLOW_S3_ENDPOINT_URL": "http://ours:3", "AWS_REGION": "us-west-2"}
    got = s3_settings_from_env(env)
    assert got["endpoint_url"] == "http://ours:3" and got["region"] == "us-west-2"
    assert s3_settings_from_env({}) == dict.fromkeys(("endpoint_url", "region", "access_key", "secret_key"))


def test_s3_store_config_and_no_secret_in_repr_or_pickle(monkeypatch):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k, raising=False)
    secret = "sEcReT-do-not-leak-123"
    store = open_store(
        "s3://bkt/pre/fix", endpoint_url="http://user:pw@127.0.0.1:9", access_key="AKID", secret_key=secret
    )
    assert isinstance(store, S3Store) and store.uri == "s3://bkt/pre/fix" and store.child("a").uri.endswith("/a")
    cfg = store.client.meta.config
    assert cfg.s3 == {"addressing_style": "path"} and cfg.retries["mode"] == "standard"
    assert cfg.connect_timeout <= 2 and cfg.read_timeout <= 30
    assert secret not in repr(store) and "pw" not in repr(store) and "AKID" not in repr(store)
    assert secret.encode() not in pickle.dumps(store)
    assert store.url("x/y.json") == "s3://bkt/pre/fix/x/y.json"
