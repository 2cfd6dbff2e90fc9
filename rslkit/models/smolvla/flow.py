"""SmolVLA's flow-matching model (LeRobot's ``VLAFlowMatching``): prefix and suffix embeddings, the velocity of the
action expert, the flow loss and the time distribution.

Time conventions. LeRobot writes ``x_tau = tau * noise + (1 - tau) * actions`` with target ``u = noise - actions``
and integrates from ``tau = 1`` (noise) to 0; rslkit's flow code (:mod:`rslkit.models.flow`) writes ``x_t = t x1 +
(1 - t) x0`` from ``t = 0`` (noise) to 1 (data). They are one flow with ``tau = 1 - t`` and opposite velocities, so
:meth:`SmolVLAFlow.forward` is the velocity in rslkit's convention and rslkit's Euler sampler
(:func:`~rslkit.models.flow.sampler.euler_sample`) takes LeRobot's steps. LeRobot's training times are
``tau ~ Beta(1.5, 1) * 0.999 + 0.001`` (:func:`sample_time`).

Names of submodules follow LeRobot (``vlm_with_expert``, ``state_proj``, ``action_in_proj``, ...): the policy's
weights are LeRobot's ``model.*`` keys.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from rslkit.models.smolvla.lerobot_config import LeRobotSmolVLAConfig
from rslkit.models.smolvla.vlm_with_expert import PrefixCache, SmolVLMWithExpert


def sinusoidal_time_embedding(tau: torch.Tensor, dim: int, min_period: float, max_period: float) -> torch.Tensor:
    """``[B, dim]`` sine-cosine embedding of ``tau [B]`` with periods from ``min_period`` to ``max_period``
    (float64 arithmetic as LeRobot, float32 on MPS)."""
    dtype = torch.float32 if tau.device.type == "mps" else torch.float64
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=dtype, device=tau.device)
    period = min_period * (max_period / min_period) ** fraction
    angle = (1.0 / period * 2 * math.pi)[None, :] * tau[:, None]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)


def sample_time(
    batch: int, generator: torch.Generator | None = None, device: torch.device | None = None
) -> torch.Tensor:
    """LeRobot's training times ``tau = Beta(1.5, 1) * 0.999 + 0.001`` ``[B]`` (``Beta(a, 1)`` by inversion:
    ``u^(1/a)``, so that a generator makes it reproducible)."""
    u = torch.rand(batch, generator=generator, device=device)
    return u.pow(1.0 / 1.5) * 0.999 + 0.001


class SmolVLAFlow(nn.Module):
    """VLM + action expert + LeRobot's projections: observation -> :class:`PrefixCache`, ``(x, t, cache)`` ->
    velocity.

    Args:
        cfg: the checkpoint's (or a from-scratch) config.
        vlm_dir: local SmolVLM directory (its config; weights come from the checkpoint).
    """

    def __init__(self, cfg: LeRobotSmolVLAConfig, vlm_dir: Path) -> None:
        super().__init__()
        self.cfg = cfg
        self.vlm_with_expert = SmolVLMWithExpert(
            vlm_dir, cfg.num_vlm_layers, cfg.expert_width_multiplier, cfg.self_attn_every_n_layers
        )
        width, expert = self.vlm_with_expert.width, self.vlm_with_expert.expert_width
        self.state_proj = nn.Linear(cfg.max_state_dim, width)
        self.action_in_proj = nn.Linear(cfg.max_action_dim, expert)
        self.action_out_proj = nn.Linear(expert, cfg.max_action_dim)
        self.action_time_mlp_in = nn.Linear(2 * expert, expert)
        self.action_time_mlp_out = nn.Linear(expert, expert)

    def embed_prefix(
        self,
        images: list[torch.Tensor],
        image_masks: list[torch.Tensor],
        tokens: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(embeddings [B, P, W], pad [B, P], blocks [B, P])`` of the prefix ``[images..., language, state]``.

        Args:
            images: per camera ``[B, 3, H, W]`` in [-1, 1] (resized).
            image_masks: per camera ``[B]`` (False: an empty camera, its tokens are padding).
            tokens: instruction token ids ``[B, L]``; token_mask: ``[B, L]`` (False: padding).
            state: normalized, padded state ``[B, max_state_dim]``.
        """
        embeddings, pads = [], []
        for pixels, present in zip(images, image_masks, strict=True):
            visual = self.vlm_with_expert.embed_image(pixels)
            visual = visual * torch.tensor(visual.shape[-1] ** 0.5, dtype=visual.dtype, device=visual.device)
            embeddings.append(visual)
            pads.append(present[:, None].expand(visual.shape[:2]))
        language = self.vlm_with_expert.embed_tokens(tokens)
        embeddings.append(language * math.sqrt(language.shape[-1]))
        pads.append(token_mask.bool())
        embeddings.append(self.state_proj(state)[:, None, :])
        pads.append(torch.ones(state.shape[0], 1, dtype=torch.bool, device=state.device))
        pad = torch.cat(pads, dim=1)
        blocks = torch.zeros_like(pad, dtype=torch.long)
        blocks[:, -1] = 1  # images and language do not attend to the state token
        return torch.cat(embeddings, dim=1), pad, blocks

    def prefix_cache(
        self,
        images: list[torch.Tensor],
        image_masks: list[torch.Tensor],
        tokens: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
    ) -> PrefixCache:
        """The VLM's keys/values of the prefix (:meth:`embed_prefix` arguments)."""
        return self.vlm_with_expert.prefix(*self.embed_prefix(images, image_masks, tokens, token_mask, state))

    def embed_suffix(self, x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """Action tokens ``[B, T, E]`` of noisy actions ``x [B, T, max_action_dim]`` at LeRobot times ``tau [B]``."""
        actions = self.action_in_proj(x)
        time = sinusoidal_time_embedding(tau, actions.shape[-1], self.cfg.min_period, self.cfg.max_period)
        time = time.to(actions.dtype)[:, None, :].expand_as(actions)
        hidden = F.silu(self.action_time_mlp_in(torch.cat([actions, time], dim=2)))
        return self.action_time_mlp_out(hidden)

    def lerobot_velocity(self, x: torch.Tensor, tau: torch.Tensor, cache: PrefixCache) -> torch.Tensor:
        """LeRobot's ``v(x_tau, tau)`` ``[B, T, max_action_dim]`` (points from the actions to the noise)."""
        out = self.vlm_with_expert.suffix(self.embed_suffix(x, tau), cache)
        return self.action_out_proj(out[:, -self.cfg.chunk_size :].float())

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, cache: PrefixCache, d: torch.Tensor | None = None
    ) -> torch.Tensor:
        """rslkit's velocity ``v(x_t [B, T, A], t [B], cache)`` with ``t = 1 - tau`` (module doc); ``d`` must be
        None (SmolVLA has no shortcut-model step input)."""
        if d is not None:
            raise ValueError("SmolVLA has no step-size input: train it with --agent.policy.objective rectified_flow.")
        return -self.lerobot_velocity(x, 1.0 - t, cache)

    def lerobot_losses(
        self, cache: PrefixCache, actions: torch.Tensor, noise: torch.Tensor, tau: torch.Tensor
    ) -> torch.Tensor:
        """LeRobot's per-element flow loss ``[B, T, max_action_dim]``: ``|v(x_tau, tau) - (noise - actions)|^2``
        for normalized, padded ``actions`` and ``noise`` of that shape and ``tau [B]``."""
        x = tau[:, None, None] * noise + (1 - tau[:, None, None]) * actions
        return F.mse_loss(noise - actions, self.lerobot_velocity(x, tau, cache), reduction="none")
