"""`essaflow gc`: the gc flow in this process; the listing on stderr, its JSON line last."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import emit, fail, flow_logging, refuse, service_env
from cli.pipeline import credentials_to_env, fail_unless_completed, orchestration_error, quiet_console_tracebacks


def collect_garbage(
    keep_runs: Annotated[int, typer.Option(help="runs of each pipeline kept whole (the newest)")] = 5,
    storage_uri: Annotated[str | None, typer.Option(help="artifact root (default: ESSAFLOW_STORAGE_URI)")] = None,
    tracking_uri: Annotated[str | None, typer.Option(help="MLflow registry (default: MLFLOW_TRACKING_URI)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would go, and its bytes")] = False,
    verbose: bool = False,
) -> None:
    """Delete the checkpoints and caches no recent run and no registered model version needs (docs/retention.md)."""
    from pydantic import ValidationError

    from essaflow.retention import RetentionConfig

    flow_logging(verbose)
    given = {"keep_runs": keep_runs, "storage_uri": storage_uri, "tracking_uri": tracking_uri}
    try:
        retention = RetentionConfig(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as err:
        refuse([f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()])
    service_env()
    _check_store(retention.storage_uri)
    from flows.gc import gc as gc_flow

    quiet_console_tracebacks()
    try:
        state = gc_flow(credentials_to_env(retention), dry_run=dry_run, return_state=True)
    except Exception as err:  # the orchestrator itself
        fail(orchestration_error(err), "orchestration", None, [])
    fail_unless_completed(state, [], name_run=False)
    out = state.result()
    verb = "would delete" if dry_run else "deleted"
    for entry in out["delete"]:
        typer.echo(f"{verb} {entry['prefix']}: {entry['bytes']} bytes, {entry['objects']} objects ({entry['why']})",
                   err=True)  # fmt: skip
    total = out["bytes"] if dry_run else out["bytes_freed"]
    typer.echo(f"{verb} {len(out['delete'])} prefixes, {total} bytes; kept {len(out['keep'])}", err=True)
    emit(out)


def _check_store(storage_uri: str | None) -> None:
    """The environment (numeric variables, the cache directory, S3 variables) and the artifact store answering (an
    S3 endpoint down, a bucket or keys missing) before Prefect starts: one line in seconds instead of a flow's
    retries."""
    from essaflow.artifacts.store import check_storage, storage_uri_for
    from essaflow.checks.environment import environment_problems
    from essaflow.secrets import scrub
    from essaflow.storage import StorageError

    uri = storage_uri_for(storage_uri)
    problems = environment_problems(s3=uri.startswith("s3://"))
    if problems:
        refuse(problems)
    _require_local_root(uri)
    try:
        check_storage(uri)
    except StorageError as err:
        fail(f"StorageError: {scrub(str(err))}", "preflight", None, [])


def _require_local_root(uri: str) -> None:
    """A file:// store whose folder is not there holds nothing to collect: a mistyped path, said at once (not
    "would delete 0 prefixes" after the flow's start-up)."""
    from essaflow.storage import FileStore, StorageError, open_store

    try:
        store = open_store(uri)
    except StorageError:
        return  # check_storage names it
    if isinstance(store, FileStore) and not store.root.is_dir():
        what = "is not a directory" if store.root.exists() else "does not exist"
        refuse([f"storage_uri {store.uri}: {what}, so there is nothing to collect: give the artifact root your runs "
                "write to (--storage-uri, or ESSAFLOW_STORAGE_URI)"])  # fmt: skip
