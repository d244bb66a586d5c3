"""The registered model: a base causal LM plus a LoRA adapter behind MLflow's pyfunc interface.

`predict` takes a list of raw questions and returns one completion per question (greedy unless `temperature`
says otherwise). The model config stores how training showed prompts to the model (data.prompt_template, then
data.chat_template and data.system_prompt), and `predict` formats every question the same way, with the same
function (`prompt_format.py`, logged beside this file): BOS once, stopping at every EOS id. The file is logged as
an MLflow "model from code": MLflow copies it beside the artifacts and runs it on load, so nothing is unpickled
and the model needs only mlflow, torch, transformers and peft (not essaflow).

Artifacts: `adapter` (a peft adapter directory, tokenizer included) and, when the base is a local checkpoint such
as the built-in tiny model, `base` (the checkpoint itself, so the model loads on any machine); when the base is a
GGUF file, `base_gguf` (the file, a quarter of the dequantized weights' size), dequantized again on load by
transformers (the `gguf` package). Otherwise the model config names the base (`base_model`, a hub id or path, with
`revision`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
from mlflow.pyfunc import PythonModel

try:  # the copy MLflow logged beside this file (code_paths): formatting as at training time, essaflow not needed
    from prompt_format import PromptFormat, left_pad, prompt_ids, stop_ids
except ImportError:  # saving the model from the repository
    from essaflow.generation.prompt_format import PromptFormat, left_pad, prompt_ids, stop_ids

DEFAULT_MAX_NEW_TOKENS = 512


class AdapterModel(PythonModel):
    """Base model + LoRA adapter; prompts in, completions out."""

    # predict has no type hints on purpose: the logged signature (with params) is the contract, not inferred hints.
    # MLflow's attribute for a class that opts out of type-hint validation (it sets it on its ChatModel) spares the
    # "Add type hints to the `predict` method" warning that every definition of this class printed (on save_model,
    # on load_model): MLflow wraps that check in its own warnings filter, so no filter of ours could hide it.
    _skip_type_hint_validation = True

    def load_context(self, context: Any) -> None:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        cfg = dict(context.model_config or {})
        base = context.artifacts.get("base") or cfg["base_model"]
        adapter = context.artifacts["adapter"]
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            cfg.get("dtype", "float32")
        ]
        remote = bool(cfg.get("trust_remote_code", False))
        revision = None if "base" in context.artifacts else cfg.get("revision")
        tok_dir = adapter if (Path(adapter) / "tokenizer_config.json").exists() else base
        self.tokenizer = AutoTokenizer.from_pretrained(tok_dir, trust_remote_code=remote)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if "base_gguf" in context.artifacts:  # the same dequantized weights training read
            gguf = Path(context.artifacts["base_gguf"])
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(
                base, revision=revision, trust_remote_code=remote, dtype=dtype
            )
        self.model = PeftModel.from_pretrained(model, adapter).eval()
        self.max_new_tokens = int(cfg.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        self.prompt_template = cfg.get("prompt_template") or "{prompt}"
        self.fmt = PromptFormat(
            chat_template=cfg.get("chat_template", "auto"), system_prompt=cfg.get("system_prompt") or None
        )
        self.stop = stop_ids(self.tokenizer, getattr(model, "generation_config", None))
        self.batch_size = int(cfg.get("batch_size", 64))

    def predict(self, context, model_input, params=None):  # no type hints: the logged signature rules
        """Completions for `model_input` (a list of raw questions; MLflow may hand it over as a one-column frame)."""
        import torch

        prompts_all = _as_prompts(model_input)
        params = params or {}
        max_new = int(params.get("max_new_tokens", self.max_new_tokens))
        temperature = float(params.get("temperature", 0.0))
        tok = self.tokenizer
        out: list[str] = []
        with torch.no_grad():
            for start in range(0, len(prompts_all), self.batch_size):
                questions = prompts_all[start : start + self.batch_size]
                prompts = [self.prompt_template.replace("{prompt}", q) for q in questions]
                ids, mask = left_pad(prompt_ids(tok, prompts, self.fmt), tok.pad_token_id)
                device = next(self.model.parameters()).device
                enc = {
                    "input_ids": torch.tensor(ids, device=device),
                    "attention_mask": torch.tensor(mask, device=device),
                }
                sample = temperature > 0
                gen = self.model.generate(
                    **enc,
                    do_sample=sample,
                    temperature=temperature if sample else None,
                    top_p=None,
                    top_k=0 if sample else None,
                    max_new_tokens=max_new,
                    pad_token_id=tok.pad_token_id,
                    eos_token_id=self.stop,
                )
                completions = gen[:, enc["input_ids"].shape[1] :]
                out.extend(tok.batch_decode(completions, skip_special_tokens=True))
        return out


def _as_prompts(model_input: Any) -> list[str]:
    if hasattr(model_input, "iloc"):  # pandas DataFrame / Series, as the pyfunc schema enforcement builds
        col = model_input.iloc[:, 0] if getattr(model_input, "ndim", 1) == 2 else model_input
        return [str(p) for p in col.tolist()]
    if isinstance(model_input, str):
        return [model_input]
    return [str(p) for p in list(model_input)]


mlflow.models.set_model(AdapterModel())
