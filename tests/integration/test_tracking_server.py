"""essaflow.tracking against a real MLflow server (sqlite backend, artifacts in SeaweedFS): the adapter as a pyfunc
loaded by alias, idempotent registration, the gate without evidence, a fast clear error when the server is unreachable,
and params and tags free of credentials."""

from __future__ import annotations

import time
import uuid

import pytest
import torch

from devstack import free_port
from essaflow import tracking
from essaflow.config import ModelConfig, PipelineConfig, SamplingConfig
from essaflow.gate.promotion import Registration, register_with_gate
from tests.support.pyfunc import greedy_answers

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def micro_adapter(tmp_path_factory):
    """A 1-layer Llama on the character tokenizer and a fresh LoRA adapter on it (seconds to build)."""
    from transformers import LlamaForCausalLM

    from essaflow.model.loading import attach_lora, save_adapter
    from essaflow.model.tiny import TinyRecipe, build_char_tokenizer, tiny_config

    root = tmp_path_factory.mktemp("micro")
    torch.manual_seed(0)
    tok = build_char_tokenizer()
    recipe = TinyRecipe(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2)
    base = LlamaForCausalLM(tiny_config(recipe, tok))
    base.save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    cfg = ModelConfig(name_or_path=str(root / "base"), lora_rank=2)
    save_adapter(attach_lora(base, cfg), root / "adapter", tok)
    return cfg, root / "base", root / "adapter"


def _greedy(micro_adapter, questions: list[str], max_new_tokens: int) -> list[str]:
    """The evaluation generator's greedy answers with the adapter as registered (the default data config's prompt
    format): what the registry's pyfunc must return."""
    from essaflow.config import DataConfig
    from essaflow.generation.sampling import TransformersGenerator
    from essaflow.model.loading import load_model_with_adapter

    cfg, _, adapter = micro_adapter
    model, tok = load_model_with_adapter(cfg, adapter)
    data = DataConfig()
    gen = TransformersGenerator(model.eval(), tok, 8, data.prompt_format())
    prompts = [data.prompt_template.replace("{prompt}", q) for q in questions]
    return [row[0] for row in gen.sample(prompts, n=1, temperature=0.0, max_new_tokens=max_new_tokens).texts]


@pytest.fixture
def mlrun(mlflow_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)  # for mlflow.pyfunc.load_model("models:/...")
    name = f"trk-{uuid.uuid4().hex[:6]}"
    run_id = uuid.uuid4().hex
    return name, run_id, tracking.start_run(PipelineConfig(name=name), mlflow_server.url, run_id, {})


def _register(mlrun, micro_adapter, score: float, pipeline_run_id: str | None = None) -> Registration:
    name, run_id, tracked = mlrun
    cfg, base, adapter = micro_adapter
    return register_with_gate(
        tracking.VersionRequest(
            run=tracked,
            pipeline_run_id=pipeline_run_id or run_id,
            name=name,
            adapter_dir=adapter,
            model_cfg=cfg,
            base_dir=str(base),
            sampling=SamplingConfig(max_new_tokens=4),
            tags={"method": "none"},
            metric="pass@1",
            score=score,
        )
    )


def test_the_registered_pyfunc_loads_by_alias_and_completes_prompts(mlrun, micro_adapter):
    import mlflow

    reg = _register(mlrun, micro_adapter, 0.5)
    assert reg.aliases == ["champion"]
    model = mlflow.pyfunc.load_model(f"models:/{reg.name}@champion")
    out = model.predict(["12+7=", "3-1="])
    assert out == _greedy(micro_adapter, ["12+7=", "3-1="], 4)  # the registered adapter, at the registered cap
    assert out == greedy_answers(model, ["12+7=", "3-1="])  # and what the loaded model's own weights answer
    assert model.predict(["1+1="], params={"max_new_tokens": 1}) == _greedy(micro_adapter, ["1+1="], 1)


def test_registering_twice_for_one_pipeline_run_makes_one_version(mlrun, micro_adapter, mlflow_server):
    first = _register(mlrun, micro_adapter, 0.5)
    again = _register(mlrun, micro_adapter, 0.5)
    assert again.version == first.version
    versions = tracking.client(mlflow_server.url).search_model_versions(f"name = '{first.name}'")
    assert len(versions) == 1


def test_without_paired_evidence_only_a_first_version_becomes_champion(mlrun, micro_adapter, mlflow_server):
    c = tracking.client(mlflow_server.url)
    v1 = _register(mlrun, micro_adapter, 0.5, "run-1")
    v2 = _register(mlrun, micro_adapter, 0.9, "run-2")  # a higher score alone, measured on who knows what
    assert (v1.aliases, v2.aliases) == (["champion"], ["challenger"])
    assert "no paired evidence" in v2.decision and f"v{v1.version}" in v2.decision
    assert c.get_model_version_by_alias(v1.name, "champion").version == v1.version
    tags = c.get_model_version(v1.name, v2.version).tags
    assert tags["metric.pass_at_1"] == "0.9" and tags["promotion"].startswith("challenger")


def test_an_unreachable_tracking_server_fails_fast_naming_the_uri():
    dead = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(tracking.TrackingError, match=f"{dead} is unreachable"):
        tracking.check_tracking(dead)
    assert time.monotonic() - t0 < 6


def test_params_and_tags_carry_no_credentials(mlflow_server, monkeypatch):
    secret = "s3cr3t-" + uuid.uuid4().hex
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    cfg = PipelineConfig(name=f"trk-{uuid.uuid4().hex[:6]}", tracking_uri=f"http://user:{secret}@127.0.0.1:1")
    params = tracking.flat_params(cfg)
    assert params["tracking_uri"] == "http://127.0.0.1:1"
    run = tracking.start_run(cfg, mlflow_server.url, uuid.uuid4().hex, {"note": f"endpoint key {secret}"})
    data = tracking.client(mlflow_server.url).get_run(run.run_id).data
    assert secret not in repr(data.params) and secret not in repr(data.tags)
    assert data.tags["note"] == "endpoint key ***"
