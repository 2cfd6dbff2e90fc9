"""Policy weights between learner and torch actor: the actor's part of a SAC model as named numpy arrays.

The learner publishes ``actor_arrays(model)`` (the actor network and the observation normalizers, not the critics:
the robot needs only what acts); a torch actor loads them with :func:`load_actor_arrays`. A robot without torch
receives an exported ONNX policy instead (``rslkit.deploy.onnx_weights``, wired in by the command line).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from rslkit.models.sac_networks import SACModel

PREFIXES = ("actor.", "normalizers.")
"""The state-dict entries an acting policy needs."""


def actor_arrays(model: SACModel) -> dict[str, np.ndarray]:
    """``{name: array}`` of the actor network and the normalizers (float32 copies, CPU)."""
    out = {}
    for name, value in model.state_dict().items():
        if name.startswith(PREFIXES):
            array = value.detach().to("cpu").numpy()
            out[name] = np.ascontiguousarray(array.astype(np.float32) if array.dtype == np.float64 else array)
    return out


def load_actor_arrays(model: SACModel, arrays: Mapping[str, np.ndarray]) -> None:
    """Copy published arrays into ``model``'s actor and normalizers.

    Raises:
        ValueError: when names or shapes differ (the actor was built with other ``--agent.policy`` settings than
            the learner).
    """
    own = {k: v for k, v in model.state_dict().items() if k.startswith(PREFIXES)}
    missing, unexpected = sorted(set(own) - set(arrays)), sorted(set(arrays) - set(own))
    # safetensors keeps 0-d arrays as 0-d, but compare sizes so a [1] scalar from another sender fits too
    wrong = [k for k in own if k in arrays and np.asarray(arrays[k]).size != own[k].numel()]
    if missing or unexpected or wrong:
        raise ValueError(
            f"The learner's weights do not fit this actor (missing {missing[:4]}, unexpected {unexpected[:4]}, "
            f"other shapes {wrong[:4]}): start the actor with the learner's --task and --agent.policy settings."
        )
    with torch.no_grad():
        for name, value in own.items():
            value.copy_(torch.from_numpy(np.asarray(arrays[name]).reshape(tuple(value.shape))).to(value.dtype))
