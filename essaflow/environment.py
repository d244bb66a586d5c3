"""The numbers essaflow reads from environment variables, all read one way (:func:`env_number`).

A value that is no number, or out of its range, is a ConfigError naming the variable, the value and what it takes,
wherever it is first read (a heartbeat thread, a store opened mid-run, the tasks' import); check-config and the
run's preflight read every one first (:func:`numeric_env_problems`), so the mistake is one line before any compute.
An empty value counts as unset. Never imports prefect.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from essaflow.config_base import ConfigError


@dataclass(frozen=True)
class NumericVar:
    default: float
    what: str
    """what the number is, as the message's fix says it: "the seconds between a run's heartbeats"."""
    positive: bool = False
    """> 0 when True, else >= 0."""

    def rule(self) -> str:
        return f"a number {'> 0' if self.positive else '>= 0'}, default {self.default:g}"


NUMERIC_ENV: dict[str, NumericVar] = {
    "ESSAFLOW_HEARTBEAT_S": NumericVar(30.0, "the seconds between a run's lease heartbeats", positive=True),
    "ESSAFLOW_S3_RETRY_TIMEOUT_S": NumericVar(20.0, "the seconds an S3 operation keeps retrying a transient failure"),
    "ESSAFLOW_RETRY_BACKOFF_SCALE": NumericVar(1.0, "the factor on every pipeline task's retry backoff"),
}


def env_number(name: str, environ: Mapping[str, str] | None = None) -> float:
    """The value of the numeric variable `name` (one of NUMERIC_ENV), its default when unset or empty; a ConfigError
    naming the variable and its value when it is no finite number in range."""
    var = NUMERIC_ENV[name]
    raw = (os.environ if environ is None else environ).get(name, "")
    if not raw.strip():
        return var.default
    shown = raw if len(raw) <= 40 else raw[:40] + "..."
    fix = f"set it to {var.what} ({var.rule()}), or unset it"
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={shown!r} is not a number: {fix}") from None
    if not math.isfinite(value) or value < 0 or (var.positive and value == 0):
        raise ConfigError(f"{name}={shown!r} is out of range: {fix}")
    return value


def numeric_env_problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per numeric variable set to something :func:`env_number` refuses."""
    problems = []
    for name in NUMERIC_ENV:
        try:
            env_number(name, environ)
        except ConfigError as err:
            problems.append(str(err))
    return problems
