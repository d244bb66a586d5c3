"""SVD-LoRA: the ESSA search space (ESSA-v3 sec. 3.2; docs/algorithms.md sec. 2.1-2.3).

Every LoRA factor of the SFT adapter is decomposed on its own (not the product BA):

    A_j = U_Aj diag(s_Aj) V_Ajᵀ   (A_j: r x n_j, lora_A)        B_j = U_Bj diag(s_Bj) V_Bjᵀ   (B_j: m_j x r, lora_B)

U and V are frozen; the search vector holds additive offsets δ to the top k = floor(alpha * r) singular values of
each factor (Alg. 1 line 6), one contiguous slice per factor, laid out module by module as [δ_A, δ_B], so

    dimension = adapted matrices x 2 x floor(alpha * r).

A candidate rebuilds A'_j = U_Aj diag(s_Aj + δ_Aj) V_Ajᵀ (B likewise) and runs with ΔW_j = scaling · B'_j A'_j, keeping
the SFT adapter's LoRA scaling (docs/algorithms.md sec. 2.1, 6.9: the singular values searched are those of the stored,
unscaled factors). `apply` writes the factors into the model's LoRA weights in place, with no model copy.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from transformers import PreTrainedTokenizerBase

from essaflow.model.loading import embedding_layers_to_save, stable_adapter_config
from essaflow.storage.atomic_dir import atomic_dir


def trainable_per_factor(alpha: float, rank: int) -> int:
    """k = floor(alpha * r) singular values per factor (ESSA-v3 Alg. 1 line 6; Fig. 2: r=8, alpha=0.1 gives 0).

    The product is rounded to 9 decimals before the floor so float artefacts (0.29 * 100 = 28.999...) do not lose
    a value. Raises ValueError naming alpha and the rank when k would be 0 (docs/algorithms.md sec. 2.2).
    """
    k = math.floor(round(alpha * rank, 9))
    if k < 1:
        raise ValueError(
            f"essa.alpha={alpha} with LoRA rank r={rank} gives floor(alpha*r)={k} trainable singular values per "
            f"factor; raise essa.alpha to at least {1 / rank:.4g} or the LoRA rank (model.lora_rank)"
        )
    return k


@dataclass(frozen=True)
class FactorSlice:
    """Where one factor's offsets live in the search vector."""

    module: str
    """Qualified name of the adapted module (e.g. base_model.model.model.layers.0.self_attn.q_proj)."""
    factor: str
    """'A' (lora_A, r x n) or 'B' (lora_B, m x r)."""
    start: int
    stop: int


class _Factor:
    """One LoRA factor: its live weight, the SFT weight W0 and the frozen top-k singular triplets."""

    def __init__(self, weight: torch.Tensor, k: int):
        self.weight = weight
        self.w0 = weight.detach().clone()
        u, s, vh = torch.linalg.svd(self.w0.double(), full_matrices=False)  # thin SVD, s descending
        self.spectrum = s.cpu().numpy().copy()  # every singular value (the population path rebuilds from all)
        self.s = self.spectrum[:k].copy()  # float64 anchor values s0 (docs/algorithms.md sec. 2.1), on the host
        self.u_all = u.to(weight.dtype).contiguous()
        self.vh_all = vh.to(weight.dtype).contiguous()
        self.u = self.u_all[:, :k].contiguous()
        self.vh = self.vh_all[:k, :].contiguous()

    @torch.no_grad()
    def write(self, delta: torch.Tensor) -> None:
        # W0 + U_k diag(δ) V_kᵀ is exactly U diag(s + δ) Vᵀ with the untouched tail of the spectrum, because
        # W0 = U diag(s) Vᵀ. Written this way δ = 0 restores the SFT weight bit for bit, and it costs one rank-k
        # product instead of a full rebuild.
        self.weight.copy_(torch.addmm(self.w0, self.u * delta.to(self.u.device, self.u.dtype), self.vh))


class SVDLoRA:
    """The ESSA parameterisation of a peft LoRA model (docs/algorithms.md sec. 2.1-2.3).

    Args:
        model: a PeftModel whose LoRA weights hold the SFT adapter (the anchor, offsets = 0).
        alpha: fraction of each factor's singular values that is searched: top floor(alpha * r).
        nonnegative: clamp s + δ at 0. The paper does not say whether singular values may turn negative
            (docs/algorithms.md sec. 6.3); a negative value only flips the sign of that rank-one component, so the
            default leaves offsets unconstrained, as the unbounded CMA-ES of the paper would.
        offsets: "additive" (the paper: s' = s0 + θ) or "relative" (s' = s0 · (1 + θ), so one step size fits
            every factor although the SFT singular values span orders of magnitude; docs/algorithms.md sec. 6.16).
        adapter_name: the peft adapter to reparameterise (default: the active one).
    """

    def __init__(
        self,
        model: PeftModel,
        alpha: float,
        nonnegative: bool = False,
        adapter_name: str | None = None,
        offsets: str = "additive",
    ):
        if offsets not in ("additive", "relative"):
            raise ValueError(f"offsets={offsets!r}: additive or relative")
        self.model = model
        self.alpha = alpha
        self.nonnegative = nonnegative
        self.offsets = offsets
        name = adapter_name or model.active_adapter
        self.adapter_name = name
        self._modules: list[tuple[LoraLayer, str]] = []
        self._factors: list[_Factor] = []
        self.layout: list[FactorSlice] = []
        offset = 0
        for mod_name, module in model.named_modules():
            if not isinstance(module, LoraLayer) or name not in module.lora_A:
                continue
            a, b = module.lora_A[name].weight, module.lora_B[name].weight
            k = trainable_per_factor(alpha, a.shape[0])  # rank r of this module (peft allows per-module ranks)
            self._modules.append((module, mod_name))
            for factor, weight in (("A", a), ("B", b)):
                self._factors.append(_Factor(weight, k))
                self.layout.append(FactorSlice(mod_name, factor, offset, offset + k))
                offset += k
        if not self._factors:
            raise ValueError(f"model has no LoRA layers for adapter {name!r}: nothing for ESSA to search")
        self._dimension = offset
        self._current = np.zeros(offset)

    @property
    def dimension(self) -> int:
        """d = adapted matrices x 2 x floor(alpha * r) (ESSA-v3 Fig. 1 caption, Alg. 1 line 6)."""
        return self._dimension

    @property
    def num_matrices(self) -> int:
        """Adapted matrices |J| (each contributes two factors)."""
        return len(self._factors) // 2

    def modules(self) -> list[tuple[LoraLayer, str]]:
        """The adapted LoRA layers with their names, in search-vector order."""
        return list(self._modules)

    def apply(self, offsets: np.ndarray) -> None:
        """Write A' = U_A diag(s_A + δ_A) V_Aᵀ and B' likewise into every LoRA layer, in place
        (docs/algorithms.md sec. 2.1)."""
        offsets = np.asarray(offsets, dtype=np.float64).reshape(-1)
        for factor, delta in zip(self._factors, self.deltas(offsets)):
            factor.write(torch.from_numpy(np.ascontiguousarray(delta)))
        self._current = offsets.copy()

    def deltas(self, offsets: np.ndarray) -> list[np.ndarray]:
        """Each factor's additive change δ to its top-k singular values (float64), in factor order: the search
        vector read as `offsets` says (relative: δ = s0 · θ) and clamped when `nonnegative`."""
        offsets = np.asarray(offsets, dtype=np.float64).reshape(-1)
        if offsets.shape[0] != self._dimension:
            raise ValueError(f"offsets have {offsets.shape[0]} entries, the search space has {self._dimension}")
        out = []
        for factor, part in zip(self._factors, self.layout):
            delta = offsets[part.start : part.stop]
            if self.offsets == "relative":  # θ is a fraction of the SFT value: δ = s0 · θ
                delta = factor.s * delta
            if self.nonnegative:
                delta = np.maximum(factor.s + delta, 0.0) - factor.s
            out.append(delta)
        return out

    def spectra(self, offsets: np.ndarray) -> list[np.ndarray]:
        """Each factor's whole spectrum at `offsets` (float64): s + δ on the top k, the SFT tail unchanged, so
        U diag(spectrum) Vᵀ is the factor `apply` would write."""
        out = []
        for factor, delta in zip(self._factors, self.deltas(offsets)):
            values = factor.spectrum.copy()
            values[: len(delta)] += delta
            out.append(values)
        return out

    def factor_pairs(self) -> list[tuple[LoraLayer, _Factor, _Factor]]:
        """(LoRA layer, its A factor, its B factor) per adapted module, in search-vector order."""
        return [(m, self._factors[2 * i], self._factors[2 * i + 1]) for i, (m, _) in enumerate(self._modules)]

    def export_adapter(
        self, offsets: np.ndarray, out_dir: str | Path, tokenizer: PreTrainedTokenizerBase | None = None
    ) -> Path:
        """Save the rebuilt factors as a standard peft adapter (safetensors + adapter_config.json + tokenizer).

        It loads with plain `PeftModel.from_pretrained`; `essa_offsets.npy` and `essa.json` beside it record the
        search point for provenance only. The model is left holding the offsets it held before the call. Written
        with `essaflow.storage.atomic_dir` (manifest last, swapped in whole; an existing out_dir is replaced only then).
        """
        out = Path(out_dir)
        previous = self._current
        self.apply(offsets)
        try:
            with atomic_dir(out) as tmp:
                embeddings = embedding_layers_to_save(self.model)
                self.model.save_pretrained(tmp, safe_serialization=True, save_embedding_layers=embeddings)
                stable_adapter_config(tmp)  # same bytes from any process (a resumed run's is another one)
                if tokenizer is not None:
                    tokenizer.save_pretrained(tmp)
                np.save(tmp / "essa_offsets.npy", np.asarray(offsets, dtype=np.float64), allow_pickle=False)
                meta = {
                    "alpha": self.alpha,
                    "dimension": self.dimension,
                    "matrices": self.num_matrices,
                    "offsets": self.offsets,
                }
                (tmp / "essa.json").write_text(json.dumps(meta, indent=2))
        finally:
            self.apply(previous)
        return out
