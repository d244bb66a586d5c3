"""Artifact storage over ``file://`` directories and ``s3://`` buckets (any S3 endpoint).

One interface, two backends. Every write is atomic: a file store writes a temp file in the target directory and
renames it; an S3 object only becomes visible once its PUT (or multipart upload) completes. A directory artifact
(``upload_dir``) is a set of data objects plus ``manifest.json`` written LAST, holding the SHA-256 and size of every
file, so a reader that finds the manifest finds everything, and ``download_dir``/``verify`` check every checksum.
The manifest is written with a conditional create (``If-None-Match: *`` on S3, a hard link on a file system), so
an artifact, once committed, is never silently replaced.

Transient S3 failures (connection refused/reset, timeouts, HTTP 500/502/503/504) are retried twice over: botocore's
"standard" retry mode makes up to 8 fast attempts inside each call (50 ms base backoff, at most ~6 s in all), and the
store retries the whole operation with exponential backoff and jitter (0.25 s doubling, capped at 4 s) and starts no
new attempt after ``retry_timeout`` seconds (20 s by default; ``ESSAFLOW_S3_RETRY_TIMEOUT_S`` changes it). So a
server that is down for a few seconds is ridden out, and one that is down for good is reported within about 30 s: a
refused connection after ~20-27 s, a host that does not answer at all (2 s connect timeout x 8 attempts) after
~22-28 s. Until an endpoint has first answered in this process, an attempt that cannot connect is followed by
one TCP connection: refused there (or a host name that does not resolve), nothing serves at that endpoint, no retry
waits that out, and the request fails at once (kind ``refused``, naming the endpoint and the variable that set it,
ESSAFLOW_S3_ENDPOINT_URL or AWS's; was 20-24 s). Once the endpoint has answered, a refused connection is a server
restarting, retried as above. A server that accepts connections but never answers is bounded by the 20 s read
timeout per attempt. A multipart upload cut off midway leaves no object: S3 shows one only once the upload
completes.

Every failure is a :class:`StorageError` with one message that names the problem (unreachable endpoint, missing
bucket, rejected credentials, missing object, checksum mismatch, incomplete artifact) and never contains a
credential. Nothing read back executes code: data are bytes, JSON or files.

This package never imports prefect.
"""

from essaflow.storage.base import MANIFEST, ArtifactStore, StorageError
from essaflow.storage.factory import open_store
from essaflow.storage.files import FileStore
from essaflow.storage.s3 import S3Store, s3_settings_from_env

__all__ = [
    "MANIFEST",
    "ArtifactStore",
    "FileStore",
    "S3Store",
    "StorageError",
    "open_store",
    "s3_settings_from_env",
]
