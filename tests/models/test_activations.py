"""The exp-based ELU is torch's ELU: same values, same gradients, and plain ``Elu`` in exported graphs."""

from __future__ import annotations

import io

import onnx
import pytest
import torch
import torch.nn.functional as F

from rslkit.models.activations import ELU, elu
from rslkit.models.mlp import make_mlp


def _inputs() -> torch.Tensor:
    x = torch.randn(513, 67, generator=torch.Generator().manual_seed(0)) * 4
    x[0, :5] = torch.tensor([0.0, -0.0, 1e-8, -1e-8, -50.0])
    return x


def test_values_match_torch_elu() -> None:
    x = _inputs()
    assert torch.allclose(elu(x), F.elu(x), atol=2e-7, rtol=0)
    with torch.inference_mode():
        assert torch.allclose(elu(x), F.elu(x), atol=2e-7, rtol=0)


def test_input_is_not_modified() -> None:
    x = _inputs()
    before = x.clone()
    elu(x)
    x.requires_grad_()
    elu(x)
    assert torch.equal(x.detach(), before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_match_torch_elu(dtype: torch.dtype) -> None:
    x = _inputs().to(dtype)
    weights = torch.randn(x.shape, dtype=dtype, generator=torch.Generator().manual_seed(1))
    ours = x.clone().requires_grad_()
    ref = x.clone().requires_grad_()
    (elu(ours) * weights).sum().backward()
    (F.elu(ref) * weights).sum().backward()
    assert ours.grad is not None and ref.grad is not None
    assert torch.allclose(ours.grad, ref.grad, atol=1e-6, rtol=0)
    if dtype == torch.float64:
        assert torch.autograd.gradcheck(elu, (x[:4, :6].clone().requires_grad_(),))


def test_module_keeps_the_elu_interface() -> None:
    mlp = make_mlp(3, [8, 8], 2, "elu")
    acts = [m for m in mlp if isinstance(m, torch.nn.ELU)]
    assert len(acts) == 2 and all(isinstance(m, ELU) for m in acts)
    assert acts[0].state_dict() == {} and repr(acts[0]) == "ELU(alpha=1.0)"


def test_onnx_export_emits_elu() -> None:
    mlp = make_mlp(3, [8], 2, "elu").eval()
    buffer = io.BytesIO()
    torch.onnx.export(mlp, (torch.zeros(1, 3),), buffer, dynamo=False)
    ops = {node.op_type for node in onnx.load_from_string(buffer.getvalue()).graph.node}
    assert "Elu" in ops and "Exp" not in ops
