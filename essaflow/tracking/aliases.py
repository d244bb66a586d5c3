"""Which version an alias names: `registered_version` finds the version `models:/NAME@ALIAS` names before anything
is evaluated (a missing model or alias is one TrackingError naming what MLflow's model registry holds, which no retry
can create, not a dataset prepared and an MLflow run opened first); `alias_version`, the version or None. Never
imports prefect."""

from __future__ import annotations

import re

from essaflow.secrets import safe_uri
from essaflow.tracking.server import TrackingError, check_tracking, client

#: `models:/NAME@ALIAS`, the form MLflow itself loads (a version number is `models:/NAME/3`, not taken here)
MODEL_URI = re.compile(r"models:/(?P<name>[^@/]+)@(?P<alias>[^@/]+)")


def parse_model_uri(text: str) -> tuple[str, str]:
    """(name, alias) of `models:/NAME@ALIAS`; ValueError naming the form otherwise."""
    match = MODEL_URI.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not models:/NAME@ALIAS (e.g. models:/tiny-arith@champion)")
    return match["name"], match["alias"]


def registered_version(tracking_uri: str, name: str, alias: str) -> str:
    """The version number models:/name@alias names; TrackingError when the server cannot be reached (in seconds),
    or the model or the alias does not exist (naming the models, or the aliases, there are)."""
    from mlflow.exceptions import MlflowException

    check_tracking(tracking_uri)
    c, where = client(tracking_uri), safe_uri(tracking_uri)
    try:
        return str(c.get_model_version_by_alias(name, alias).version)
    except MlflowException as err:
        if err.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            raise
    try:
        aliases = sorted(c.get_registered_model(name).aliases)
    except MlflowException:
        names = ", ".join(sorted(m.name for m in c.search_registered_models(max_results=20)))
        hint = f"registered: {names}" if names else (
            "registered: none: is this the registry your runs wrote to? run from their directory, or set "
            "MLFLOW_TRACKING_URI / tracking_uri to it"
        )  # fmt: skip
        raise TrackingError(f"models:/{name}@{alias}: no registered model {name!r} at {where} ({hint})") from None
    raise TrackingError(
        f"models:/{name}@{alias}: model {name!r} at {where} has no alias {alias!r} (its aliases: "
        f"{', '.join(aliases) or 'none'})"
    )


def alias_version(c, name: str, alias: str):
    """The model version `alias` points to with client `c`, or None (no such model or alias)."""
    from mlflow.exceptions import MlflowException

    try:
        return c.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None
