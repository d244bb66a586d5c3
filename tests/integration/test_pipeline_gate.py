"""The promotion gate inside the finetune flow (in this process, against the real Prefect, MLflow, SeaweedFS and Ray
servers): the first run becomes champion; a second run on the same problems and protocol reuses the champion's
stored counts; a run under another protocol re-evaluates the champion; the evidence is in the version's tags, in
gate/evidence.json, in the `promotion-gate` Prefect artifact and in the run's result."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from essaflow import tracking
from essaflow.config import parse_config
from tests.integration.pipeline_support import flow_run_artifacts, tiny

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_disconnect_after")]


def _finetune(cfg: dict, force: bool = False):
    from flows.finetune import finetune

    return finetune(parse_config(cfg), force=force)


def test_the_flow_scores_the_champion_on_its_own_problems_and_records_the_evidence(stack_in_process, tmp_path):
    name = f"gate-flow-{uuid.uuid4().hex[:6]}"
    first = _finetune(tiny(name=name, method="none"))
    assert first.aliases == ["champion"] and first.gate["verdict"] == "promote"
    from flows.finetune import PIPELINE_STAGES

    assert set(first.stages) == set(PIPELINE_STAGES)  # every stage the progress counter counts reported, no other
    assert first.gate["champion_scored"] == "none" and first.gate["n_problems"] == 16

    # the same data, the cached SFT adapter, the same protocol (forced: nothing new would skip the run): the
    # champion's stored counts, a tie, kept
    same = _finetune(tiny(name=name, method="none"), force=True)
    assert same.gate["champion_scored"] == "stored counts" and same.gate["champion_version"] == first.model_version
    assert same.gate["diff"] == 0 and same.aliases == ["challenger"] and same.gate["verdict"] == "keep"

    # another eval seed: the stored counts are refused and the champion is evaluated again on this run's problems
    changed = _finetune(tiny(name=name, method="none", eval={**tiny()["eval"], "seed": 99}))
    g = changed.gate
    assert g["champion_scored"] == "re-evaluated" and g["protocol_digest"] != same.gate["protocol_digest"]
    assert g["problems_digest"] == same.gate["problems_digest"] and g["n_problems"] == 16
    # the same SFT adapter under the same protocol as its challenger: equal outcomes, problem by problem
    assert g["challenger"] == g["champion"] == changed.after["pass@1"] and g["diff"] == 0
    assert changed.aliases == ["challenger"] and "within noise" in g["reason"]

    c = tracking.client(stack_in_process.mlflow.url)
    tags = c.get_model_version(name, changed.model_version).tags
    assert tags["essaflow.gate_champion_scored"] == "re-evaluated" and tags["essaflow.gate_verdict"] == "keep"
    assert tags["essaflow.gate_protocol_digest"] == g["protocol_digest"] and tags["essaflow.gate_n_problems"] == "16"
    assert tags["essaflow.eval_protocol_digest"] == g["protocol_digest"]  # what the next run may reuse
    champion_metrics = c.get_run(changed.mlflow_run_id).data.metrics
    assert champion_metrics["eval.champion.pass_at_1"] == pytest.approx(g["champion"])
    local = Path(c.download_artifacts(changed.mlflow_run_id, "gate/evidence.json", str(tmp_path)))
    body = json.loads(local.read_text())
    assert body["decision"] == changed.decision and body["ci_low"] == body["ci_high"] == 0.0
    summary = flow_run_artifacts(changed.run_id)["promotion-gate"]
    assert "**keep**" in summary and "re-evaluated" in summary and "paired diff" in summary
