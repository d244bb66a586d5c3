"""How a prompt meets the model: chat template, system prompt, BOS exactly once, every EOS id.

One function renders a prompt for the model (`render_prompt`) and one turns it into token ids (`prompt_ids`);
SFT, ESSA scoring, GRPO rollouts, evaluation and the registered pyfunc model all call them, so a prompt looks
the same to the model wherever it meets it (docs/own_model.md).

This module imports only the standard library and duck-types the tokenizer: the registered pyfunc model ships a
copy of this file beside itself (MLflow `code_paths`) so it formats raw questions exactly as training did, without
essaflow installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

CHAT_TEMPLATE_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class PromptFormat:
    """What wraps a problem's prompt before tokenisation (data.chat_template, data.system_prompt)."""

    chat_template: str = "auto"
    """auto: the tokenizer's chat template when it has one; always: the tokenizer's, an error if it has none;
    never: the prompt text as is."""
    system_prompt: str | None = None
    """A system message before the user turn; without a chat template it is prepended as a paragraph."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def uses_chat_template(tokenizer: Any, fmt: PromptFormat) -> bool:
    """Whether `fmt` applies a chat template with this tokenizer (auto resolves here)."""
    if fmt.chat_template not in CHAT_TEMPLATE_MODES:
        raise ValueError(f"data.chat_template must be one of {CHAT_TEMPLATE_MODES}, got {fmt.chat_template!r}")
    has = bool(getattr(tokenizer, "chat_template", None))
    if fmt.chat_template == "always" and not has:
        raise ValueError(
            "data.chat_template=always but the tokenizer has no chat template; use auto or never, or a checkpoint "
            "whose tokenizer_config.json / chat_template.jinja carries one"
        )
    return fmt.chat_template != "never" and has


def _messages(prompt: str, fmt: PromptFormat) -> list[dict[str, str]]:
    system = [{"role": "system", "content": fmt.system_prompt}] if fmt.system_prompt else []
    return [*system, {"role": "user", "content": prompt}]


def render_prompt(tokenizer: Any, prompt: str, fmt: PromptFormat) -> str:
    """The text the model is conditioned on: the chat template's user turn + generation prompt, or the prompt."""
    if not uses_chat_template(tokenizer, fmt):
        return f"{fmt.system_prompt}\n\n{prompt}" if fmt.system_prompt else prompt
    return tokenizer.apply_chat_template(_messages(prompt, fmt), tokenize=False, add_generation_prompt=True)


def render_prompts(tokenizer: Any, prompts: Iterable[str], fmt: PromptFormat) -> list[str]:
    return [render_prompt(tokenizer, p, fmt) for p in prompts]


def bos_id(tokenizer: Any) -> int | None:
    """The BOS id the tokenizer adds in front of a text (Llama, Gemma), None when it adds none (Qwen, ours).

    Measured rather than read from flags: a tokenizer that has a bos_token but never adds it (Qwen2) gets none.
    """
    cached = getattr(tokenizer, "_essaflow_bos", "unset")
    if cached != "unset":
        return cached
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    bos = getattr(tokenizer, "bos_token_id", None)
    found = bos if bos is not None and len(full) > len(plain) and full[0] == bos and plain[:1] != [bos] else None
    with contextlib.suppress(AttributeError):  # a tokenizer that refuses attributes: measured every time
        tokenizer._essaflow_bos = found
    return found


def encode_texts(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of already rendered texts, BOS prepended once where the tokenizer adds one.

    Tokenised without special tokens, then BOS added by hand unless the text already starts with it (a chat
    template such as Llama 3's writes `{{ bos_token }}` itself): never two BOS, never an EOS after a prompt.
    """
    rows = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    bos = bos_id(tokenizer)
    if bos is None:
        return [list(r) for r in rows]
    return [list(r) if r[:1] == [bos] else [bos, *r] for r in rows]


def prompt_ids(tokenizer: Any, prompts: list[str], fmt: PromptFormat) -> list[list[int]]:
    """Raw prompts -> the ids the model sees (rendered, then BOS once): what every generation and SFT feeds."""
    return encode_texts(tokenizer, render_prompts(tokenizer, prompts, fmt))


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[list[list[int]], list[list[int]]]:
    """(ids, attention mask) left padded to the longest row: generation continues from the right edge."""
    width = max((len(r) for r in rows), default=0)
    ids = [[pad_id] * (width - len(r)) + r for r in rows]
    mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
    return ids, mask


def target_ids(tokenizer: Any, prompt: str, target: str, fmt: PromptFormat, stop: list[int]) -> list[int]:
    """The ids SFT trains on after `prompt_ids(prompt)`: the target and the end of the assistant's turn.

    With a chat template the assistant turn is rendered by the template and cut after its first stop id (so the
    model learns to end with `<|im_end|>` when that is how its turns end); without, the target + tokenizer EOS.
    Tokenised apart from the prompt, exactly as generation sees the prompt.
    """
    eos = tokenizer.eos_token_id
    if uses_chat_template(tokenizer, fmt):
        head = render_prompt(tokenizer, prompt, fmt)
        full = tokenizer.apply_chat_template(
            [*_messages(prompt, fmt), {"role": "assistant", "content": target}], tokenize=False
        )
        if full.startswith(head) and target in full[len(head) :]:
            ids = tokenizer(full[len(head) :], add_special_tokens=False)["input_ids"]
            ends = [i for i, t in enumerate(ids) if t in stop]
            if ends:
                return list(ids[: ends[0] + 1])
            return [*ids, eos]
        # a template whose full conversation does not extend its generation prompt (e.g. one that rewrites past
        # turns): the target, closed by the first stop id (generation_config's end of turn)
        return [*tokenizer(target, add_special_tokens=False)["input_ids"], stop[0] if stop else eos]
    return [*tokenizer(target, add_special_tokens=False)["input_ids"], eos]


def stop_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """Every id that ends a completion: generation_config.eos_token_id (an int or a list, e.g. Qwen's
    <|im_end|> and <|endoftext|>) and the tokenizer's EOS, in that order, without repeats."""
    out: list[int] = []
    cfg_eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    for value in (cfg_eos, getattr(tokenizer, "eos_token_id", None)):
        for i in value if isinstance(value, (list, tuple)) else [value]:
            if i is not None and int(i) not in out:
                out.append(int(i))
    return out
