"""The gate's baseline: the current champion scored on this run's eval problems under this run's protocol."""

from __future__ import annotations

from prefect import get_run_logger, task

from essaflow import tracking
from essaflow.artifacts import publish_eval, read_dataset, read_eval_report
from essaflow.config import EvalConfig, SamplingConfig
from essaflow.judging.config import GateConfig
from essaflow.judging.gate import problems_digest, protocol_digest
from essaflow.refs import ChampionRef, DatasetRef, EvalRef, RunRef
from essaflow.storage import StorageError, open_store
from essaflow.timing import Timer
from essaflow.tracking.champion import reusable_report_uri
from essaflow.tracking.promotion import CHAMPION, alias_version
from essaflow.training.registered import evaluate_version
from tasks.retry import retry_policy
from tasks.run import record_stage, tracked

LABEL = "champion"


@task(name="evaluate_champion", task_run_name="evaluate-champion", **retry_policy(), on_completion=[record_stage])
def evaluate_champion(
    registry: GateConfig, eval_cfg: EvalConfig, sampling: SamplingConfig, dataset: DatasetRef, run: RunRef
) -> ChampionRef | None:
    """models:/<run.name>@champion on this run's eval split and protocol: its own stored per-problem counts when
    its problem set and protocol digests equal this run's (and registry.reuse_counts), else evaluated again here
    (runs/<id>/eval/champion/). None when there is no champion, or it is this run's own version (a retried flow)."""
    timer = Timer()
    with timer.part("tracking"):
        champ = alias_version(tracking.client(run.tracking_uri), run.name, CHAMPION)
    if champ is None or (champ.tags or {}).get(tracking.RUN_TAG) == run.run_id:
        return None
    with timer.part("storage"):
        problems = read_dataset(dataset).eval[: eval_cfg.max_problems]
    digests = {"problems_digest": problems_digest(problems), "protocol_digest": protocol_digest(eval_cfg, sampling)}
    version, log = str(champ.version), get_run_logger()
    stored = reusable_report_uri(dict(champ.tags or {}), **digests) if registry.reuse_counts else None
    ref = _stored_eval(stored) if stored else None
    if ref is not None:
        log.info("champion v%s: its stored counts (problems and protocol digests match) %s", version, stored)
        scored = "stored counts"
    else:
        with timer.part("compute"):
            report = evaluate_version(run.tracking_uri, run.name, version, problems, eval_cfg, sampling)
        with timer.part("storage"):
            protocol = {"eval": eval_cfg.model_dump(mode="json"), "sampling": sampling.model_dump(mode="json")}
            ref = publish_eval(open_store(run.storage_uri), run, LABEL, report, protocol)
        with timer.part("tracking"):
            tracking.log_eval(tracked(run), LABEL, report)
        log.info("champion v%s re-evaluated on this run's problems: %s", version, ref.summary)
        scored = "re-evaluated"
    with timer.part("tracking"):
        tracking.set_tags(tracked(run), {"essaflow.gate_baseline": f"models:/{run.name}/{version} ({scored})"})
    return ChampionRef(name=run.name, version=version, eval=ref, scored=scored, **digests, stage="evaluate-champion",
                       timings=timer.timings())  # fmt: skip


def _stored_eval(uri: str) -> EvalRef | None:
    """The stored report as an EvalRef, when it is still there and holds per-problem greedy outcomes too."""
    probe = EvalRef(uri=uri, label=LABEL, summary={}, num_problems=0, samples_per_problem=0)
    try:
        report = read_eval_report(probe)
    except (StorageError, OSError, KeyError, ValueError) as err:  # gone from storage, or unreadable: evaluate again
        get_run_logger().warning("champion's stored report %s unusable (%s); evaluating it again", uri, err)
        return None
    if len(report.greedy_correct) != len(report.problem_ids):
        return None
    return probe.model_copy(update={"summary": report.summary(), "num_problems": report.num_problems,
                                    "samples_per_problem": report.samples_per_problem})  # fmt: skip
