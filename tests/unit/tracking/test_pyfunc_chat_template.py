"""The registered pyfunc model answers raw questions through the prompt formatting it stores:
prompt template, chat template and system prompt of the run, BOS once, stopping at <|im_end|>; the same text the
evaluation generator produces for the same question. MLflow on a local sqlite file (no server needed)."""

from __future__ import annotations

import sys
import uuid

from essaflow import tracking
from essaflow.config import DataConfig, ModelConfig, PipelineConfig, SamplingConfig
from essaflow.generation.sampling import TransformersGenerator
from essaflow.model.loading import attach_lora, load_base_model, load_tokenizer, save_adapter

QUESTIONS = ["Tom has 12 apples and buys 7 more. How many apples does he have?", "Tom has 30 apples and buys 5 more."]


def test_predict_formats_raw_questions_as_training_did(qwen_trained, tmp_path):
    import mlflow

    model_cfg = ModelConfig(name_or_path=str(qwen_trained), target_modules=["q_proj", "v_proj"])
    data = DataConfig(prompt_template="{prompt} Answer briefly.", system_prompt="You are a careful tutor.")
    tok = load_tokenizer(model_cfg)
    model = attach_lora(load_base_model(model_cfg), model_cfg)
    adapter = save_adapter(model, tmp_path / "adapter", tok)
    uri = tracking.local_tracking_uri(tmp_path / "mlflow")
    tracking.check_tracking(uri)
    name = f"pyf-{uuid.uuid4().hex[:6]}"
    run = tracking.start_run(PipelineConfig(name=name), uri, uuid.uuid4().hex, {})
    source = tracking.log_adapter_model(run, adapter, model_cfg, str(qwen_trained), SamplingConfig(max_new_tokens=48),
                                        data)  # fmt: skip
    sys.modules.pop("prompt_format", None)  # load the logged copy, as a machine without essaflow would
    loaded = mlflow.pyfunc.load_model(source)
    assert loaded.model_config["system_prompt"] == "You are a careful tutor."
    answers = loaded.predict(QUESTIONS)
    assert "prompt_format" in sys.modules and "essaflow" not in sys.modules["prompt_format"].__file__
    # the evaluation path on the same (template-applied) prompts
    gen = TransformersGenerator(model.eval(), tok, 8, data.prompt_format())
    prompts = [data.prompt_template.replace("{prompt}", q) for q in QUESTIONS]
    reference = gen.sample(prompts, n=1, temperature=0.0, max_new_tokens=48)
    assert answers == [row[0] for row in reference.texts]
    assert reference.truncated == [[False], [False]], answers  # both turns ended at <|im_end|>
