"""Caches keyed by content: a data file or checkpoint changed at the same path never hits the old cache entry;
unchanged bytes hit it without being rehashed (the digest memo)."""

from __future__ import annotations

import hashlib
import json
import os
from types import SimpleNamespace

import pytest

from essaflow.config import DataConfig, ModelConfig, SFTConfig
from essaflow.config_base import ConfigError
from essaflow.data import source_fingerprint
from essaflow.data.synthetic import synthetic_problems
from essaflow.model.loading import model_identity
from essaflow.storage import FileStore, digest_cache
from essaflow.storage.hub import hub_commit, is_hub_id
from essaflow.training.warm_start import sft_key
from tests.support.waiting import wait_until


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ESSAFLOW_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def hashes(monkeypatch):
    """Counts the files actually read for hashing; files count as settled at once (no 2 s racy window)."""
    monkeypatch.setattr(digest_cache, "RACY_NS", -(10**18))
    calls: list[str] = []
    real = digest_cache.sha256_file

    def counting(path):
        calls.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(digest_cache, "sha256_file", counting)
    return calls


def _rewrite_same_size_and_mtime(path, data: bytes) -> None:
    """What `cp -p` of retrained weights does: new bytes, same size, the old mtime restored. Written again until the
    ctime differs (the kernel's clock ticks every few ms: a write within the same tick keeps the old ctime)."""
    st = path.stat()
    assert len(data) == st.st_size

    def rewritten() -> bool:
        path.write_bytes(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return path.stat().st_ctime_ns != st.st_ctime_ns

    wait_until(rewritten, 5, f"a new ctime on {path.name}", every=0.001)


def _checkpoint(directory, weights: bytes):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (directory / "model.safetensors").write_bytes(weights)
    return directory


# ------------------------------------------------------------------------------------------------ the memo


def test_an_unchanged_file_is_hashed_once_and_remembered_across_processes(tmp_path, hashes, cache_dir):
    f = tmp_path / "data.jsonl"
    f.write_text('{"prompt": "1+1=", "answer": 2}\n')
    first = digest_cache.file_digest(f)
    assert digest_cache.file_digest(f) == first and hashes == ["data.jsonl"]
    memo = json.loads((cache_dir / digest_cache.MEMO_NAME).read_text())
    assert memo["files"][str(f.resolve())]["sha256"] == first


def test_changed_bytes_at_the_same_path_size_and_mtime_are_rehashed(tmp_path, hashes):
    f = tmp_path / "data.jsonl"
    f.write_bytes(b"aaaa")
    old = digest_cache.file_digest(f)
    _rewrite_same_size_and_mtime(f, b"bbbb")
    assert digest_cache.file_digest(f) != old and len(hashes) == 2


def test_a_file_changed_just_now_is_not_remembered(tmp_path, monkeypatch):
    calls = []
    real = digest_cache.sha256_file
    monkeypatch.setattr(digest_cache, "sha256_file", lambda p: calls.append(p) or real(p))
    f = tmp_path / "fresh.bin"
    f.write_bytes(b"x")
    digest_cache.file_digest(f)
    digest_cache.file_digest(f)
    assert len(calls) == 2  # within the racy window a same-tick rewrite could look unchanged: hash every time


def test_an_unreadable_memo_is_an_empty_one(tmp_path, cache_dir, hashes):
    cache_dir.mkdir(parents=True)
    (cache_dir / digest_cache.MEMO_NAME).write_text("{not json")
    f = tmp_path / "a.bin"
    f.write_bytes(b"abc")
    assert digest_cache.file_digest(f) == hashlib.sha256(b"abc").hexdigest()


# ---------------------------------------------------------------------------------------------- model identity


def test_retrained_weights_copied_over_a_checkpoint_are_a_new_identity_and_a_new_sft_key(tmp_path, hashes):
    ckpt = _checkpoint(tmp_path / "ckpt", b"\x00" * 64)
    cfg = ModelConfig(name_or_path=str(ckpt))
    problems = synthetic_problems(20, seed=0)
    before, key_before = model_identity(cfg), sft_key(cfg, SFTConfig(), problems)
    assert model_identity(cfg) == before and sft_key(cfg, SFTConfig(), problems) == key_before
    assert sorted(hashes) == ["config.json", "model.safetensors"]  # remembered: not rehashed per call

    _rewrite_same_size_and_mtime(ckpt / "model.safetensors", b"\x01" * 64)
    assert model_identity(cfg) != before
    assert sft_key(cfg, SFTConfig(), problems) != key_before
    assert hashes.count("model.safetensors") == 2 and hashes.count("config.json") == 1


def test_identity_ignores_download_metadata_but_not_added_files(tmp_path, hashes):
    ckpt = _checkpoint(tmp_path / "ckpt", b"w" * 8)
    cfg = ModelConfig(name_or_path=str(ckpt))
    base = model_identity(cfg)
    (ckpt / ".cache" / "huggingface").mkdir(parents=True)
    (ckpt / ".cache" / "huggingface" / "download.lock").write_text("x")
    assert model_identity(cfg) == base
    (ckpt / "generation_config.json").write_text("{}")
    assert model_identity(cfg) != base


def test_the_builtin_model_is_identified_by_its_recipe():
    assert model_identity(ModelConfig()).startswith("builtin:tiny@")


def test_a_hub_commit_is_its_own_identity_and_an_unresolvable_id_is_a_config_error(monkeypatch, tmp_path):
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert model_identity(ModelConfig(name_or_path="Qwen/Qwen2.5-0.5B", revision=sha)) == f"Qwen/Qwen2.5-0.5B@{sha}"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match="model.name_or_path 'nobody/nothing'.*HF_HUB_OFFLINE"):
        model_identity(ModelConfig(name_or_path="nobody/nothing"))


def test_offline_a_hub_id_resolves_through_the_local_cache(monkeypatch, tmp_path):
    import huggingface_hub.constants as hub_constants

    repo = tmp_path / "hub" / "models--org--tiny"
    for rev in ("a" * 40, "b" * 40):
        (repo / "snapshots" / rev).mkdir(parents=True)
        (repo / "snapshots" / rev / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hub_commit("org/tiny", None) == "a" * 40
    (repo / "refs" / "main").write_text("b" * 40)  # main moved forward: a new identity
    assert hub_commit("org/tiny", None) == "b" * 40


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", True),
        ("gpt2", True),
        ("a/b/c", False),
        ("/abs/path", False),
        ("./ckpt", False),
        ("org/na--me", False),
        ("org/name.", False),
        ("", False),
    ],
)
def test_hub_id_syntax(name, ok):
    assert is_hub_id(name) is ok


# --------------------------------------------------------------------------------------------- dataset key


def _key(data: DataConfig, storage_uri: str) -> str:
    from tasks.data import same_data_config

    return same_data_config(None, {"data": data, "storage_uri": storage_uri})


def test_a_data_file_changed_at_the_same_path_is_a_new_dataset_key(tmp_path, hashes):
    f = tmp_path / "gsm8k.jsonl"
    f.write_text('{"question": "q1", "answer": "#### 1"}\n')
    data = DataConfig(source="file", path=str(f), adapter="gsm8k")
    key = _key(data, "file:///tmp/store")
    assert _key(data, "file:///tmp/store") == key  # unchanged: a cache hit, as before
    _rewrite_same_size_and_mtime(f, b'{"question": "q2", "answer": "#### 2"}\n')
    assert _key(data, "file:///tmp/store") != key
    assert _key(data, "file:///tmp/other") != _key(data, "file:///tmp/store")


def test_a_local_hf_dataset_directory_is_keyed_by_its_files(tmp_path, hashes):
    d = tmp_path / "ds"
    d.mkdir()
    (d / "train.jsonl").write_text('{"prompt": "p", "answer": "1"}\n')
    data = DataConfig(source="hf", path=str(d))
    before = source_fingerprint(data)
    (d / "train.jsonl").write_text('{"prompt": "p", "answer": "2"}\n')
    assert source_fingerprint(data) != before


def test_a_missing_file_gets_a_key_and_the_task_reports_it(tmp_path):
    data = DataConfig(source="file", path=str(tmp_path / "nope.jsonl"))
    assert source_fingerprint(data) == "absent"
    assert _key(data, "file:///tmp/store")


def test_store_versions_follow_the_bytes(tmp_path):
    store = FileStore(tmp_path / "s")
    store.put_bytes("models/m/config.json", b"{}")
    store.put_bytes("models/m/model.safetensors", b"w1")
    store.put_bytes("models/mx/other", b"z")
    v1 = store.versions("models/m")
    assert sorted(v1) == ["models/m/config.json", "models/m/model.safetensors"]
    store.put_bytes("models/m/model.safetensors", b"w2")
    assert store.versions("models/m") != v1
    assert list(store.versions("models/m/config.json")) == ["models/m/config.json"]


_ANSWERED = SimpleNamespace(status_code=200, headers={})


class _Bucket:
    """{key: (etag, size)} served through botocore's request hooks on a store's client: the bucket check and the
    list_objects_v2 pages S3Store.versions reads (no object is fetched, nothing goes to the network)."""

    def __init__(self, objects: dict[str, tuple[str, int]], client):
        self.objects, self.prefix = objects, ""
        events = client.meta.events
        events.register("before-call.s3.HeadBucket", lambda **_: (_ANSWERED, {}))
        events.register("before-parameter-build.s3.ListObjectsV2", self.asked)
        events.register("before-call.s3.ListObjectsV2", self.listing)

    def asked(self, params, **_):
        self.prefix = params.get("Prefix", "")

    def listing(self, **_):
        found = [{"Key": k, "ETag": f'"{e}"', "Size": s} for k, (e, s) in sorted(self.objects.items())]
        return _ANSWERED, {"Contents": [o for o in found if o["Key"].startswith(self.prefix)], "IsTruncated": False}


def test_s3_versions_are_etag_and_size_from_one_listing_and_change_with_the_object():
    from essaflow.model.identity import s3_version
    from essaflow.storage import S3Store

    objects = {"ckpt/config.json": ("e1", 2), "ckpt/model.safetensors": ("e2", 64), "ckpt2/x": ("e3", 1)}
    store = S3Store("bucket", "", endpoint_url="http://127.0.0.1:9", access_key="k", secret_key="s")
    _Bucket(objects, store.client)
    assert store.versions("ckpt") == {"ckpt/config.json": "e1:2", "ckpt/model.safetensors": "e2:64"}
    assert store.versions("ckpt/config.json") == {"ckpt/config.json": "e1:2"}

    import essaflow.storage as storage

    before = None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(storage, "open_store", lambda uri: store.child(uri.removeprefix("s3://bucket/")))
        before = s3_version("s3://bucket/ckpt")
        objects["ckpt/model.safetensors"] = ("e9", 64)  # retrained weights uploaded over the old ones
        assert s3_version("s3://bucket/ckpt") != before
        objects.clear()
        with pytest.raises(ConfigError, match="no objects under s3://bucket/ckpt"):
            s3_version("s3://bucket/ckpt")
