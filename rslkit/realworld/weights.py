"""Policy weights between a learner and torch actors: a module's state dict as named numpy arrays.

The SAC learner publishes ``state_arrays(model, SAC_ACTING)`` (the actor network and the observation normalizers,
not the critics: the robot needs only what acts); the on-policy learner the acting module of its algorithm. A torch
actor loads them with :func:`load_state_arrays`. A robot without torch receives an exported ONNX policy instead
(``rslkit.deploy.onnx_weights``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

SAC_ACTING = ("actor.", "normalizers.")
"""The state-dict entries of a SAC model that an acting policy needs."""


def _entries(module: torch.nn.Module, prefixes: tuple[str, ...] | None) -> dict[str, torch.Tensor]:
    return {k: v for k, v in module.state_dict().items() if prefixes is None or k.startswith(prefixes)}


def state_arrays(module: torch.nn.Module, prefixes: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """``{name: array}`` of ``module``'s state dict (only names starting with one of ``prefixes``, when given),
    float64 as float32, CPU copies, for a weights message."""
    out = {}
    for name, value in _entries(module, prefixes).items():
        array = value.detach().to("cpu").numpy()
        out[name] = np.ascontiguousarray(array.astype(np.float32) if array.dtype == np.float64 else array)
    return out


def load_state_arrays(
    module: torch.nn.Module, arrays: Mapping[str, np.ndarray], prefixes: tuple[str, ...] | None = None
) -> None:
    """Copy published arrays into ``module`` (its entries under ``prefixes``, when given).

    Raises:
        ValueError: when names or shapes differ (the actor was built with other settings than the learner).
    """
    own = _entries(module, prefixes)
    missing, unexpected = sorted(set(own) - set(arrays)), sorted(set(arrays) - set(own))
    # safetensors keeps 0-d arrays as 0-d, but compare sizes so a [1] scalar from another sender fits too
    wrong = [k for k in own if k in arrays and np.asarray(arrays[k]).size != own[k].numel()]
    if missing or unexpected or wrong:
        raise ValueError(
            f"The learner's weights do not fit this actor (missing {missing[:4]}, unexpected {unexpected[:4]}, "
            f"other shapes {wrong[:4]}): start the actor with the learner's --task, --algo and --agent.* settings."
        )
    with torch.no_grad():
        for name, value in own.items():
            value.copy_(torch.from_numpy(np.asarray(arrays[name]).reshape(tuple(value.shape))).to(value.dtype))
