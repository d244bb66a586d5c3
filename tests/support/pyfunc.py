"""What a registered pyfunc model must answer: essaflow's evaluation generator, greedy, on the weights and the prompt
format the loaded model holds. A `predict` that formats prompts differently, samples, or cuts at another length
answers something else."""

from __future__ import annotations

from typing import Any


def greedy_answers(loaded: Any, questions: list[str], max_new_tokens: int | None = None) -> list[str]:
    """The evaluation path's greedy completion of each question with `loaded`'s model (mlflow.pyfunc.load_model's
    result) and its stored prompt template, chat template and system prompt."""
    from essaflow.generation.prompt_format import PromptFormat
    from essaflow.generation.sampling import TransformersGenerator

    held = loaded.unwrap_python_model()
    fmt = PromptFormat(chat_template=held.fmt.chat_template, system_prompt=held.fmt.system_prompt)
    gen = TransformersGenerator(held.model, held.tokenizer, 8, fmt)
    prompts = [held.prompt_template.replace("{prompt}", q) for q in questions]
    cap = max_new_tokens or held.max_new_tokens
    return [row[0] for row in gen.sample(prompts, n=1, temperature=0.0, max_new_tokens=cap).texts]
