"""Linear layers whose CPU inference multiplies by a kept, contiguous copy of the transposed weight.

A performance detail of the model, not a concept of the book: ``nn.Linear`` computes ``x @ W^T + b`` with
``W [out, in]`` as stored, and for the few rows of a decoding step (``[16, d_model]``) the CPU kernels run that
"transposed" product markedly slower than the same product with ``W^T`` laid out contiguously (on a 2-core Intel
Xeon with AVX-512, 1 thread: ``[16, 512] x [512, 128]`` 44 us against 17 us; ``bench/decode_speed.py`` measures
whole searches). So without gradients, on CPU, these layers keep ``W^T`` (built once, reused until a parameter
changes) and call ``addmm``. With gradients, on other devices, and while ``torch.compile``/``torch.export`` or
the JIT tracer follow the code, they are plain ``nn.Linear`` (an exported graph holds the parameters once).

The kept copy is keyed on each parameter's storage, in-place version counter, dtype and device, so optimizer
steps, in-place edits, ``load_state_dict`` and ``.to()`` all rebuild it. It costs one more copy of the weights in
memory while a model decodes on CPU. Results equal ``nn.Linear``'s up to float rounding (a different kernel sums
in a different order).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def _capturing() -> bool:
    """Whether ``torch.compile``/``torch.export`` or the JIT follow the code (a graph must hold the parameters)."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting()


class KeptTranspose:
    """``W^T`` of one or more ``nn.Linear`` layers stacked along their outputs (``[in, sum of outs]``) and their
    biases (concatenated, or None if any layer has none), kept until a parameter changes.

    ``stacked()`` gives the stacked ``W [sum of outs, in]`` as ``F.linear`` takes it (rebuilt at every call, so
    autograd routes gradients back to each layer); ``apply(x)`` uses the kept ``W^T`` on CPU when no gradient
    is recorded and no graph is captured, the kept stack on other devices without gradients, else ``F.linear``
    with ``stacked()``.
    """

    def __init__(self, layers: Sequence[nn.Linear]) -> None:
        self._layers = tuple(layers)
        self._key: tuple | None = None
        self._kept: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def _params(self) -> list[torch.Tensor]:
        return [p for layer in self._layers for p in (layer.weight, layer.bias) if p is not None]

    def stacked(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(weight [sum of outs, in], bias [sum of outs] or None)``."""
        if len(self._layers) == 1:
            return self._layers[0].weight, self._layers[0].bias
        weight = torch.cat([layer.weight for layer in self._layers])
        biases = [layer.bias for layer in self._layers]
        bias = None if any(b is None for b in biases) else torch.cat(biases)  # type: ignore[arg-type]
        return weight, bias

    def kept(self, *, transposed: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(weight_t [in, sum of outs] contiguous, bias or None)`` (``transposed=False``: ``stacked()`` as it is),
        rebuilt only when a parameter changed."""
        key = (transposed, *((p.data_ptr(), p._version, p.dtype, p.device) for p in self._params()))
        if self._kept is None or key != self._key:
            with torch.no_grad():
                weight, bias = self.stacked()
                weight = weight.t().contiguous() if transposed else weight.detach()
                self._kept = (weight, None if bias is None else bias.detach())
            self._key = key
        return self._kept

    def _records_gradients(self, x: torch.Tensor) -> bool:
        return torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self._params()))

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., in]`` -> ``[..., sum of outs]``."""
        if self._records_gradients(x) or _capturing():
            return F.linear(x, *self.stacked())
        if not x.is_cpu:  # GPU kernels take the stored layout as fast: keep only the stacking
            return F.linear(x, *(self.stacked() if len(self._layers) == 1 else self.kept(transposed=False)))
        weight_t, bias = self.kept()
        rows = x.reshape(-1, x.shape[-1])  # a view where it can be (F.linear on a strided 3-D input is far slower)
        out = rows @ weight_t if bias is None else torch.addmm(bias, rows, weight_t)
        return out.view(*x.shape[:-1], weight_t.shape[1])


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same ``state_dict``) whose CPU inference uses a :class:`KeptTranspose`."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self._transpose = KeptTranspose([self])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._transpose.apply(x)
