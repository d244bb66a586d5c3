"""The deployments' parameters: one model per flow, its defaults read from a preset in configs/.

The preset file is the one source of a deployment's defaults: a Quick run or a scheduled run of finetune-essa (no
parameters given), a Custom run from the Prefect form and `essaflow run configs/tiny-essa.yaml` run the same config.
Whatever a caller does give overrides the preset key by key, as `--set` does on the command line: a nested mapping
is merged into the preset's section, any other value (a list, a number) replaces it. The form shows the preset's
values, because the model's default instance is the preset.

Each finetune model is the pipeline config of one method: `ESSAPipelineConfig` has no `grpo` section and
`FGRPOPipelineConfig` no `essa` section, so each deployment's form holds only its method's settings. The flow turns
its model into the full `PipelineConfig` (`.pipeline()`), the other method's section at its library defaults,
unused.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, ClassVar, Literal
from uuid import UUID

from pydantic import Field, create_model, model_validator

from essaflow.config import (
    DataConfig,
    EvalConfig,
    ModelConfig,
    PipelineConfig,
    SamplingConfig,
    load_config,
    merge_tree,
    read_yaml_tree,
)
from essaflow.config_base import StrictConfig
from essaflow.methods import METHODS, other_methods
from essaflow.secrets import NO_PASSWORD_IN_FORM, mask_tree, uri_passwords_to_env

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def preset_path(preset: str) -> Path:
    """configs/<preset>.yaml, or under ESSAFLOW_PRESETS_DIR when set (presets kept outside the checkout; the
    browser test's tiny budgets). Set it alike for `essaflow deploy` (the form) and the worker (the runs)."""
    return Path(os.environ.get("ESSAFLOW_PRESETS_DIR") or CONFIGS) / f"{preset}.yaml"


def preset_tree(preset: str) -> dict[str, Any]:
    """The preset file as the plain mapping `essaflow run configs/<preset>.yaml` starts from (`extends:` resolved)."""
    return read_yaml_tree(preset_path(preset), "preset")


class PresetParams(StrictConfig):
    """A preset from configs/ plus what the caller gives: the given keys override the preset's (see merge_tree)."""

    preset: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _onto_preset(cls, data: Any) -> Any:
        return merge_tree(cls.preset_values(), data) if isinstance(data, dict) else data

    @classmethod
    def preset_values(cls) -> dict[str, Any]:
        return preset_tree(cls.preset)


def without_uri_passwords(params: Any) -> Any:
    """The first step of a flow: `params` with any URI password moved into this process's environment
    (secrets.uri_passwords_to_env), and the flow run's parameters as Prefect stored them rewritten with every URI
    password masked. A deployment's form refuses such a URI before it is stored (secrets.NO_PASSWORD_IN_FORM); this
    covers what reaches a flow anyway: a deployment that does not enforce its schema, a flow called from Python."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    params = uri_passwords_to_env(params)
    run_id = flow_run.get_id()
    if run_id:
        with get_client(sync_client=True) as client:
            stored = client.read_flow_run(UUID(run_id)).parameters
            masked = mask_tree(stored)
            if masked != stored:
                client.update_flow_run(UUID(run_id), parameters=masked)
    return params


# ------------------------------------------------------------------------------------------------ finetune


class _MethodPipeline(PresetParams):
    """PipelineConfig of one method; validated as the full PipelineConfig too, so its cross-field rules hold."""

    @model_validator(mode="after")
    def _valid_pipeline(self) -> _MethodPipeline:
        self.pipeline()
        return self

    def pipeline(self) -> PipelineConfig:
        """The full pipeline config the tasks take (the other method's section at its defaults, unused)."""
        return PipelineConfig.model_validate(self.model_dump())


def _method_model(name: str, method: Literal["essa", "fgrpo"], preset: str, doc: str) -> type[_MethodPipeline]:
    """PipelineConfig's fields in their order, less the other methods' sections, `method` fixed to this one."""
    fields: dict[str, Any] = {}
    unread = {other.section for other in other_methods(METHODS.get(method))}
    for key, info in PipelineConfig.model_fields.items():
        if key in unread:
            continue
        if key == "method":
            # one choice, shown as a select: the other method is the other deployment
            about = f"Training method: {method} (this flow's)."
            fields[key] = (Literal[method], Field(method, description=about, json_schema_extra={"enum": [method]}))
        else:
            fields[key] = (info.annotation, copy.copy(info))
    model = create_model(name, __base__=_MethodPipeline, __doc__=doc, __module__=__name__, **fields)
    model.preset = preset
    load_config(preset_path(preset))  # a preset that is no valid config fails at import, naming the field
    return model


ESSAPipelineConfig = _method_model(
    "ESSAPipelineConfig", "essa", "tiny-essa", "An ESSA pipeline run; defaults from configs/tiny-essa.yaml."
)
FGRPOPipelineConfig = _method_model(
    "FGRPOPipelineConfig", "fgrpo", "tiny-fgrpo", "An F-GRPO pipeline run; defaults from configs/tiny-fgrpo.yaml."
)


# ------------------------------------------------------------------------------------------------ evaluate


class EvaluateParams(PresetParams):
    """Which registered model to evaluate, on what data, with which protocol; defaults from configs/tiny.yaml."""

    preset: ClassVar[str] = "tiny"

    model_name: str = "tiny-arith"
    """Registered model name (the pipeline name)."""
    alias: str = "champion"
    """Alias to evaluate: champion, challenger, or any alias you set."""
    base_model: ModelConfig | None = None
    """A base model to evaluate as it is, with no adapter, instead of a registered version (`essaflow eval --base`):
    the starting point a tuned model is compared with (model_name then names only the MLflow experiment)."""
    data: DataConfig = DataConfig()
    """Dataset to evaluate on (its eval split); the same config as training gives the same held-out problems."""
    eval: EvalConfig = EvalConfig()
    """pass@k protocol."""
    sampling: SamplingConfig = SamplingConfig()
    """Generation settings."""
    storage_uri: str = PipelineConfig().storage_uri
    """Artifact root for the report (the default yields to ESSAFLOW_STORAGE_URI)."""
    tracking_uri: str | None = Field(None, json_schema_extra=NO_PASSWORD_IN_FORM)
    """MLflow tracking URI; None uses MLFLOW_TRACKING_URI or the local sqlite file. No password here: the form
    refuses one (the worker's MLFLOW_TRACKING_URI holds it)."""

    @classmethod
    def preset_values(cls) -> dict[str, Any]:
        """The preset's pipeline name and its data, eval and sampling sections: what its runs were scored on."""
        tree = preset_tree(cls.preset)
        picked = {k: tree[k] for k in ("data", "eval", "sampling") if k in tree}
        return {"model_name": tree.get("name", "tiny-arith"), **picked}
