"""What each command checks before compute, composed from the stage checks beside this module.

- `essaflow check-config`: :func:`config_findings` (the environment, this machine, then the model and the data
  read in full, the reward tried on them), then the memory plan (memory_plan.memory_findings) and, with
  --cluster, the cluster (cluster.cluster_report).
- `essaflow run`, `demo`, `essa` and `grpo`, before Prefect or the model stack starts: :func:`first_problems`
  (found by a stat), then :func:`run_input_problems` (the data's rows and the reward, where either is the user's),
  then :func:`require_reachable` (a Ray head that answers, a hub id that resolves).
- a run's first task, however the run was started (a deployment's has no command in front of it):
  :func:`require_runnable`; a job (`essaflow essa|grpo`) calls :func:`require_reachable` again as it starts.

Each problem is one line naming the field (or the variable, the file, the row) and the fix.
"""

from __future__ import annotations

from essaflow.checks.cluster import probe_cluster
from essaflow.checks.data import check_data_path, check_data_rows
from essaflow.checks.environment import environment_problems, require_environment, tracking_env_problems
from essaflow.checks.findings import Findings
from essaflow.checks.machine import machine_problems
from essaflow.checks.model import check_model, check_model_fits_data, require_model, require_resolvable
from essaflow.config import DataConfig, ModelConfig, PipelineConfig
from essaflow.data.config import HeldOutSourceConfig

#: said after each machine problem by check-config, whose --no-machine leaves the machine unchecked
MACHINE_HINT = " (--no-machine: a config meant for another machine)"


def check_inputs(model: ModelConfig, data: DataConfig, held_out: HeldOutSourceConfig | None = None) -> Findings:
    """The model and data a config names (and the held-out source, eval.data): each problem names its field."""
    report = check_model(model).add(check_model_fits_data(model, data))
    rows, _ = check_data_rows(data, held_out)
    return report.add(rows)


def input_findings(cfg: PipelineConfig) -> Findings:
    """The model and data the config names, then its reward tried on the data (when they had no problem): what
    check-config reads. A sandbox that cannot start for code_tests is one of the problems, not a traceback."""
    from essaflow.checks.reward import check_reward
    from essaflow.sandbox.bubblewrap import SandboxUnavailable

    report = check_inputs(cfg.model, cfg.data, cfg.eval.data)
    if report.problems:
        return report
    try:
        return report.add(check_reward(cfg.eval, cfg.data))
    except SandboxUnavailable as err:  # its message names the field and the fix
        report.problems.append(str(err))
        return report


def config_findings(cfg: PipelineConfig, inputs: bool = True, machine: bool = True) -> Findings:
    """What `essaflow check-config` finds before its memory plan: with `inputs`, the model, data and reward
    (input_findings); then the environment (a tracking URI read from MLFLOW_TRACKING_URI, numeric variables, the
    cache directory, S3 variables) and with `machine` what this machine lacks (a GPU, vllm)."""
    environment = tracking_env_problems(cfg) + environment_problems(cfg)
    environment += [p + MACHINE_HINT for p in machine_problems(cfg)] if machine else []
    found = input_findings(cfg) if inputs else Findings()
    return Findings(found.problems + environment, found.notes)


def first_problems(cfg: PipelineConfig) -> list[str]:
    """What a run refuses first, found without reading a file: the model's checkpoint, what this machine lacks (a
    GPU for cuda, vllm for its backend), a data path that is not there (read in full next, or by the run's first
    task), the environment (ESSAFLOW_HEARTBEAT_S=abc, an unwritable cache, a malformed S3 endpoint)."""
    problems = check_model(cfg.model).problems + machine_problems(cfg)
    return problems + check_data_path(cfg.data) + environment_problems(cfg)


#: data sources made by essaflow or a package it depends on: with a built-in reward, nothing a run reads is the user's
GENERATED = ("synthetic", "reasoning_gym", "humaneval")


def run_input_problems(cfg: PipelineConfig) -> tuple[list[str], list[str]]:
    """(problems, warnings), one line each naming the field, the file or the row: what a run (`essaflow run`, `demo`,
    `essa`, `grpo`) reads of its data and tries of its reward before its flow and Prefect's server start, so that
    bad rows and a reward that gives no score fail in seconds (before: 10-45 s into the run, each stage retried).

    The data's rows are read in full as check-config reads them (check_data_rows), then the reward is built and
    tried on the first rows' reference answers (essaflow.checks.reward). Nothing is read or tried for a built-in
    task (data.source synthetic, reasoning_gym or humaneval, no eval.data) judged by a built-in reward: the run's
    first task makes it, as check-config read it. Hub and S3 data are not read (the run downloads them) and their
    reward is only built. A reward of the user's own starts its processes here, which the run then uses."""
    from essaflow.judging.reward_ref import split_ref

    generated = cfg.data.source in GENERATED and cfg.eval.data is None
    if generated and split_ref(cfg.eval.reward)[0] == "builtin":
        return [], []
    from essaflow.checks.reward import check_reward
    from essaflow.sandbox.bubblewrap import SandboxUnavailable

    read, warnings = None, []
    if not generated:
        rows, read = check_data_rows(cfg.data, cfg.eval.data)
        warnings += [n for n in rows.notes if n.startswith("warning:")]
        if rows.problems:
            return rows.problems, warnings
    try:
        tried = check_reward(cfg.eval, cfg.data, read=read)
    except SandboxUnavailable as err:  # code_tests where the sandbox cannot start: its message names the fix
        return [str(err)], warnings
    return tried.problems, warnings + [n for n in tried.notes if n.startswith("warning:")]


def require_reachable(cfg: PipelineConfig) -> None:
    """ClusterUnreachable when training joins a Ray head that does not answer (in seconds), ConfigError when a hub
    id resolves nowhere: what a run and a job check before the dataset is prepared."""
    probe_cluster(cfg.cluster_request(), cfg.ray_address)
    require_resolvable(cfg.model)


def require_runnable(cfg: PipelineConfig) -> None:
    """What a run's first task checks, wherever the run was started (CLI, deployment, schedule): the environment
    (ESSAFLOW_CACHE_DIR unwritable, ESSAFLOW_HEARTBEAT_S=abc) and the model's checkpoint, bad input that fails at
    once with no retry and no resume offered (tasks.retry.BAD_INPUT), then :func:`require_reachable`."""
    require_environment(cfg)
    require_model(cfg.model)
    require_reachable(cfg)
