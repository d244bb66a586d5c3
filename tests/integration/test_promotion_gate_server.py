"""The promotion gate against a real MLflow server (artifacts in SeaweedFS): the champion is re-evaluated from the
registry on the challenger's problems when the protocol changed (its stored counts refused by digest), the paired
evidence lands in the version's tags and in gate/evidence.json, and the alias moves only on promoting evidence
measured against the current champion."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from essaflow import tracking
from essaflow.artifacts import publish_eval, read_eval_report
from essaflow.config import EvalConfig, ModelConfig, PipelineConfig, SamplingConfig
from essaflow.data.synthetic import synthetic_problems
from essaflow.gate.champion import eval_identity_tags, reusable_report_uri
from essaflow.gate.config import GateConfig
from essaflow.gate.decision import decide, first_version
from essaflow.gate.digests import problems_digest, protocol_digest
from essaflow.gate.promotion import EVIDENCE_ARTIFACT, Registration, register_with_gate
from essaflow.judging.evaluation import EvalReport
from essaflow.judging.model_eval import evaluate_adapter
from essaflow.judging.registered import evaluate_version
from essaflow.refs import RunRef
from essaflow.storage import open_store

pytestmark = pytest.mark.integration

KS = [1, 2, 4]
SAMPLING = SamplingConfig(max_new_tokens=6, temperature=1.0)


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory):
    """A fresh LoRA adapter (B = 0: the model is the pretrained tiny arithmetic base) on builtin:tiny."""
    from essaflow.model.loading import attach_lora, load_base_model, load_tokenizer, resolve_model_path, save_adapter

    root = tmp_path_factory.mktemp("gate-model")
    cfg = ModelConfig(name_or_path=resolve_model_path("builtin:tiny"), lora_rank=2)
    save_adapter(attach_lora(load_base_model(cfg), cfg), root / "adapter", load_tokenizer(cfg))
    return cfg, root / "adapter"


def _run(url: str, name: str, storage: str, run_id: str) -> tuple[tracking.TrackedRun, RunRef]:
    tracked = tracking.start_run(PipelineConfig(name=name), url, run_id, {})
    ref = RunRef(run_id=run_id, name=name, storage_uri=storage, tracking_uri=url,
                 experiment_id=tracked.experiment_id, mlflow_run_id=tracked.run_id)  # fmt: skip
    return tracked, ref


def _register(tracked, run_id, name, model, report: EvalReport, evidence, tags=None) -> Registration:
    cfg, adapter = model
    request = tracking.VersionRequest(
        run=tracked, pipeline_run_id=run_id, name=name, adapter_dir=adapter, model_cfg=cfg, base_dir=cfg.name_or_path,
        sampling=SAMPLING, tags=tags or {}, metric="pass@1", score=report.pass_at_k["1"],
    )  # fmt: skip
    return register_with_gate(request, evidence=evidence)


def test_the_champion_is_re_evaluated_on_a_changed_protocol_and_the_evidence_is_recorded(
    mlflow_server, tiny_adapter, tmp_path
):
    url, name = mlflow_server.url, f"gate-{uuid.uuid4().hex[:6]}"
    c, storage = tracking.client(url), tmp_path.as_uri()
    problems = synthetic_problems(24, 1, 2, seed=3)
    probs = problems_digest(problems)

    # run 1: the first version, its per-problem report stored and its digests on its tags
    eval1 = EvalConfig(samples_per_problem=4, ks=KS, seed=11, reward="exact_match")
    tracked1, run1 = _run(url, name, storage, "gate-run-1")
    report1 = evaluate_adapter(tiny_adapter[0], tiny_adapter[1], problems, eval1, SAMPLING)
    ref1 = publish_eval(open_store(storage), run1, "tuned", report1, {})
    proto1 = protocol_digest(eval1, SAMPLING)
    v1 = _register(tracked1, "gate-run-1", name, tiny_adapter, report1, first_version(report1, "pass@1", proto1, probs),
                   eval_identity_tags(probs, proto1, ref1.uri))  # fmt: skip
    assert v1.aliases == ["champion"] and "no champion" in v1.decision
    champ_tags = c.get_model_version_by_alias(name, "champion").tags
    assert reusable_report_uri(champ_tags, probs, proto1) == ref1.uri
    assert read_eval_report(ref1).greedy_correct == report1.greedy_correct  # what a later gate pairs

    # run 2: another eval seed is another protocol: the stored counts are refused, the champion is evaluated again
    eval2 = eval1.model_copy(update={"seed": 12})
    proto2 = protocol_digest(eval2, SAMPLING)
    assert proto2 != proto1 and reusable_report_uri(champ_tags, probs, proto2) is None
    challenger = evaluate_adapter(tiny_adapter[0], tiny_adapter[1], problems, eval2, SAMPLING)
    with tracking.downloaded_version(url, name, v1.version) as version:
        champion = evaluate_version(version, problems, eval2, SAMPLING)
    assert sum(champion.correct_counts) > 0 and champion.problem_ids == [p.id for p in problems]
    # the same weights (downloaded from the registry) under the same protocol: the same per-problem outcomes
    assert champion.correct_counts == challenger.correct_counts
    assert champion.greedy_correct == challenger.greedy_correct
    evidence = decide(challenger, champion, KS, GateConfig(), proto2, probs, v1.version, "re-evaluated")
    tracked2, _ = _run(url, name, storage, "gate-run-2")
    v2 = _register(tracked2, "gate-run-2", name, tiny_adapter, challenger, evidence)
    assert v2.aliases == ["challenger"] and f"does not beat v{v1.version}" in v2.decision

    tags = c.get_model_version(name, v2.version).tags
    assert tags["essaflow.gate_verdict"] == "keep" and tags["essaflow.gate_champion_scored"] == "re-evaluated"
    assert tags["essaflow.gate_n_problems"] == "24" and tags["essaflow.gate_protocol_digest"] == proto2
    assert tags["essaflow.gate_champion_version"] == v1.version and float(tags["essaflow.gate_diff"]) == 0.0
    assert float(tags["essaflow.gate_champion"]) == pytest.approx(champion.pass_at_k["1"], abs=1e-4)
    assert set(json.loads(tags["essaflow.gate_guards"])) == {"greedy", "pass@4"}
    assert tags["promotion"] == v2.decision
    local = Path(c.download_artifacts(tracked2.run_id, EVIDENCE_ARTIFACT, str(tmp_path)))
    body = json.loads(local.read_text())
    assert body["verdict"] == "keep" and body["decision"] == v2.decision and body["n_problems"] == 24
    assert body["ci_low"] == body["ci_high"] == 0.0 and "within noise" in body["reason"]

    # run 3: a paired win measured against v1 moves the alias; run 4's evidence against v1 is stale then
    better = EvalReport(24, 4, 1.0, {"1": 1.0, "2": 1.0, "4": 1.0}, [4] * 24, champion.problem_ids,
                        greedy_correct=[1] * 24)  # fmt: skip
    win = decide(better, champion, KS, GateConfig(), proto2, probs, v1.version, "re-evaluated")
    tracked3, _ = _run(url, name, storage, "gate-run-3")
    v3 = _register(tracked3, "gate-run-3", name, tiny_adapter, better, win)
    assert win.promotes and v3.aliases == ["champion"] and "paired +" in v3.decision
    assert c.get_model_version_by_alias(name, "champion").version == v3.version
    tracked4, _ = _run(url, name, storage, "gate-run-4")
    v4 = _register(tracked4, "gate-run-4", name, tiny_adapter, better, win)
    assert v4.aliases == ["challenger"] and f"the champion is v{v3.version} now" in v4.decision
