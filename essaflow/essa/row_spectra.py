"""Many ESSA candidates in one batch: every row runs with its own candidate's singular values.

Candidates share the base weights and the frozen singular vectors of every LoRA factor; only the singular values
differ (`svd_lora.py`). With the thin SVDs A = U_A diag(a) V_Aᵀ and B = U_B diag(b) V_Bᵀ of the SFT factors, a
candidate's LoRA term is

    scaling · B' A' x = U_B diag(scaling · b') (V_Bᵀ U_A) diag(a') V_Aᵀ x,

three shared matmuls (n -> r, r -> r, r -> m) and two per-row scalings by the row's candidate's spectra a', b'
(the searched top k values moved, the tail as in the SFT factor). The peft adapter is switched off inside
`RowSpectra.population` and a forward hook on each LoRA layer adds this term to the base layer's output, so the
base layer may be anything peft wraps (a quantised one too). The function equals `SVDLoRA.apply` + the LoRA path
up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F


class _Layer:
    """One adapted layer's shared factors and, during a batch, its rows' spectra."""

    def __init__(self, a, b, scaling: float):
        self.v_a = a.vh_all  # r x n: x -> the A spectrum's coordinates
        self.mid = (b.vh_all @ a.u_all).contiguous()  # r x r: from A's left to B's right singular vectors
        self.u_b_t = b.u_all.t().contiguous()  # r x m, for addmm
        self.scaling = scaling
        self.rows: tuple[torch.Tensor, torch.Tensor] | None = None
        """(a' [B, 1, r], scaling · b' [B, 1, r]) of the batch's rows."""

    def hook(self, module, args, output: torch.Tensor) -> torch.Tensor:
        a, b = self.rows  # set by `select` before every batch
        h = F.linear(args[0].to(self.v_a.dtype), self.v_a)
        h.mul_(a)  # in place: these small ops are a large share of the layer's time on CPU
        h = F.linear(h, self.mid)
        h.mul_(b)
        h = h.reshape(-1, h.shape[-1]).to(output.dtype)
        u_b_t = self.u_b_t.to(output.dtype)
        if output.is_contiguous():  # a plain linear's output: add the LoRA term in place, fused with its matmul
            output.view(-1, output.shape[-1]).addmm_(h, u_b_t)
            return output
        return output + (h @ u_b_t).view(output.shape)


class RowSpectra:
    """The model of an `SVDLoRA`, run with a singular-value set per batch row (`population`)."""

    def __init__(self, svd):
        self.svd = svd
        name = svd.adapter_name
        self.layers = [_Layer(a, b, float(m.scaling[name])) for m, a, b in svd.factor_pairs()]
        self.modules = [m for m, _, _ in svd.factor_pairs()]

    def tables(self, xs: list[np.ndarray]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer: (a' [C, r], scaling · b' [C, r]) of the C candidates, on the layer's device and dtype."""
        spectra = [self.svd.spectra(x) for x in xs]  # per candidate: one float64 spectrum per factor
        out = []
        for j, layer in enumerate(self.layers):
            a = np.stack([s[2 * j] for s in spectra])
            b = np.stack([s[2 * j + 1] for s in spectra]) * layer.scaling
            to = {"device": layer.v_a.device, "dtype": layer.v_a.dtype}
            out.append((torch.from_numpy(a).to(**to), torch.from_numpy(b).to(**to)))
        return out

    @contextmanager
    def population(self, xs: list[np.ndarray]) -> Iterator[Callable[[torch.Tensor], None]]:
        """Within it, the model runs candidate `xs[c]` on every row whose entry in the last `select(rows)` is c.

        Call `select` (a [B] long tensor of candidate indices) before each forward or generate call of B rows; the
        rows keep their positions through a generate call (greedy and keyed sampling never reorder them). The
        adapter is switched off meanwhile (the hooks add the LoRA term) and back on after."""
        tables = self.tables(xs)

        def select(rows: torch.Tensor) -> None:
            for layer, (a, b) in zip(self.layers, tables):
                idx = rows.to(a.device)
                layer.rows = (a[idx].unsqueeze(1), b[idx].unsqueeze(1))

        handles = []
        with self.svd.model.disable_adapter():
            try:
                handles = [m.register_forward_hook(layer.hook) for m, layer in zip(self.modules, self.layers)]
                yield select
            finally:
                for h in handles:
                    h.remove()
                for layer in self.layers:
                    layer.rows = None
