"""Validation of a behaviour-cloned flow policy on held-out episodes: the flow-matching loss, and the error of the
chunks it samples against the recorded actions, in normalised and raw (dataset) units, overall and per action.

Noise and flow times come from a generator seeded with the run's seed, so every evaluation of a run sees the same
noise and the global RNG is left untouched (exact resume, same seed -> same run).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from tensordict import TensorDict

from rslkit.models.flow.objectives import rectified_flow_loss
from rslkit.models.flow.policy import FlowPolicy
from rslkit.models.vla.policy import VLAPolicy

ValBatch = tuple[torch.Tensor | TensorDict, torch.Tensor]
"""Raw observations ``[B, D]`` (a VLA policy: its observation groups ``[B]``) and recorded chunks ``[B, Ta, A]``."""


def _loss_and_chunk(
    policy: FlowPolicy | VLAPolicy, obs: torch.Tensor | TensorDict, x1: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The flow loss of normalised chunks ``x1`` and a raw chunk sampled from seeded noise, for raw ``obs``."""
    if isinstance(policy, VLAPolicy):
        assert isinstance(obs, TensorDict)
        loss = rectified_flow_loss(policy, policy.normalize_inputs(obs), x1, generator=generator)
        noise = torch.randn(x1.shape, generator=generator, device=x1.device)
        return loss, policy.act_chunk(obs, noise)
    assert isinstance(obs, torch.Tensor)
    loss = rectified_flow_loss(policy, policy.obs_normalizer(obs), x1, generator=generator)
    noise = torch.randn(x1.shape, generator=generator, device=x1.device)
    return loss, policy.act_chunk(obs, noise)


@torch.no_grad()
def validation_metrics(
    policy: FlowPolicy | VLAPolicy, batches: Iterable[ValBatch], action_names: Sequence[str], seed: int
) -> dict[str, float]:
    """``Val/*`` metrics of ``policy`` over ``batches``.

    ``Val/flow_loss`` (rectified flow, the training objective at ``d = 0``); ``Val/action_mse`` and
    ``Val/action_mae`` of chunks sampled with the deterministic ODE from seeded noise against the recorded chunks,
    in raw units, and ``Val/action_mse_norm`` / ``Val/action_mae_norm`` in the policy's normalised units (the
    actions scaled to ``[-1, 1]``); each also per action dimension, ``Val/action_mae/<name>``.

    Args:
        policy: the evaluated policy (the EMA copy).
        batches: the validation examples, the same at every call.
        action_names: one name per action dimension.
        seed: seeds the noise and flow times.
    """
    device = next(policy.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    sums: dict[str, torch.Tensor] = {}
    loss_sum, count = 0.0, 0
    for obs, actions in batches:
        obs, actions = obs.to(device), actions.to(device)
        b = actions.shape[0]
        x1 = policy.action_normalizer(actions)
        loss, chunk = _loss_and_chunk(policy, obs, x1, generator)
        loss_sum += float(loss) * b
        count += b
        for units, predicted, target in (("", chunk, actions), ("_norm", policy.action_normalizer(chunk), x1)):
            err = predicted - target
            for name, value in (("mse", err.square()), ("mae", err.abs())):
                key = f"action_{name}{units}"
                sums[key] = sums.get(key, 0) + value.sum(dim=(0, 1))  # [A]
    if count == 0:
        return {}
    steps = count * actions.shape[1]
    out = {"Val/flow_loss": loss_sum / count}
    for key, total in sums.items():
        per_dim = total / steps
        out[f"Val/{key}"] = float(per_dim.mean())
        out.update({f"Val/{key}/{name}": float(v) for name, v in zip(action_names, per_dim.tolist())})
    return out


def evenly_spaced(count: int, limit: int) -> torch.Tensor:
    """``min(count, limit)`` row indices spread evenly over ``0..count-1`` (the validation frames; all when
    ``limit >= count``)."""
    if limit >= count:
        return torch.arange(count)
    return torch.linspace(0, count - 1, limit).round().long()
