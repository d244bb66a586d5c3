"""What counts as a credential, and how it is kept out of params, tags, logs, reprs and error messages.

One rule for every place that needs it: which environment variables Ray workers get only through a setup hook
(cluster.worker_env), which config keys never become MLflow params and what text is masked (tracking, cli), what
endpoint an S3 error names (storage.s3), what check-config prints and a resume command echoes (cli).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

_SECRET_PARTS = ("PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "PASSPHRASE")  # anywhere: PGPASSWORD too
_KEY_QUALIFIERS = {"API", "ACCESS", "PRIVATE", "SIGNING", "ENCRYPTION"}
# scheme://user:password@ (user may be empty: redis://:pw@host) inside free text. A scheme starts a word
# (`(?<!\w)`): tried from every character of a long word, `\w+` would rescan the rest of it each time (quadratic)
_URL_USERINFO = re.compile(r"(?<!\w)(\w+://)[^/@\s:]*:[^/@\s]+@")
# the password part alone: the user stays readable (whose credential a command line or a config dump names)
_URL_PASSWORD = re.compile(r"(?<!\w)(\w+://[^/@\s:]*:)[^/@\s]+@")
_MIN_MASKED_LEN = 4  # shorter values would mask ordinary words and digits all over the text

#: JSON-schema keywords of a URI setting in a deployment's form: Prefect's server checks a flow run's parameters
#: against the schema before it stores them, so a URI with a password is refused before it is stored (pydantic
#: ignores these keywords: the CLI still takes such a URI and moves it to the environment, uri_passwords_to_env)
NO_PASSWORD_IN_FORM = {"pattern": r"^(?![A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*:[^/@\s]*@)"}
#: the URI settings a run reads from the environment when they are None, and the variable each reads
URI_ENV = {"tracking_uri": "MLFLOW_TRACKING_URI", "ray_address": "RAY_ADDRESS"}


def url_has_password(value: str) -> bool:
    """True for a URL carrying a password (``postgresql://user:pw@host/db``)."""
    if "://" not in value or "@" not in value:
        return False
    try:
        return urlsplit(value).password is not None
    except ValueError:
        return False


def is_secret(key: str, value: str = "") -> bool:
    """True for a credential: its name says so (PASSWORD, SECRET, ... anywhere; a word ending in TOKEN; PASS; an
    API/ACCESS/PRIVATE ... KEY; but not TOKENIZERS_PARALLELISM nor max_new_tokens) or it is a URL with a password.

    Words are split on any non-alphanumeric character, so environment names and dotted config keys
    (``storage.secret_key``) follow the same rule.
    """
    upper = key.upper()
    words = set(re.split(r"[^A-Z0-9]+", upper))
    return bool(
        any(part in upper for part in _SECRET_PARTS)
        or any(w.endswith("TOKEN") or w == "PASS" for w in words)
        or ("KEY" in words and words & _KEY_QUALIFIERS)
        or url_has_password(value)
    )


def mask_url_password(url: str) -> str:
    """The URL with its password replaced by ``***``, the user and everything else kept."""
    if not url_has_password(url):
        return url
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}").geturl()


def uri_passwords_to_env(params: Any) -> Any:
    """`params` (a config model) with each URI setting that carries a password moved into its environment variable
    (this process's, which the run reads it from: None means the environment's), so neither the parameters Prefect
    stores nor the run's record hold the password."""
    moved = {}
    for key, var in URI_ENV.items():
        value = getattr(params, key, None)
        if isinstance(value, str) and url_has_password(value):
            os.environ[var] = value
            moved[key] = None
    return params.model_copy(update=moved) if moved else params


def mask_tree(tree: Any) -> Any:
    """A JSON tree with mask_passwords applied to every string in it."""
    if isinstance(tree, dict):
        return {k: mask_tree(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [mask_tree(v) for v in tree]
    return mask_passwords(tree) if isinstance(tree, str) else tree


def mask_passwords(text: str) -> str:
    """Every ``scheme://user:password@`` inside ``text`` with the password replaced by ``***``: a printed config, a
    command line to copy (the password goes back in by hand, or comes from the environment)."""
    return _URL_PASSWORD.sub(rf"\1{MASK}@", text)


def safe_uri(uri: str) -> str:
    """The URI without user-info, query or fragment (where credentials hide); text that is no URI unchanged."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return uri
    if not parts.scheme or not parts.netloc:
        return uri
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the secret-named variables of ``environ`` (default: this process's), long enough to mask."""
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if is_secret(k) and len(v) >= _MIN_MASKED_LEN]


def scrub(text: str, known_values: Iterable[str] | None = None) -> str:
    """Mask URI user-info and known secret values (default: those of the environment) inside free text."""
    text = _URL_USERINFO.sub(rf"\1{MASK}@", text)
    values = secret_env_values() if known_values is None else known_values
    for value in sorted(values, key=len, reverse=True):  # longest first: a secret containing another stays masked
        if value:
            text = text.replace(value, MASK)
    return text


def scrub_exception(exc: BaseException) -> BaseException:
    """``exc`` with every string argument along its chain (cause, context, a transfer wrapper's last_exception)
    scrubbed in place, and returned: botocore and MLflow echo the endpoint URL, user-info included, in their messages,
    and a traceback prints each message of the chain wherever it is logged (Prefect's database included)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        with contextlib.suppress(AttributeError, TypeError):  # an exception type with read-only args keeps them
            err.args = tuple(scrub(a) if isinstance(a, str) else a for a in err.args)
        todo += [err.__cause__, err.__context__, getattr(err, "last_exception", None)]
    return exc


class MaskSecrets(logging.Filter):
    """Handler filter: the record's message and traceback with URI user-info and known secret values masked (the
    traceback formatted here, masked, and kept as the text every formatter then prints)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's own error to report
            return True
        masked = scrub(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True


def mask_log_handlers() -> int:
    """Add :class:`MaskSecrets` to every handler the root and the named loggers hold (once each); how many got it.

    Filters on handlers, not loggers: a logger's filter skips the records its children propagate to it."""
    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                      if isinstance(v, logging.Logger))]  # fmt: skip
    added = 0
    for handler in {h for lg in loggers for h in lg.handlers}:
        if not any(isinstance(f, MaskSecrets) for f in handler.filters):
            handler.addFilter(MaskSecrets())
            added += 1
    return added
