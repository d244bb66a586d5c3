"""The register step's decision and tags, from stored reports and a file store, without MLflow or the orchestrator
(essaflow/gate/register.py)."""

from __future__ import annotations

import json

from essaflow.artifacts import dataset_name, publish_dataset, publish_eval, read_eval_report
from essaflow.config import PipelineConfig
from essaflow.data.prepare import prepare_splits
from essaflow.gate.candidate import Candidate, decide_candidate
from essaflow.gate.register import RegisteredVersion
from essaflow.gate.version_tags import registration_tags
from essaflow.judging.evaluation import EvalReport
from essaflow.refs import AdapterRef, ChampionRef, ModelRef, RegisteredRef, RunRef, TrainingSummary
from essaflow.storage import open_store
from essaflow.timing import Timer

CFG = PipelineConfig(name="tiny", method="essa", eval={"samples_per_problem": 1, "ks": [1]})


def _report(greedy: list[int], ids: list[str]) -> EvalReport:
    n = len(ids)
    return EvalReport(num_problems=n, samples_per_problem=1, greedy=sum(greedy) / n,
                      pass_at_k={"1": sum(greedy) / n}, correct_counts=list(greedy), problem_ids=ids,
                      greedy_correct=list(greedy))  # fmt: skip


def _candidate(tmp_path, champion_greedy: list[int] | None) -> tuple[RunRef, Candidate]:
    store = open_store(f"file://{tmp_path}")
    splits = prepare_splits(CFG.data)
    dataset = publish_dataset(store, dataset_name(CFG.data), splits, CFG.data)
    run = RunRef(run_id="run-2", name="tiny", storage_uri=store.uri, tracking_uri="sqlite:///x.db", experiment_id="1",
                 mlflow_run_id="ml-2", flow_run_id="flow-2")  # fmt: skip
    ids = [p.id for p in splits.eval[: CFG.eval.max_problems]]
    tuned = [1] * len(ids)
    before = publish_eval(store, run, "base", _report([0] * len(ids), ids), {})
    after = publish_eval(store, run, "tuned", _report(tuned, ids), {})
    champion = None
    if champion_greedy is not None:
        champ_eval = publish_eval(store, run, "champion", _report(champion_greedy * len(ids), ids), {})
        champion = ChampionRef(name="tiny", version="1", eval=champ_eval, scored="re-evaluated", problems_digest="p",
                               protocol_digest="q")  # fmt: skip
    summary = TrainingSummary(method_label="ESSA(es, accuracy)", fitness_kind="black-box reward", steps=3)
    adapter = AdapterRef(uri="file:///a", digest="ad", kind="essa", training=summary)
    base = ModelRef(name_or_path="builtin:tiny", local_path="/m", digest="md")
    return run, Candidate(dataset, base, adapter, before, after, champion)


def test_a_first_version_promotes_and_its_tags_say_how_it_was_made(tmp_path):
    run, candidate = _candidate(tmp_path, champion_greedy=None)
    decided = decide_candidate(CFG, candidate, _report([1], ["x"]), Timer())
    assert decided.evidence.verdict == "promote" and decided.evidence.reason == "no champion yet"

    tags = registration_tags(CFG, run, candidate, decided)
    assert tags["method"] == "essa" and tags["method_label"] == "ESSA(es, accuracy)"
    assert tags["fitness_kind"] == "black-box reward" and tags["base_model"] == "builtin:tiny"
    assert json.loads(tags["pass_at_k"]) == {"greedy": 1.0, "pass@1": 1.0}
    assert tags["essaflow.eval_problems_digest"] == decided.problems_digest
    assert tags["essaflow.eval_report_uri"] == candidate.after.uri
    assert tags["storage_run_uri"] == f"{run.storage_uri.rstrip('/')}/runs/run-2"
    assert tags["prefect.flow_run_id"] == "flow-2" and "essaflow.data_config" in tags


def test_a_challenger_that_ties_the_champion_keeps_it(tmp_path):
    _, candidate = _candidate(tmp_path, champion_greedy=[1])
    stored = read_eval_report(candidate.after)  # the champion's stored report
    decided = decide_candidate(CFG, candidate, stored, Timer())
    assert decided.evidence.verdict == "keep" and decided.evidence.champion_version == "1"
    assert decided.evidence.diff == 0.0

    ref = RegisteredRef(name="tiny", version="2", aliases=["challenger"], decision="kept", model_uri="models:/tiny/2",
                        gate=decided.evidence.to_dict())  # fmt: skip
    page = RegisteredVersion(ref, decided.evidence).gate_markdown()
    assert page.startswith("# Promotion gate: tiny v2") and page.endswith("Decision: kept\n")
