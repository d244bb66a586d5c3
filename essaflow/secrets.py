"""What counts as a credential, and how it is kept out of params, tags, logs, reprs and error messages.

One rule for every place that needs it: which environment variables Ray workers get only through a setup hook
(cluster.worker_env), which config keys never become MLflow params and what text is masked (tracking, cli), what
endpoint an S3 error names (storage.s3), what check-config prints and a resume command echoes (cli), and every
line a command prints, whoever prints it (MaskedStream: sys.stdout and sys.stderr of the `essaflow` command and of a
process whose tracking client is given a URI with a password).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TextIO
from urllib.parse import unquote, urlsplit, urlunsplit

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


@functools.lru_cache(maxsize=4096)  # asked of every environment value each time a line is masked (MaskedStream)
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
    return _secret_name(key) or url_has_password(value)


@functools.lru_cache(maxsize=4096)
def _secret_name(key: str) -> bool:
    upper = key.upper()
    words = set(re.split(r"[^A-Z0-9]+", upper))
    return bool(
        any(part in upper for part in _SECRET_PARTS)
        or any(w.endswith("TOKEN") or w == "PASS" for w in words)
        or ("KEY" in words and words & _KEY_QUALIFIERS)
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
    """The values of the secret-named variables of ``environ`` (default: this process's) and the passwords of the URLs
    its variables hold (MLFLOW_TRACKING_URI, RAY_ADDRESS: as written and decoded, wherever a library prints one
    outside its URL), those long enough to mask."""
    env = os.environ if environ is None else environ
    values = [v for k, v in env.items() if is_secret(k)]
    values += [p for v in env.values() for p in _url_passwords(v)]
    return [v for v in values if len(v) >= _MIN_MASKED_LEN]


@functools.lru_cache(maxsize=4096)
def _url_passwords(value: str) -> tuple[str, ...]:
    if not url_has_password(value):
        return ()
    password = urlsplit(value).password or ""
    return tuple({password, unquote(password)})


def scrub(text: str, known_values: Iterable[str] | None = None) -> str:
    """Mask URI user-info and known secret values (default: those of the environment) inside free text."""
    return _mask_values(_URL_USERINFO.sub(rf"\1{MASK}@", text), known_values)


def mask_output(text: str) -> str:
    """What a command prints: each URI password masked with the user kept (:func:`mask_passwords`: a config dump, a
    command line or a link stays readable, and text masked already passes unchanged), then the environment's
    secret values (:func:`secret_env_values`)."""
    return _mask_values(mask_passwords(text), None)


def _mask_values(text: str, known_values: Iterable[str] | None) -> str:
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


class MaskedStream:
    """A text stream (sys.stdout, sys.stderr) whose every line is written through :func:`mask_output`: URI passwords
    and the values of secret-named environment variables masked, whoever prints it (MLflow's end-of-run "View run
    ... at: <tracking URI>" lines, Prefect's console handler, rich's bars, the lines Ray forwards from its workers).

    Text is held until its line ends (or the stream is flushed: a bar's frame, a prompt, the interpreter's exit), so
    a URI printed in pieces is masked whole. Everything else (encoding, isatty, fileno, buffer) is the wrapped
    stream's; bytes written to its ``buffer`` or its file descriptor pass unmasked."""

    _HOLD_MAX = 1 << 16  # a line longer than this is masked and written in parts

    def __init__(self, stream: TextIO):
        self._stream = stream
        self._pending = ""
        self._lock = threading.RLock()  # writers on several threads (Prefect's, Ray's log printer)

    @property
    def wrapped(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            return self._stream.write(text)  # the wrapped stream's own TypeError
        with self._lock:
            self._pending += text
            end = self._pending.rfind("\n") + 1
            if not end and len(self._pending) > self._HOLD_MAX:
                end = len(self._pending)
            if end:
                done, self._pending = self._pending[:end], self._pending[end:]
                self._stream.write(mask_output(done))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                done, self._pending = self._pending, ""
                self._stream.write(mask_output(done))
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def mask_std_streams() -> None:
    """Wrap this process's sys.stdout and sys.stderr in :class:`MaskedStream` (once; a missing stream stays None),
    and point the logging handlers that already write to either at its wrapper. Called first by the `essaflow`
    command (cli/main.py) and by the tracking client when it is given a URI with a password (a flow run by a Prefect
    worker, a Python caller)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, MaskedStream):
            continue
        masked = MaskedStream(stream)
        setattr(sys, name, masked)
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
            for handler in getattr(logger, "handlers", []):
                if isinstance(handler, logging.StreamHandler) and handler.stream is stream:
                    handler.setStream(masked)
