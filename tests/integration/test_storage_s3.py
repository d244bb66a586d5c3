"""S3Store against a real SeaweedFS server: round trips, manifests, integrity, multipart, errors, a server restart."""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import random
import threading
import time
import traceback
from pathlib import Path

import pytest

from devstack import free_port
from essaflow.storage import MANIFEST, S3Store, StorageError, open_store
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _make_dir(root: Path, n: int = 3, size: int = 1000, seed: int = 0) -> dict[str, bytes]:
    rng = random.Random(seed)
    files = {}
    for i in range(n):
        rel = f"sub{i % 2}/file{i}.bin" if i else "top.txt"
        data = rng.randbytes(size + i)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        files[rel] = data
    return files


def _record_puts(store: S3Store) -> list[str]:
    """Keys of successful PutObject / CompleteMultipartUpload calls, in completion order."""
    done: list[str] = []

    def before(params, context, **_):
        context["essaflow_key"] = params["url_path"].split("?")[0]

    def after(http_response, context, **_):
        if http_response.status_code == 200:
            done.append(context["essaflow_key"])

    for op in ("PutObject", "CompleteMultipartUpload"):
        store.client.meta.events.register(f"before-call.s3.{op}", before)
        store.client.meta.events.register(f"after-call.s3.{op}", after)
    return done


def test_bytes_json_list_exists(s3_store: S3Store):
    sha = s3_store.put_bytes("a/b.bin", b"hello")
    assert sha == hashlib.sha256(b"hello").hexdigest()
    assert s3_store.get_bytes("a/b.bin") == b"hello"
    s3_store.put_json("a/c.json", {"x": [1, 2], "y": "é"})
    assert s3_store.get_json("a/c.json") == {"x": [1, 2], "y": "é"}
    s3_store.put_bytes("ab/d.txt", b"d")
    assert s3_store.exists("a/b.bin") and not s3_store.exists("a/zzz")
    assert s3_store.list() == ["a/b.bin", "a/c.json", "ab/d.txt"]
    assert s3_store.list("a") == ["a/b.bin", "a/c.json"]  # directory semantics: not "ab/"
    child = s3_store.child("a")
    assert child.uri == s3_store.uri + "/a" and child.list() == ["b.bin", "c.json"]
    assert child.get_bytes("b.bin") == b"hello"
    assert s3_store.url("a/b.bin") == s3_store.uri + "/a/b.bin"
    s3_store.delete_prefix("a")
    assert s3_store.list() == ["ab/d.txt"]


def test_versions_change_with_the_bytes_and_only_with_them(s3_store: S3Store):
    """The dataset cache key of an s3:// source is its objects' ETags and sizes (essaflow/data/fingerprint.py):
    on the real server a rewrite with other bytes is a new version, the same bytes again are not."""
    s3_store.put_bytes("data/train.jsonl", b'{"prompt": "1+1", "answer": "2"}\n')
    s3_store.put_bytes("data/extra/part-1.jsonl", b"x")
    s3_store.put_bytes("database.txt", b"a sibling sharing the prefix's start")
    first = s3_store.versions("data")
    assert sorted(first) == ["data/extra/part-1.jsonl", "data/train.jsonl"], "the prefix as a directory"
    assert s3_store.versions("data/train.jsonl") == {"data/train.jsonl": first["data/train.jsonl"]}
    s3_store.put_bytes("data/train.jsonl", b'{"prompt": "1+1", "answer": "2"}\n')
    assert s3_store.versions("data") == first, "same bytes, same version"
    s3_store.put_bytes("data/train.jsonl", b'{"prompt": "1+1", "answer": "3"}\n')
    changed = s3_store.versions("data")
    assert changed["data/train.jsonl"] != first["data/train.jsonl"]
    assert changed["data/extra/part-1.jsonl"] == first["data/extra/part-1.jsonl"]
    s3_store.delete_prefix("data")
    s3_store.delete_prefix("database.txt")


def test_upload_dir_download_dir_verify(s3_store: S3Store, tmp_path: Path):
    src = tmp_path / "src"
    files = _make_dir(src, n=5)
    puts = _record_puts(s3_store)
    manifest = s3_store.upload_dir(src, "art")
    assert set(manifest["files"]) == set(files) and "created" in manifest
    for rel, data in files.items():
        assert manifest["files"][rel] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert puts[-1].endswith(f"/art/{MANIFEST}") and len(puts) == len(files) + 1  # manifest written last
    assert json.loads(s3_store.get_bytes(f"art/{MANIFEST}")) == manifest

    out = s3_store.download_dir("art", tmp_path / "out")
    got = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert json.loads(got.pop(MANIFEST)) == manifest and got == files  # the local copy carries the manifest
    assert s3_store.verify("art") == manifest

    # idempotent: the same content again uploads nothing and returns the committed manifest
    assert s3_store.upload_dir(src, "art") == manifest
    assert len(puts) == len(files) + 1
    # different content at a committed prefix is a conflict unless overwrite=True
    (src / "top.txt").write_bytes(b"changed")
    with pytest.raises(StorageError, match="different artifact") as ei:
        s3_store.upload_dir(src, "art")
    assert ei.value.kind == "conflict"
    assert s3_store.verify("art") == manifest  # the committed artifact is untouched
    new = s3_store.upload_dir(src, "art", overwrite=True)
    assert new["files"]["top.txt"]["size"] == len(b"changed")
    assert s3_store.download_dir("art", tmp_path / "out").joinpath("top.txt").read_bytes() == b"changed"


def test_corrupted_object_is_detected(seaweedfs, s3_store: S3Store, tmp_path: Path):
    files = _make_dir(tmp_path / "src", n=3)
    s3_store.upload_dir(tmp_path / "src", "ckpt")
    raw = seaweedfs.client()
    raw.put_object(Bucket=seaweedfs.bucket, Key=f"{s3_store.prefix}/ckpt/sub1/file1.bin", Body=b"evil bytes")
    with pytest.raises(StorageError, match="sub1/file1.bin") as ei:
        s3_store.verify("ckpt")
    assert ei.value.kind == "integrity"
    with pytest.raises(StorageError, match="checksum mismatch.*sub1/file1.bin"):
        s3_store.download_dir("ckpt", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no temp dir left behind
    good = files["sub1/file1.bin"]
    raw.put_object(Bucket=seaweedfs.bucket, Key=f"{s3_store.prefix}/ckpt/sub1/file1.bin", Body=good)
    s3_store.verify("ckpt")
    raw.delete_object(Bucket=seaweedfs.bucket, Key=f"{s3_store.prefix}/ckpt/top.txt")
    with pytest.raises(StorageError, match="top.txt.*missing"):
        s3_store.verify("ckpt")


def test_download_dir_refuses_artifact_without_manifest(s3_store: S3Store, tmp_path: Path):
    s3_store.put_bytes("half/a.bin", b"a")
    with pytest.raises(StorageError, match="incomplete artifact") as ei:
        s3_store.download_dir("half", tmp_path / "out")
    assert ei.value.kind == "incomplete" and not (tmp_path / "out").exists()
    with pytest.raises(StorageError, match="incomplete artifact"):
        s3_store.verify("half")


def test_multipart_upload(s3_store: S3Store, tmp_path: Path):
    s3_store.multipart_threshold = 5 * 1024 * 1024
    s3_store.multipart_chunksize = 5 * 1024 * 1024
    big = tmp_path / "big.bin"
    data = random.Random(1).randbytes(11 * 1024 * 1024 + 123)
    big.write_bytes(data)
    parts: list[int] = []
    s3_store.client.meta.events.register("before-call.s3.UploadPart", lambda params, **_: parts.append(1))
    sha = s3_store.upload_file(big, "models/big.bin")
    assert sha == hashlib.sha256(data).hexdigest()
    assert len(parts) == 3  # 5 + 5 + 1 MiB
    out = s3_store.download_file("models/big.bin", tmp_path / "dl" / "big.bin")
    assert hashlib.sha256(out.read_bytes()).hexdigest() == sha
    assert [p.name for p in out.parent.iterdir()] == ["big.bin"]  # atomic: no temp file left


def test_missing_object_names_the_key(s3_store: S3Store, tmp_path: Path):
    with pytest.raises(StorageError, match=r"object not found: s3://.*/no/such/key\.json") as ei:
        s3_store.get_bytes("no/such/key.json")
    assert ei.value.kind == "missing_object"
    with pytest.raises(StorageError, match="no/such/file.bin"):
        s3_store.download_file("no/such/file.bin", tmp_path / "f.bin")
    assert not (tmp_path / "f.bin").exists()
    assert s3_store.exists("no/such/key.json") is False


def test_wrong_credentials_are_named_and_never_leaked(seaweedfs, tmp_path: Path):
    secret = "WRONG-" + seaweedfs.secret_key[::-1]
    store = open_store(
        f"s3://{seaweedfs.bucket}/x",
        endpoint_url=seaweedfs.endpoint_url,
        access_key=seaweedfs.access_key,
        secret_key=secret,
    )
    assert secret not in repr(store) and secret.encode() not in pickle.dumps(store)
    for call in (
        lambda: store.put_bytes("k", b"v"),
        lambda: store.get_bytes("k"),
        lambda: store.list(),
        lambda: store.exists("k"),
    ):
        with pytest.raises(StorageError) as ei:
            call()
        msg = str(ei.value)
        assert ei.value.kind == "credentials" and "credentials rejected" in msg and seaweedfs.endpoint_url in msg
        full = "".join(traceback.format_exception(ei.value))
        assert secret not in full and seaweedfs.secret_key not in full
    unknown = open_store(
        f"s3://{seaweedfs.bucket}", endpoint_url=seaweedfs.endpoint_url, access_key="NOBODY", secret_key=secret
    )
    with pytest.raises(StorageError, match="credentials rejected.*InvalidAccessKeyId"):
        unknown.get_bytes("k")


def test_missing_bucket_is_named(seaweedfs):
    store = open_store(
        "s3://no-such-bucket-essaflow/p",
        endpoint_url=seaweedfs.endpoint_url,
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
    )
    for call in (lambda: store.put_bytes("k", b"v"), lambda: store.exists("k"), lambda: store.list()):
        with pytest.raises(StorageError, match="bucket 'no-such-bucket-essaflow' does not exist") as ei:
            call()
        assert ei.value.kind == "missing_bucket"
    names = [b["Name"] for b in seaweedfs.client().list_buckets()["Buckets"]]
    assert "no-such-bucket-essaflow" not in names  # nothing auto-created


def test_unreachable_endpoint_fails_fast_and_names_it():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    default = open_store("s3://bkt/p", endpoint_url=url, access_key="a", secret_key="b")
    # default budget: no new attempt after 20 s, plus at most one botocore chain (8 fast tries, <= ~7 s)
    assert default.retry_timeout <= 20 and default.client.meta.config.connect_timeout <= 2
    assert default.client.meta.config.retries == {"mode": "standard", "total_max_attempts": 8}
    store = open_store("s3://bkt/p", endpoint_url=url, access_key="a", secret_key="b", retry_timeout=2)
    t0 = time.monotonic()
    with pytest.raises(StorageError, match=f"S3 endpoint {url} is unreachable: connection refused") as ei:
        store.put_bytes("k", b"v")
    elapsed = time.monotonic() - t0
    # nothing ever listened there in this process: refused at the first request, not retried for the budget (a
    # refused connection once the endpoint answered is retried: tests/unit/storage/test_s3_first_contact.py)
    assert ei.value.kind == "refused" and not ei.value.transient
    assert elapsed < 2, elapsed


class _FakeRaw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_):
        yield self._body


def test_conditional_write_fallback_when_server_lacks_if_none_match(s3_store: S3Store, tmp_path: Path, caplog):
    """A server answering 501 to If-None-Match: the manifest still commits (check-then-put), conflicts still count."""
    from botocore.awsrequest import AWSResponse

    refused = []

    def no_conditional(request, **_):
        if request.method == "PUT" and request.headers.get("If-None-Match"):
            refused.append(request.url)
            body = b"<Error><Code>NotImplemented</Code><Message>If-None-Match not supported</Message></Error>"
            return AWSResponse(request.url, 501, {}, _FakeRaw(body))
        return None

    s3_store.client.meta.events.register("before-send.s3.PutObject", no_conditional)
    _make_dir(tmp_path / "src", n=2)
    with caplog.at_level(logging.INFO, logger="essaflow.storage"):
        manifest = s3_store.upload_dir(tmp_path / "src", "art")
    assert refused and "does not support conditional writes; falling back to check-then-put" in caplog.text
    assert s3_store.verify("art") == manifest
    (tmp_path / "src" / "top.txt").write_bytes(b"other")
    with pytest.raises(StorageError, match="different artifact"):
        s3_store.upload_dir(tmp_path / "src", "art")
    assert len(refused) == 1  # remembered: no second conditional attempt


def test_server_restart_mid_upload_completes_and_never_shows_partial(seaweedfs_factory, tmp_path: Path):
    server = seaweedfs_factory()
    store = server.store("restart", retry_timeout=60)  # the store's window spans the restart, however slow
    src = tmp_path / "src"
    files = _make_dir(src, n=12, size=64 * 1024)
    puts = _record_puts(store)
    events: dict[str, float] = {}
    attempts: list[str] = []

    def restart_once_retried(at_stop: int):  # back once the upload has sent twice to the stopped server
        wait_until(lambda: len(attempts) >= at_stop + 2, 60, "the upload to retry against the stopped server")
        server.start()
        events["restarted"] = time.monotonic()

    def outage(request, **_):
        attempts.append(request.url)
        if len(attempts) == 4 and "stopped" not in events:
            server.stop()  # the server goes away while this upload is in flight
            events["stopped"] = time.monotonic()
            threading.Thread(target=restart_once_retried, args=(len(attempts),), daemon=True).start()

    store.client.meta.events.register("before-send.s3.PutObject", outage)

    # An observer with its own client: whenever the manifest is visible, every file must be visible too.
    violations: list[str] = []
    seen_manifest = threading.Event()
    finished = threading.Event()

    def observe():
        from botocore.config import Config

        client = server.client(config=Config(s3={"addressing_style": "path"}, connect_timeout=1, read_timeout=2))
        last_round = False
        while not last_round:
            last_round = finished.is_set()  # one more look after the upload returned
            try:
                page = client.list_objects_v2(Bucket=server.bucket, Prefix="restart/art/")
            except Exception:  # the server is down right now
                time.sleep(0.1)
                continue
            keys = {o["Key"][len("restart/art/") :] for o in page.get("Contents", [])}
            if MANIFEST in keys:
                seen_manifest.set()
                if not set(files) <= keys:
                    violations.append(f"manifest visible with only {sorted(keys)}")
            time.sleep(0.05)

    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    try:
        manifest = store.upload_dir(src, "art")
    finally:
        finished.set()
        watcher.join(10)
    done = time.monotonic()

    assert "stopped" in events and "restarted" in events, events
    assert events["stopped"] - t0 < done - t0 and done > events["restarted"]  # the outage was mid-upload
    assert len(attempts) > len(files) + 1  # some PUTs were retried
    assert puts[-1].endswith(f"/art/{MANIFEST}")
    assert not violations, violations
    assert seen_manifest.is_set()
    assert set(manifest["files"]) == set(files)
    assert store.verify("art") == manifest
    out = store.download_dir("art", tmp_path / "out")
    assert all((out / rel).read_bytes() == data for rel, data in files.items())
