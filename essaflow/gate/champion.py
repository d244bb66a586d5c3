"""The champion, scored on this run's problems under this run's protocol, so the gate compares like with like.

A registered version records what its own evaluation judged (`EVAL_TAGS`: the problem set's and the protocol's
digests, and where its per-problem report is stored). When both digests equal the current run's, that report holds
the counts a fresh evaluation would give (same problems, same protocol, same seed) and is reused; otherwise the
champion is downloaded from MLflow's model registry and evaluated again (essaflow/judging/registered.py), with the
prompt formatting its version stores. Never imports prefect; the model stack (torch) only where it evaluates.
"""

from __future__ import annotations

import logging

from essaflow import tracking
from essaflow.artifacts import protocol_record, publish_eval, read_dataset, read_eval_report
from essaflow.config import EvalConfig, SamplingConfig
from essaflow.gate.config import GateConfig
from essaflow.gate.digests import problems_digest, protocol_digest
from essaflow.judging.registered import evaluate_version
from essaflow.refs import ChampionRef, DatasetRef, EvalRef, RunRef
from essaflow.storage import StorageError, open_store
from essaflow.timing import Timer
from essaflow.tracking.aliases import alias_version

log = logging.getLogger(__name__)

CHAMPION, CHALLENGER = "champion", "challenger"
"""The registered model's aliases the gate moves: the version that won, and a newer one that did not."""
CHAMPION_LABEL = "champion"
"""The champion's report label (runs/<id>/eval/champion/)."""
EVAL_TAGS = {
    "problems": "essaflow.eval_problems_digest",
    "protocol": "essaflow.eval_protocol_digest",
    "report": "essaflow.eval_report_uri",
}
"""What a version's own evaluation judged -> the version tag recording it."""


def eval_identity_tags(problems_digest: str, protocol_digest: str, report_uri: str) -> dict[str, str]:
    """The version tags that let a later run reuse this version's per-problem counts."""
    values = {"problems": problems_digest, "protocol": protocol_digest, "report": report_uri}
    return {EVAL_TAGS[k]: v for k, v in values.items()}


def reusable_report_uri(version_tags: dict[str, str], problems_digest: str, protocol_digest: str) -> str | None:
    """The stored report of a version whose recorded problem set and protocol match these digests, else None."""
    if version_tags.get(EVAL_TAGS["problems"]) != problems_digest:
        return None
    if version_tags.get(EVAL_TAGS["protocol"]) != protocol_digest:
        return None
    return version_tags.get(EVAL_TAGS["report"]) or None


def stored_champion_eval(uri: str) -> EvalRef | None:
    """The stored report as an EvalRef, when it is still there and holds per-problem greedy outcomes too."""
    probe = EvalRef(uri=uri, label=CHAMPION_LABEL, summary={}, num_problems=0, samples_per_problem=0)
    try:
        report = read_eval_report(probe)
    except (StorageError, OSError, KeyError, ValueError) as err:  # gone from storage, or unreadable: evaluate again
        log.warning("champion's stored report %s unusable (%s); evaluating it again", uri, err)
        return None
    if len(report.greedy_correct) != len(report.problem_ids):
        return None
    return probe.model_copy(update={"summary": report.summary(), "num_problems": report.num_problems,
                                    "samples_per_problem": report.samples_per_problem})  # fmt: skip


def score_champion(
    gate: GateConfig, eval_cfg: EvalConfig, sampling: SamplingConfig, dataset: DatasetRef, run: RunRef
) -> ChampionRef | None:
    """models:/<run.name>@champion on this run's eval split and protocol: its stored counts when they match (and
    gate.reuse_counts), else evaluated again here. None when there is no champion, or it is this run's own
    version (a retried flow)."""
    timer = Timer()
    with timer.part("tracking"):
        champ = alias_version(tracking.client(run.tracking_uri), run.name, CHAMPION)
    if champ is None or (champ.tags or {}).get(tracking.RUN_TAG) == run.run_id:
        return None
    with timer.part("storage"):
        problems = read_dataset(dataset).eval[: eval_cfg.max_problems]
    digests = {"problems_digest": problems_digest(problems), "protocol_digest": protocol_digest(eval_cfg, sampling)}
    version = str(champ.version)
    stored = reusable_report_uri(dict(champ.tags or {}), **digests) if gate.reuse_counts else None
    ref = stored_champion_eval(stored) if stored else None
    scored = "stored counts" if ref is not None else "re-evaluated"
    if ref is not None:
        log.info("champion v%s: its stored counts (problems and protocol digests match) %s", version, stored)
    else:
        with timer.part("compute"), tracking.downloaded_version(run.tracking_uri, run.name, version) as m:
            report = evaluate_version(m, problems, eval_cfg, sampling)
        with timer.part("storage"):
            ref = publish_eval(open_store(run.storage_uri), run, CHAMPION_LABEL, report,
                               protocol_record(eval_cfg, sampling))  # fmt: skip
        with timer.part("tracking"):
            tracking.log_eval(tracking.tracked(run), CHAMPION_LABEL, report)
        log.info("champion v%s re-evaluated on this run's problems: %s", version, ref.summary)
    with timer.part("tracking"):
        tracking.set_tags(tracking.tracked(run), {"essaflow.gate_baseline": f"models:/{run.name}/{version} ({scored})"})
    return ChampionRef(name=run.name, version=version, eval=ref, scored=scored, **digests, stage="evaluate-champion",
                       timings=timer.timings())  # fmt: skip
