"""One tiny model per synthetic task: builtin:tiny keeps the digest of the shipped checkpoint, every task's recipe
is a checkpoint of its own, agrees with the data config's defaults for its task, writes its task's alphabet and
never pretrains on a problem of the held-out region."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from essaflow.config import ModelConfig, load_config
from essaflow.data.config import SyntheticTaskConfig
from essaflow.data.splits import key_points
from essaflow.data.synthetic_tasks import synthetic_task
from essaflow.model.identity import model_identity
from essaflow.model.tiny import SHIPPED, SHIPPED_DIRS, pretraining_corpus, tiny_base_path
from essaflow.model.tiny_recipe import BUILTIN_MODELS, TinyRecipe

TASKS = {"builtin:tiny": "arithmetic", "builtin:tiny-countdown": "countdown", "builtin:tiny-programs": "programs"}


def test_the_arithmetic_recipe_is_the_shipped_checkpoint():
    assert TinyRecipe().digest() == "85a5f991af00"
    assert json.loads((SHIPPED / "essaflow_recipe.json").read_text())["digest"] == TinyRecipe().digest()
    assert BUILTIN_MODELS["builtin:tiny"].recipe == TinyRecipe()
    assert tiny_base_path() == SHIPPED


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_built_in_model_ships_built_from_its_recipe(name):
    """A fresh machine builds none of them: each shipped checkpoint's recorded digest is its recipe's."""
    recipe = BUILTIN_MODELS[name].recipe
    meta = json.loads((SHIPPED_DIRS[name] / "essaflow_recipe.json").read_text())
    assert meta["digest"] == recipe.digest() and meta["recipe"].get("task_name") == recipe.task_name
    assert tiny_base_path(recipe) == SHIPPED_DIRS[name]
    assert (SHIPPED_DIRS[name] / "model.safetensors").stat().st_size > 1_000_000


def test_each_task_has_its_own_checkpoint_identity_and_answer_length():
    digests = {name: m.recipe.digest() for name, m in BUILTIN_MODELS.items()}
    assert set(BUILTIN_MODELS) == set(TASKS) and len(set(digests.values())) == len(digests)
    for name, digest in digests.items():
        assert model_identity(ModelConfig(name_or_path=name)) == f"{name}@{digest}"
        cfg = load_config(None, [f"model.name_or_path={name}"])
        assert cfg.sampling.max_new_tokens == BUILTIN_MODELS[name].max_new_tokens


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_recipe_pretrains_on_the_problems_its_task_config_makes_by_default(name):
    recipe, task = BUILTIN_MODELS[name].recipe, TASKS[name]
    assert (recipe.task_name or "arithmetic") == task
    assert recipe.task == SyntheticTaskConfig(task=task).knobs()  # data.synthetic.task=<task> meets its model


@pytest.mark.parametrize("name", ["builtin:tiny-countdown", "builtin:tiny-programs"])
def test_the_corpus_leaves_out_the_held_out_region_and_fits_the_alphabet(name):
    small = BUILTIN_MODELS[name].recipe
    small = TinyRecipe(**{**small.__dict__, "corpus_size": 2000})
    corpus = pretraining_corpus(small)
    assert 1600 < len(corpus) < 2000 and min(key_points(p)[0] for p in corpus) >= small.held_out
    assert set("".join(p.prompt + p.answer for p in corpus)) <= set(synthetic_task(small.task_name).alphabet)
    longest = max(len(p.prompt) + len(p.answer) for p in corpus)
    assert longest < small.max_positions


def test_a_task_recipe_builds_a_model_with_its_alphabet(tmp_path, monkeypatch):
    monkeypatch.setenv("ESSAFLOW_CACHE_DIR", str(tmp_path))
    base = BUILTIN_MODELS["builtin:tiny-countdown"].recipe
    recipe = TinyRecipe(**{**base.__dict__, "pretrain_steps": 2, "batch_size": 8, "corpus_size": 200,
                           "num_layers": 1, "hidden_size": 32, "intermediate_size": 64})  # fmt: skip
    path = tiny_base_path(recipe)
    assert path.name == f"tiny-base-{recipe.digest()}"
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.decode(tok("12 7>19:(7+12)*3/4")["input_ids"]) == "12 7>19:(7+12)*3/4"
    assert tok.unk_token_id not in tok("3 7 25>46:25+3*7")["input_ids"]
