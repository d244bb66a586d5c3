"""The rules a pipeline config follows as it loads, beyond its fields' types: its file's YAML and its service fields.

- **A key given twice.** YAML itself keeps the last of two equal keys without a word, so `lr: 1e-4` ten lines above
  a forgotten `lr: 3e-4` would train with the second; a config file never means that, and :func:`load_yaml` names
  the key and both lines.
- **A name and service URIs the services would refuse.** Each would otherwise fail late: MLflow refuses a
  registered-model name with `/` or `:` only at registration, after training; an `ftp://` artifact root at the
  first upload; a tracking URI without a scheme when the run opens. Each `*_problem` function returns what is wrong
  as the words after the field (None: nothing), without importing MLflow or boto3.

Checks that need more than the config (its files, this machine, the cluster) are essaflow/checks/.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import yaml

from essaflow.secrets import mask_passwords

#: MLflow's registry keeps names in a VARCHAR(256) column (its SQL stores), and refuses these characters
NAME_MAX = 256
_NAME_FORBIDDEN = ("/", ":")
#: schemes MLflow's tracking client has a store for that can hold a model registry (`dialect+driver` allowed)
TRACKING_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks", "databricks-uc")
#: `host:port` written without a scheme (urlsplit would read `host` as the scheme)
_HOST_PORT = re.compile(r"[A-Za-z0-9.-]+:\d+(/.*)?")
#: `htp:/x`: a scheme and one slash, a mistyped URI (a Windows path `C:\x` has no slash after the colon)
_ONE_SLASH_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/[^/]")
#: what any S3 endpoint takes in a bucket name (AWS is stricter: 3-63 lowercase letters, digits, '.', '-')
_BUCKET = re.compile(r"[A-Za-z0-9._-]+")


def registered_name_problem(name: str) -> str | None:
    """`name` is the MLflow experiment and registered-model name: what MLflow would refuse in it."""
    if not name.strip():
        return "is empty: it names the MLflow experiment and the registered model"
    bad = [c for c in _NAME_FORBIDDEN if c in name]
    if bad:
        shown, fixed = _short(name), _short(re.sub(r"[/:]+", "-", name))
        return f"{shown} contains {' and '.join(map(repr, bad))}, which MLflow refuses in a model name; use {fixed}"
    if any(ord(c) < 32 for c in name):
        return f"{_short(name)} contains a control character (a line break?); use letters, digits, '-', '_', '.'"
    if len(name) > NAME_MAX:
        return f"is {len(name):,} characters long; MLflow's registry holds names of at most {NAME_MAX}"
    return None


def storage_uri_problem(uri: str) -> str | None:
    """An artifact root essaflow can open: `file://<directory>`, a bare directory, or `s3://<bucket>/<prefix>`."""
    if not uri.strip():
        return "is empty: give file://<directory> or s3://<bucket>/<prefix>"
    if uri.startswith("file://"):
        return None if uri.removeprefix("file://").removeprefix("localhost") else f"{uri!r} names no directory"
    if uri.startswith("s3://"):
        bucket = uri.removeprefix("s3://").split("/", 1)[0]
        if not _BUCKET.fullmatch(bucket):
            return f"{_short(uri)} names no bucket (letters, digits, '.', '-'): give s3://<bucket>/<prefix>"
        return None
    if "://" in uri:
        scheme = uri.split("://", 1)[0]
        return f"{_short(uri)}: unsupported scheme {scheme!r}: use file://<directory> or s3://<bucket>/<prefix>"
    return None


def tracking_uri_problem(uri: str) -> str | None:
    """A URI MLflow can track to and keep a model registry in (http(s), sqlite:///, a SQL database, databricks)."""
    fix = "use http://host:port (an MLflow server) or sqlite:///path.db"
    if not uri.strip():
        return f"is empty: leave it unset (MLFLOW_TRACKING_URI, else a local sqlite file) or {fix}"
    if "://" not in uri:
        if _HOST_PORT.fullmatch(uri):
            return f"{uri!r} has no scheme: write http://{uri}"
        if _ONE_SLASH_SCHEME.match(uri):  # htp:/x, http:/host: a scheme with one slash, not a directory
            return f"{_short(uri)} is malformed: a scheme is followed by '://'; {fix}"
        return f"{_short(uri)} is a directory (MLflow's file store), which cannot hold a model registry; {fix}"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - parses the port: a ValueError names a bad one
    except ValueError as err:
        return f"{_short(uri)} is malformed ({err}); {fix}"
    scheme = parts.scheme.lower().split("+", 1)[0]
    if scheme not in TRACKING_SCHEMES:
        return f"{_short(uri)}: MLflow has no model registry for scheme {parts.scheme!r}; {fix}"
    if scheme in ("http", "https") and not parts.hostname:
        return f"{_short(uri)} names no host; {fix}"
    if scheme == "sqlite" and not uri.startswith("sqlite:///"):
        return f"{_short(uri)}: a sqlite URI is sqlite:///relative.db or sqlite:////absolute/path.db"
    return None


def _short(text: str, limit: int = 80) -> str:
    """`text` quoted, cut to `limit` characters (a 100,000-character value stays one readable line)."""
    text = mask_passwords(text)  # the error is printed and logged
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping that gives one key twice: `problem_mark` is the second, `first_line` (1-based) the first."""

    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark):
        super().__init__(problem=f"key {key!r} given twice", problem_mark=second)
        self.key = key
        self.first_line = first.line + 1


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader whose mappings refuse a repeated key (the merge key `<<` aside)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):  # unhashable: the base loader says so
                continue
            if key in seen:
                raise DuplicateKeyError(key, seen[key], key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, with a repeated key in any mapping a DuplicateKeyError."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
