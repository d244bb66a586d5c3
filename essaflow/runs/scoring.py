"""A run's scoring stages: pass@k of the base or a trained adapter on the run's eval split, of a registered version
(by alias), and of the champion as the gate's baseline; each report stored under runs/<id>/eval/<label>/ with the
protocol it was measured with, and logged to the run's MLflow run.

The champion is scored on this run's problems under this run's protocol: its own stored per-problem counts when
the problem set's and protocol's digests equal this run's (essaflow/tracking/champion.py), else evaluated again.
Never imports prefect; the model stack (torch) is imported only where a stage evaluates.
"""

from __future__ import annotations

import logging
from typing import Any

from essaflow import tracking
from essaflow.artifacts import fetch_dir, publish_eval, read_dataset, read_eval_report
from essaflow.config import DataConfig, EvalConfig, ModelConfig, SamplingConfig
from essaflow.judging.config import GateConfig
from essaflow.judging.gate import problems_digest, protocol_digest
from essaflow.judging.registered import evaluate_version
from essaflow.refs import AdapterRef, ChampionRef, DatasetRef, EvalRef, RunRef
from essaflow.storage import StorageError, open_store
from essaflow.timing import Timer
from essaflow.tracking.champion import reusable_report_uri
from essaflow.tracking.promotion import CHAMPION, alias_version

log = logging.getLogger(__name__)

CHAMPION_LABEL = "champion"
"""The champion's report label (runs/<id>/eval/champion/)."""


def protocol_record(eval_cfg: EvalConfig, sampling: SamplingConfig) -> dict[str, Any]:
    """The protocol stored beside a report: the eval and sampling sections."""
    return {"eval": eval_cfg.model_dump(mode="json"), "sampling": sampling.model_dump(mode="json")}


def eval_table(ref: EvalRef) -> list[dict[str, Any]]:
    """A report's summary as table rows (metric, value to 4 places), the truncated share last."""
    rows = [{"metric": k, "value": round(v, 4)} for k, v in ref.summary.items()]
    return [*rows, {"metric": "truncated_share", "value": round(ref.truncated_share, 4)}]


def evaluate_on_eval_split(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    adapter: AdapterRef | None, label: str, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k of the base (adapter None) or a trained policy on it, on the eval split (the same samples budget and
    seed for every label); data: the prompt formatting."""
    timer = Timer()
    with timer.part("storage"):
        splits = read_dataset(dataset)
        adapter_dir = fetch_dir(adapter.uri, adapter.digest) if adapter is not None else None
    with timer.part("compute"):
        from essaflow.judging.model_eval import evaluate_adapter, evaluate_output  # torch: where a stage evaluates

        fmt = data.prompt_format()
        if adapter is None or adapter_dir is None:
            report = evaluate_adapter(model, None, splits.eval, eval_cfg, sampling, fmt)
        else:
            report = evaluate_output(model, adapter_dir, adapter.output_kind, splits.eval, eval_cfg, sampling, fmt)
    with timer.part("storage"):
        ref = publish_eval(open_store(run.storage_uri), run, label, report, protocol_record(eval_cfg, sampling))
    with timer.part("tracking"):
        tracking.log_eval(tracking.tracked(run), label, report)
    return ref.model_copy(update={"stage": f"evaluate-{label}", "timings": timer.timings()})


def evaluate_start(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    start: AdapterRef, base: EvalRef, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k of the adapter training starts from (the SFT start, or the adapter at adapter_uri), under the base's
    protocol: what the method adds is tuned minus this, what SFT added is this minus the base. An untrained start
    (no SFT steps: a fresh LoRA, B = 0) is the base itself, and its report is the base's."""
    if start.kind == "sft" and start.training.steps == 0:
        return base.model_copy(update={"stage": "evaluate-sft_start", "timings": {}, "reused": True})
    return evaluate_on_eval_split(data, model, sampling, eval_cfg, dataset, start, "sft_start", run)


def evaluate_tuned(
    data: DataConfig, model: ModelConfig, sampling: SamplingConfig, eval_cfg: EvalConfig, dataset: DatasetRef,
    tuned: AdapterRef, start: EvalRef, run: RunRef,
) -> EvalRef:  # fmt: skip
    """pass@k of the tuned adapter. Method none's result is the start itself (the same bytes, the same protocol and
    seed): its report is published and logged again as the tuned one instead of being computed twice."""
    if tuned.kind != "none" or start.reused:
        return evaluate_on_eval_split(data, model, sampling, eval_cfg, dataset, tuned, "tuned", run)
    timer = Timer()
    with timer.part("storage"):
        report = read_eval_report(start)
        ref = publish_eval(open_store(run.storage_uri), run, "tuned", report, protocol_record(eval_cfg, sampling))
    with timer.part("tracking"):
        tracking.log_eval(tracking.tracked(run), "tuned", report)
    return ref.model_copy(update={"stage": "evaluate-tuned", "timings": timer.timings()})


def evaluate_alias(
    model_name: str, alias: str, dataset: DatasetRef, eval_cfg: EvalConfig, sampling: SamplingConfig, run: RunRef
) -> EvalRef:
    """pass@k of `models:/<name>@<alias>` with this protocol, formatted as its version formats prompts."""
    timer, label = Timer(), f"{model_name}-{alias}"
    with timer.part("tracking"):
        version = str(tracking.client(run.tracking_uri).get_model_version_by_alias(model_name, alias).version)
    with timer.part("storage"):
        splits = read_dataset(dataset)
    with timer.part("compute"), tracking.downloaded_version(run.tracking_uri, model_name, version) as m:
        report = evaluate_version(m, splits.eval, eval_cfg, sampling)
    with timer.part("storage"):
        ref = publish_eval(open_store(run.storage_uri), run, label, report, protocol_record(eval_cfg, sampling))
    with timer.part("tracking"):
        tracking.log_eval(tracking.tracked(run), label, report)
        tracking.set_tags(tracking.tracked(run), {"essaflow.evaluated_model": f"models:/{model_name}/{version}"})
    return ref.model_copy(update={"stage": f"evaluate-{label}", "timings": timer.timings()})


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
    registry: GateConfig, eval_cfg: EvalConfig, sampling: SamplingConfig, dataset: DatasetRef, run: RunRef
) -> ChampionRef | None:
    """models:/<run.name>@champion on this run's eval split and protocol: its stored counts when they match (and
    registry.reuse_counts), else evaluated again here. None when there is no champion, or it is this run's own
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
    stored = reusable_report_uri(dict(champ.tags or {}), **digests) if registry.reuse_counts else None
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
