"""A finished pipeline run summarised: the pass@k table before and after, the markdown page the orchestrator's UI
shows (links, gate decision, method, artifacts, the data snapshot), and the `data` part of its JSON line; the page
of a run skipped because nothing was new. Never imports prefect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from essaflow.refs import AdapterRef, DatasetRef, EvalRef, ModelRef, RegisteredRef, RunInputs, RunRef
from essaflow.secrets import safe_uri

SNAPSHOT_FILES_SHOWN = 10
"""Files listed per data source on the summary page (the rest are counted)."""


@dataclass(frozen=True)
class FinishedRun:
    """Every stage's reference of a pipeline run that reached registration."""

    run: RunRef
    dataset: DatasetRef
    base: ModelRef
    sft: AdapterRef
    adapter: AdapterRef
    """The tuned adapter (the train stage's result)."""
    before: EvalRef
    after: EvalRef
    model: RegisteredRef
    start: EvalRef | None = None
    """pass@k of the adapter training started from (the SFT start), under the same protocol."""

    def refs(self) -> tuple[Any, ...]:
        """The stage references whose timings the run's parts add up."""
        refs = (self.run, self.dataset, self.base, self.sft, self.adapter, self.before, self.after, self.model)
        return refs + ((self.start,) if self.start is not None else ())


def passk_rows(before: EvalRef, after: EvalRef, start: EvalRef | None = None) -> list[dict[str, Any]]:
    """One row per metric both reports have: before, after and the difference, to 4 places; with the training's
    start, its score too and the parts of the difference: SFT's (start - before) and the method's (after - start)."""
    rows = []
    for k, v in after.summary.items():
        if k not in before.summary:
            continue
        row = {"metric": k, "before": round(before.summary[k], 4), "after": round(v, 4)}
        row["delta"] = round(v - before.summary[k], 4)
        if start is not None and k in start.summary:
            row["sft_start"] = round(start.summary[k], 4)
            row["sft_delta"] = round(start.summary[k] - before.summary[k], 4)
            row["method_delta"] = round(v - start.summary[k], 4)
        rows.append(row)
    return rows


def snapshot_lines(dataset: DatasetRef, shown: int = SNAPSHOT_FILES_SHOWN) -> str:
    """The data snapshot the run read, one bullet per source, its files listed (the first few) with versions."""
    lines = [f"- data snapshot `{dataset.snapshot.get('digest', '')}`; left out: {dataset.excluded}"]
    for s in dataset.snapshot.get("sources", []):
        files = list(s["files"].items())
        lines.append(f"  - {s['role']}: `{s['source']}` `{s['digest']}` ({len(files)} file(s))")
        lines += [f"    - `{uri}` `{version}`" for uri, version in files[:shown]]
        if len(files) > shown:
            lines.append(f"    - ... and {len(files) - shown} more")
    return "\n".join(lines)


def summary_markdown(done: FinishedRun) -> str:
    """The run's summary page: model version and aliases, links, the gate's decision, the method, pass@k before
    and after, and where every artifact is."""
    run, dataset, adapter, model = done.run, done.dataset, done.adapter, done.model
    mlflow_link = f"[MLflow run]({run.mlflow_url})" if run.mlflow_url else f"MLflow run `{run.mlflow_run_id}`"
    table = passk_rows(done.before, done.after, done.start)
    if done.start is not None:  # SFT's part and the method's part apart
        head = "| metric | base | SFT start | tuned | SFT part | method part |\n|---|---|---|---|---|---|"
        rows = "\n".join(f"| {r['metric']} | {r['before']} | {r.get('sft_start', '')} | {r['after']} | "
                         f"{r.get('sft_delta', 0):+} | {r.get('method_delta', 0):+} |" for r in table)  # fmt: skip
    else:
        head = "| metric | before | after | delta |\n|---|---|---|---|"
        rows = "\n".join(f"| {r['metric']} | {r['before']} | {r['after']} | {r['delta']:+} |" for r in table)
    fitness = f"; fitness: {adapter.training.fitness_kind}" if adapter.training.fitness_kind else ""
    return f"""# Fine-tune `{run.name}`: {model.name} v{model.version} ({", ".join(model.aliases)})

{mlflow_link} (tracking `{safe_uri(run.tracking_uri)}`), registered model `{model.model_uri}`.
Promotion gate: {model.decision}.

Method: {adapter.training.method_label or adapter.kind}{fitness}.

{head}
{rows}

## Artifacts
- dataset `{dataset.hash}` ({dataset.sizes}): `{dataset.uri}`
{snapshot_lines(dataset)}
- adapter ({adapter.kind}, {adapter.training.steps} steps): `{adapter.uri}`
- eval reports: `{done.before.uri}`, `{done.after.uri}`
- checkpoints: `{run.storage_uri.rstrip("/")}/{run.run_prefix}/checkpoints/`
"""


def data_summary(dataset: DatasetRef) -> dict[str, Any]:
    """The run's JSON line `data`: the snapshot digest, how many files, what was left out of the splits."""
    files = sum(len(s["files"]) for s in dataset.snapshot.get("sources", []))
    return {"snapshot": dataset.snapshot.get("digest", ""), "files": files, **dataset.excluded}


def skipped_markdown(run: RunRef, checked: RunInputs, reason: str) -> str:
    """The page of a run with nothing new: why, and the inputs it shares with the last completed run."""
    inputs = "\n".join(f"- {k}: `{v}`" for k, v in checked.inputs.items())
    return f"# Skipped `{run.name}`: nothing new\n\n{reason}.\n\n" + inputs
