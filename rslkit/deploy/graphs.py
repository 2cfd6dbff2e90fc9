"""Exportable wrappers: each turns a trained policy into one pure function of named tensors (normalizers inside).

Every wrapper's ``forward`` takes plain tensors (no TensorDict, no hidden state kept on the module), so
``torch.onnx.export`` traces exactly what deployment computes, and the same module is the torch reference the
tests compare ONNX Runtime against.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from rslkit.models.actor_critic import ActorCritic
from rslkit.models.flow.policy import FlowPolicy
from rslkit.models.flow.sampler import time_grid
from rslkit.models.sac_networks import SACModel
from rslkit.models.vla.policy import INSTRUCTION_GROUP, VLAPolicy


class PPOStepGraph(nn.Module):
    """Deterministic env actions of a feed-forward PPO actor: ``(*groups [B, D_g]) -> actions [B, A]``.

    Args:
        policy: the trained actor-critic (its ``normalizers``, ``actor`` and ``dist`` are shared, not copied).
    """

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        if policy.is_recurrent:
            raise ValueError("This policy is recurrent; export it with PPORecurrentGraph.")
        self.groups = list(policy.obs_groups["actor"])
        self.normalizers = nn.ModuleDict({g: policy.normalizers[g] for g in self.groups})
        self.actor = policy.actor
        self.dist = policy.dist

    def actor_input(self, groups: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Normalized, concatenated actor observation ``[B, D]``."""
        parts = [self.normalizers[g](x) for g, x in zip(self.groups, groups)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def forward(self, *groups: torch.Tensor) -> torch.Tensor:
        """``groups``: one ``[B, D_g]`` tensor per actor group, in :attr:`groups` order -> ``[B, A]``."""
        head = self.actor(self.actor_input(groups))
        return self.dist.to_env(self.dist.mode(self.dist.params(head)))


class PPORecurrentGraph(nn.Module):
    """One step of a recurrent PPO actor with explicit state.

    GRU: ``(*groups, h [L, B, H]) -> (actions [B, A], h_out)``; LSTM: ``(*groups, h, c) -> (actions, h_out, c_out)``.
    A new episode starts from zero state (the caller resets it).
    """

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        if policy.actor_memory is None:
            raise ValueError("This policy is feed-forward; export it with PPOStepGraph.")
        self.groups = list(policy.obs_groups["actor"])
        self.normalizers = nn.ModuleDict({g: policy.normalizers[g] for g in self.groups})
        self.rnn = policy.actor_memory.rnn
        self.is_lstm = policy.actor_memory.is_lstm
        self.num_layers = policy.actor_memory.num_layers
        self.hidden_dim = policy.actor_memory.hidden_dim
        self.actor = policy.actor
        self.dist = policy.dist

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``inputs``: the actor groups ``[B, D_g]`` then ``h [L, B, H]`` (and ``c [L, B, H]`` for LSTM)."""
        n = len(self.groups)
        groups, state = inputs[:n], inputs[n:]
        parts = [self.normalizers[g](x) for g, x in zip(self.groups, groups)]
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        if self.is_lstm:
            out, (h, c) = self.rnn(x.unsqueeze(0), (state[0], state[1]))
            new_state: tuple[torch.Tensor, ...] = (h, c)
        else:
            out, h = self.rnn(x.unsqueeze(0), state[0])
            new_state = (h,)
        head = self.actor(out.squeeze(0))
        return (self.dist.to_env(self.dist.mode(self.dist.params(head))), *new_state)


class SACStepGraph(nn.Module):
    """Deterministic SAC actions ``tanh(mu(s))``: ``(*groups [B, D_g]) -> actions [B, A]`` in ``(-1, 1)``."""

    def __init__(self, model: SACModel) -> None:
        super().__init__()
        self.groups = list(model.actor_groups)
        self.normalizers = nn.ModuleDict({g: model.normalizers[g] for g in self.groups})
        self.actor = model.actor

    def forward(self, *groups: torch.Tensor) -> torch.Tensor:
        """``groups``: one ``[B, D_g]`` tensor per actor group -> ``[B, A]``."""
        parts = [self.normalizers[g](x) for g, x in zip(self.groups, groups)]
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        return torch.tanh(self.actor(x)[0])


class FlowChunkGraph(nn.Module):
    """A flow policy's deterministic Euler sampler with its ``K`` steps unrolled.

    ``(obs [B, D], noise [B, Ta, A][, future_state [B, S]]) -> chunk [B, Ta, A]`` in env units. The initial noise
    is an input, so a run is reproducible and the caller chooses the randomness (zeros give the "mean" chunk).
    Future-state policies (``policy.max_future_offset > 0``) take the raw robot state expected when the chunk starts
    as a third input (the observed state for offset 0).

    Args:
        policy: the flow policy.
        num_steps: Euler steps ``K`` (default: the policy's ``num_inference_steps``).
    """

    def __init__(self, policy: FlowPolicy, num_steps: int | None = None) -> None:
        super().__init__()
        self.policy = policy
        self.num_steps = int(policy.cfg.num_inference_steps if num_steps is None else num_steps)
        time_grid(self.num_steps)  # validates K >= 1
        self.groups = [policy.cfg.obs_group]
        self.has_future_state = policy.max_future_offset > 0

    def forward(self, obs: torch.Tensor, noise: torch.Tensor, future_state: torch.Tensor | None = None) -> torch.Tensor:
        """``obs [B, D]``, ``noise [B, Ta, A]``, ``future_state [B, S]`` (future-state policies) -> env-unit chunk
        ``[B, Ta, A]`` (same as ``act_chunk``)."""
        p, k = self.policy, self.num_steps
        if self.has_future_state and future_state is None:
            raise ValueError("This flow policy takes a future_state input [B, S]; pass the (rolled-forward) state.")
        obs_n = p.obs_normalizer(obs)
        future_n = p.normalize_future_state(future_state) if future_state is not None else None
        x = noise
        for i in range(k):
            t = torch.full_like(obs_n[:, 0], i / k)
            x = x + p.velocity(x, t, obs_n, k, future_n) / k
        return p.action_normalizer.unnormalize(x.clamp(-1.0, 1.0))


class VLAChunkGraph(nn.Module):
    """A VLA-style policy's Euler sampler with its ``K`` steps unrolled, observation tokens computed once.

    ``(state [B, S][, instruction [B, E]], camera_<name> uint8 [B, H, W, 3]..., noise [B, Ta, A]) -> chunk [B, Ta,
    A]`` in env units; inputs in :attr:`groups` order, then ``noise``. The instruction is an embedding computed
    outside the graph (metadata ``instruction``).

    Args:
        policy: the VLA policy.
        num_steps: Euler steps ``K`` (default: the policy's ``num_inference_steps``).
    """

    def __init__(self, policy: VLAPolicy, num_steps: int | None = None) -> None:
        super().__init__()
        self.policy = policy
        self.num_steps = int(policy.cfg.num_inference_steps if num_steps is None else num_steps)
        time_grid(self.num_steps)  # validates K >= 1
        self.groups = policy.input_groups

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """``inputs``: one tensor per group of :attr:`groups`, then ``noise [B, Ta, A]`` -> ``[B, Ta, A]``."""
        p, k = self.policy, self.num_steps
        *groups, noise = inputs
        raw = dict(zip(self.groups, groups))
        named = {"state": p.obs_normalizer(raw[p.cfg.state_group])}
        if INSTRUCTION_GROUP in raw:
            named[INSTRUCTION_GROUP] = p.normalize_instruction(raw[INSTRUCTION_GROUP])
        for g in self.groups[1 + (INSTRUCTION_GROUP in raw) :]:
            named[g] = raw[g].permute(0, 3, 1, 2).float() / 255.0
        images = {cam: named[f"camera_{cam}"] for cam in p.cfg.cameras}
        tokens = p.tokenizer(named["state"], named.get(INSTRUCTION_GROUP), images)
        x = noise
        for i in range(k):
            t = torch.full_like(noise[:, 0, 0], i / k)
            d = torch.full_like(t, 1.0 / k) if p.step_conditioned else None
            x = x + p.net(x, t, tokens, d) / k
        return p.action_normalizer.unnormalize(x.clamp(-1.0, 1.0))
