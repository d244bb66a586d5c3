"""The deployments' parameters come from the presets: a Quick run, the schedule (no parameters given), the form's
defaults and `essaflow run configs/<preset>.yaml` are one config; a run's changes override the preset like --set;
each method's form holds only its own section, titled by key, every field described."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import yaml
from prefect.flows import load_flow_from_entrypoint
from prefect.utilities.callables import parameter_schema

from essaflow.config import PipelineConfig, load_config
from flows.parameters import ESSAPipelineConfig, FGRPOPipelineConfig, merge_tree

REPO = Path(__file__).resolve().parents[3]
DEPLOYMENTS = {d["name"]: d for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]}
FINETUNE = {"finetune-essa": ("tiny-essa", "config"), "finetune-fgrpo": ("tiny-fgrpo", "config")}


def flow_of(deployment: str):
    return load_flow_from_entrypoint(str(REPO / DEPLOYMENTS[deployment]["entrypoint"]))


def default_of(flow, param: str):
    return inspect.signature(flow.fn).parameters[param].default


def form_default(flow, param: str) -> dict:
    """What the server stores and the form starts from: the schema's default, as JSON."""
    schema = json.loads(json.dumps(parameter_schema(flow).model_dump_for_openapi()))
    return schema["properties"][param]["default"]


@pytest.mark.parametrize("deployment", sorted(FINETUNE))
def test_quick_run_schedule_form_and_cli_run_the_same_preset(deployment):
    preset, param = FINETUNE[deployment]
    cli = load_config(REPO / "configs" / f"{preset}.yaml")  # what `essaflow run configs/<preset>.yaml` runs
    assert "parameters" not in DEPLOYMENTS[deployment]  # prefect.yaml sets none: no second source of defaults
    flow = flow_of(deployment)
    default = default_of(flow, param)  # a Quick run or a scheduled run: no parameters, the flow's default
    assert default.pipeline() == cli
    model = type(default)
    assert model.model_validate(form_default(flow, param)).pipeline() == cli  # the form, submitted unchanged


@pytest.mark.parametrize("deployment", sorted(FINETUNE))
def test_a_changed_field_overrides_the_preset_like_set(deployment):
    preset, param = FINETUNE[deployment]
    section = "essa" if deployment == "finetune-essa" else "grpo"
    key = "generations" if section == "essa" else "steps"
    params = flow_of(deployment).validate_parameters({param: {section: {key: 3}}})  # a form or API run's change
    expected = load_config(REPO / "configs" / f"{preset}.yaml", [f"{section}.{key}=3"])
    assert params[param].pipeline() == expected


def test_each_method_form_holds_only_its_section():
    essa, fgrpo = ESSAPipelineConfig.model_json_schema(), FGRPOPipelineConfig.model_json_schema()
    assert "essa" in essa["properties"] and "grpo" not in essa["properties"]
    assert "grpo" in fgrpo["properties"] and "essa" not in fgrpo["properties"]
    assert essa["properties"]["method"]["enum"] == ["essa"] and fgrpo["properties"]["method"]["enum"] == ["fgrpo"]
    with pytest.raises(ValueError, match="grpo"):
        ESSAPipelineConfig.model_validate({"grpo": {"steps": 2}})


@pytest.mark.parametrize("deployment", [*sorted(FINETUNE), "evaluate-champion"])
def test_form_sections_are_titled_by_key_and_every_field_is_described(deployment):
    schema = parameter_schema(flow_of(deployment)).model_dump_for_openapi()
    assert "GRPOConfig" not in schema["definitions"] or deployment == "finetune-fgrpo"
    for name, definition in schema["definitions"].items():
        for key, prop in definition["properties"].items():
            assert prop["title"] == key, (name, key)  # `data`, not DataConfig; `population`, not Population
            assert prop.get("description"), (name, key)


def test_evaluate_champion_scores_on_the_tiny_preset():
    tiny = load_config(REPO / "configs" / "tiny.yaml")
    flow = flow_of("evaluate-champion")
    params = default_of(flow, "params")
    assert params.model_name == tiny.name
    # as the flow scores: through the pipeline config it builds (which resolves what the data decides)
    built = PipelineConfig(name=params.model_name, data=params.data, eval=params.eval, sampling=params.sampling)
    assert (built.data, built.eval, built.sampling) == (tiny.data, tiny.eval, tiny.sampling)
    assert type(params).model_validate(form_default(flow, "params")) == params
    changed = flow.validate_parameters({"params": {"eval": {"samples_per_problem": 8, "ks": [1, 8]}}})["params"]
    assert changed.data == tiny.data and changed.eval.ks == [1, 8]


def test_merge_tree_merges_mappings_and_replaces_everything_else():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_tree(base, {"a": {"c": [3]}, "e": None}) == {"a": {"b": 1, "c": [3]}, "d": 1, "e": None}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}  # not modified


def test_presets_dir_setting_moves_where_the_defaults_come_from(tmp_path, monkeypatch):
    from flows.parameters import preset_tree

    (tmp_path / "tiny-essa.yaml").write_text(yaml.safe_dump(merge_tree(preset_tree("tiny-essa"), {"seed": 7})))
    monkeypatch.setenv("ESSAFLOW_PRESETS_DIR", str(tmp_path))
    assert ESSAPipelineConfig().seed == 7 and ESSAPipelineConfig(seed=3).seed == 3


def test_compare_methods_runs_the_compare_preset_and_its_form_is_described():
    from essaflow.compare import CompareConfig, load_compare_config

    assert "parameters" not in DEPLOYMENTS["compare-methods"]
    flow = flow_of("compare-methods")
    preset = load_compare_config(REPO / "configs" / "compare-tiny.yaml")
    assert default_of(flow, "config") == preset  # a scheduled run: the preset
    assert CompareConfig.model_validate(form_default(flow, "config")) == preset  # the form, submitted unchanged
    schema = parameter_schema(flow).model_dump_for_openapi()
    for name in ("CompareConfig", "MethodSpec", "ProjectionInputs"):
        for key, prop in schema["definitions"][name]["properties"].items():
            assert prop["title"] == key and prop.get("description"), (name, key)
    with pytest.raises(Exception, match="grpo.gama"):  # a bad method override fails at submission, named
        flow.validate_parameters(
            {
                "config": {
                    **preset.model_dump(mode="json"),
                    "methods": [{"name": "x", "method": "fgrpo", "set": {"grpo.gama": 1}}],
                }
            }
        )


def test_gc_storage_runs_the_gc_flow_with_a_described_form_that_refuses_a_uri_password():
    from prefect.utilities.schema_tools import ValidationError, validate

    assert "parameters" not in DEPLOYMENTS["gc-storage"] and DEPLOYMENTS["gc-storage"]["concurrency_limit"] == 1
    flow = flow_of("gc-storage")
    schema = json.loads(json.dumps(parameter_schema(flow).model_dump_for_openapi()))
    fields = schema["definitions"]["RetentionConfig"]["properties"]
    assert set(fields) == {"keep_runs", "storage_uri", "tracking_uri"}
    assert all(f["title"] == k and f.get("description") for k, f in fields.items())
    assert fields["keep_runs"]["default"] == 5 and fields["keep_runs"]["minimum"] == 1
    validate({"retention": {"tracking_uri": "http://127.0.0.1:5000"}}, schema, raise_on_error=True)
    with pytest.raises(ValidationError, match="does not match"):
        validate({"retention": {"tracking_uri": "http://user:pw@127.0.0.1:5000"}}, schema, raise_on_error=True)
    assert flow.validate_parameters({"dry_run": True})["retention"].keep_runs == 5
