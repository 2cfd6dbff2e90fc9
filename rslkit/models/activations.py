"""ELU computed from ``exp`` on the CPU: the same function as ``nn.ELU`` (alpha 1), less CPU per PPO update.

PyTorch's CPU ELU evaluates ``expm1`` on every element, several times the cost of ``exp`` (docs/benchmarks.md,
section 1), and its backward recomputes it from the input. Here
``ELU(x) = max(x, exp(min(x, 0)) - 1)`` (``e^x - 1 >= x`` for ``x <= 0``, and ``0 < x`` for ``x > 0``) takes four
cheap in-place passes, and the backward reads the saved output: ``dELU/dx = 1`` for ``y > 0``, ``y + 1`` otherwise.
Outputs differ from ``torch.nn.functional.elu`` by at most ~1e-7 (``e^x - 1`` instead of ``expm1`` near 0).
Other devices, ONNX export and tracing use ``torch.nn.functional.elu`` itself (one fused kernel there).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


def _exp_elu(x: torch.Tensor) -> torch.Tensor:
    y = x.clamp(max=0).exp_().sub_(1)
    return torch.maximum(x, y, out=y)


class _ExpELUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = _exp_elu(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.elu_backward(grad, 1.0, 1.0, 1.0, True, y)  # is_result: grad * (y > 0 ? 1 : y + 1)


def elu(x: torch.Tensor) -> torch.Tensor:
    """``torch.nn.functional.elu(x)`` (alpha 1), computed from ``exp`` for CPU tensors outside export/tracing."""
    exporting = torch.onnx.is_in_onnx_export() or torch.jit.is_tracing() or torch.compiler.is_compiling()
    if x.device.type != "cpu" or exporting:
        return F.elu(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _ExpELUFunction.apply(x)
    return _exp_elu(x)


class ELU(nn.ELU):
    """``nn.ELU()`` (alpha 1, not in place) evaluated with :func:`elu`; same state dict and repr."""

    def __init__(self) -> None:
        super().__init__(alpha=1.0, inplace=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return elu(x)
