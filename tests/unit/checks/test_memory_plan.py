"""check-config's memory plan: parameter counts from config.json alone, and the 7B recipe's verdict per sharding."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from essaflow.checks.memory_plan import GiB, Target, plan_memory
from essaflow.model.architecture import KNOWN_CONFIGS, Architecture, read_architecture

FGRPO = Path(__file__).resolve().parents[3] / "configs" / "fgrpo-qwen2.5-7b-deepscaler.yaml"


def _real_count(path: str) -> int:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    return sum(p.numel() for p in model.parameters())  # tied embeddings counted once, as the plan counts them


def test_the_tiny_models_estimate_is_its_real_parameter_count():
    arch, source = read_architecture("builtin:tiny")
    assert arch is not None and source.endswith("config.json")
    assert arch.tied_embeddings and arch.parameters() == _real_count(str(Path(source).parent))


@pytest.mark.parametrize("builder", ["build_qwen_like", "build_llama_like"])
def test_qwen2_and_llama_checkpoints_count_as_they_load(tmp_path, builder):
    """Qwen2 carries q/k/v biases without a config key saying so; Llama does not."""
    from tests.support import real_checkpoints

    ckpt = getattr(real_checkpoints, builder)(tmp_path / "ckpt")
    arch, _ = read_architecture(str(ckpt))
    assert arch is not None and arch.qkv_bias == (builder == "build_qwen_like")
    assert arch.parameters() == _real_count(str(ckpt))


def test_qwen25_7b_from_its_config_numbers_is_7_6_billion():
    arch = Architecture.from_config(KNOWN_CONFIGS["Qwen/Qwen2.5-7B"])
    assert arch.parameters() == 7_615_616_512  # the hub model card: 7.61B


def test_a_config_json_without_the_shape_is_one_clear_error():
    with pytest.raises(ValueError, match="intermediate_size"):
        Architecture.from_config({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 2})


def test_fsdp_divides_parameters_gradients_and_adam_by_the_world():
    arch = Architecture.from_config(KNOWN_CONFIGS["Qwen/Qwen2.5-7B"])
    states = ("fp32 master weights", "fp32 gradients", "fp32 AdamW moments")
    one, sixteen = (plan_memory(arch, "fsdp", Target(w, 80, "bfloat16", 1, 1024, 8192)) for w in (1, 16))
    assert sum(one.parts[k] for k in states) == arch.parameters() * 16
    assert sum(sixteen.parts[k] for k in states) == pytest.approx(arch.parameters() * 16 / 16, abs=64)
    ddp = plan_memory(arch, "ddp", Target(16, 80, "bfloat16", 1, 1024, 8192))
    assert ddp.parts["weights"] + ddp.parts["gradients + DDP bucket"] + ddp.parts["AdamW moments"] == (
        arch.parameters() * 2 * 5  # the issue's ~76 GB a rank: five bf16 copies
    )


def _check(*sets: str):
    args = ["check-config", "--no-machine", "-c", str(FGRPO)]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(app, args)


def test_the_7b_recipe_fits_16_x_80_gib_with_fsdp_and_not_with_ddp():
    fits = _check()
    assert fits.exit_code == 0, fits.output
    assert "memory plan (Qwen/Qwen2.5-7B's published config.json): fsdp on 16 x 80 GiB" in fits.output
    assert "fits in 79.0 GiB usable" in fits.output
    refused = _check("grpo.sharding=ddp")
    assert refused.exit_code == 2
    errors = [line for line in refused.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "ddp on 16 x 80 GiB" in errors[0] and "does not fit in 79.0 GiB" in errors[0]
    assert "7.62B parameters" in errors[0] and "fsdp would need" in errors[0]


def test_no_plan_without_a_gpu_memory_and_a_note_when_the_checkpoint_is_not_local():
    quiet = _check("grpo.workers.gpu_memory_gib=null")
    assert quiet.exit_code == 0 and "memory plan" not in quiet.output
    unknown = _check("model.name_or_path=someone/unknown-7b")
    assert unknown.exit_code == 0 and "memory plan: not made (no config.json of someone/unknown-7b" in unknown.output


def test_a_smaller_gpu_refuses_even_fsdp_naming_the_numbers():
    refused = _check("grpo.workers.gpu_memory_gib=40")
    assert refused.exit_code == 2
    (error,) = [line for line in refused.output.splitlines() if line.startswith("error:")]
    assert "fsdp on 16 x 40 GiB" in error and "39.0 GiB usable" in error and "activations" in error
    recomputed = _check("grpo.workers.gpu_memory_gib=40", "grpo.activation_checkpointing=true")
    assert recomputed.exit_code == 0 and "fsdp on 16 x 40 GiB: 26.1 GiB a rank fits" in recomputed.output
    assert GiB == 1024**3


def test_activation_checkpointing_keeps_each_layers_input_and_one_layers_activations():
    arch = Architecture.from_config(KNOWN_CONFIGS["Qwen/Qwen2.5-7B"])
    kept, recomputed = (
        plan_memory(arch, "fsdp", Target(16, 80, "bfloat16", 1, 1024, 8192, activation_checkpointing=c))
        for c in (False, True)
    )
    tokens, per_layer = 1024 + 8192, 10 * arch.hidden + 4 * arch.intermediate
    assert kept.parts["activations"] == tokens * arch.layers * per_layer * 2
    assert recomputed.parts["activations"] == tokens * (arch.layers * arch.hidden + per_layer) * 2
    assert recomputed.total < kept.total and recomputed.parts["logits"] == kept.parts["logits"]


def test_lora_under_fsdp_shards_the_frozen_base_and_ddp_replicates_it():
    arch = Architecture.from_config(KNOWN_CONFIGS["Qwen/Qwen2.5-7B"])
    lora = {"parameters": "lora", "lora_rank": 16, "lora_modules": ("q_proj", "v_proj")}
    ddp, fsdp = (plan_memory(arch, s, Target(8, 80, "bfloat16", 1, 1024, 8192, **lora)) for s in ("ddp", "fsdp"))
    assert ddp.parts["frozen base"] == arch.parameters() * 2
    assert fsdp.parts["frozen base"] == pytest.approx(arch.parameters() * 2 / 8, abs=16)
    assert fsdp.parts["fp32 master weights"] < ddp.parts["weights"] and fsdp.total < ddp.total


def test_a_shared_prompt_counts_the_prompt_once_a_group_plus_its_keys_and_values_copied_to_each_row():
    from dataclasses import replace

    from essaflow.checks.memory_plan import activation_bytes

    arch = Architecture.from_config(KNOWN_CONFIGS["Qwen/Qwen2.5-7B"])
    per_row = Target(1, 80, "bfloat16", 8, 1024, 1024, group_size=8)
    shared = replace(per_row, shared_prompt=True)
    per_token = arch.layers * (10 * arch.hidden + 4 * arch.intermediate) * 2
    copies = 8 * 1024 * arch.layers * 2 * arch.kv_heads * arch.head_dim * 2
    assert activation_bytes(arch, per_row)[0] - activation_bytes(arch, shared)[0] == 7 * 1024 * per_token - copies
    assert activation_bytes(arch, per_row)[1] == activation_bytes(arch, shared)[1]
    checkpointed = (replace(t, activation_checkpointing=True) for t in (per_row, shared))
    assert len({activation_bytes(arch, t) for t in checkpointed}) == 1  # the gradient forward stays per row there
