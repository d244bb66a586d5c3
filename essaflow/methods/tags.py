"""How a stored result was obtained, read back from the training summary it carries.

The method object (`essaflow.methods.method_of(cfg).tags(cfg)`) states the tags of a run being trained: the label
('ESSA(es, accuracy)', 'F-GRPO(gamma=0.5)', 'SFT only') and, for ESSA, the fitness kind. They go on the MLflow run,
the registered version, the compare report and the CLI jobs' JSON lines; a version registered later reads them back
here. Never imports prefect.
"""

from __future__ import annotations

from essaflow.methods.sft_only import SFT_ONLY_LABEL
from essaflow.refs import AdapterRef


def trained_method_tags(adapter: AdapterRef) -> dict[str, str]:
    """The method tags of the run that trained `adapter`, read from its training summary (which records the label
    of a trained method; kind "none" when the SFT adapter is the result)."""
    tags = {"method_label": SFT_ONLY_LABEL if adapter.kind == "none" else adapter.training.method_label}
    if adapter.training.fitness_kind:
        tags["fitness_kind"] = adapter.training.fitness_kind
    return tags
