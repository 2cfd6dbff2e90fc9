"""Student and teacher of policy distillation: a student that acts on its own observation groups (the current
frame, a window of the last frames, or a recurrent memory: :mod:`rslkit.models.student_teacher_recurrent`) and a
frozen, trained PPO actor-critic whose deterministic actions are the labels.

Names follow rsl_rl's ``StudentTeacher`` / ``StudentTeacherRecurrent``; the teacher is rslkit's own
:class:`~rslkit.models.actor_critic.ActorCritic` read from a PPO checkpoint, on the groups it was trained on
(usually privileged ones, e.g. ``critic``), while the student reads what the robot has (``policy``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.models.actor_critic import ActorCritic
from rslkit.models.mlp import ACTIVATIONS, make_mlp
from rslkit.models.normalizer import EmpiricalNormalization
from rslkit.models.obs_history import ObservationHistory
from rslkit.models.recurrent import Hidden, Memory, mask_hidden
from rslkit.utils.validation import expect, finite


@dataclass
class StudentCfg:
    """The student network. CLI: ``--agent.student.<field>``."""

    obs_groups: tuple[str, ...] = ("policy",)
    """Observation groups the student reads (what the robot has; the teacher reads the groups it was trained on)."""
    hidden_dims: tuple[int, ...] = (256, 256, 256)
    activation: str = "elu"
    obs_normalization: bool = True
    """Empirical normalization of the student's observation (updated after each update)."""
    history_length: int = 1
    """Frames the MLP reads: the current observation and the ``history_length - 1`` before it (zeros before the
    episode's first). Exported as ONNX state, like a recurrent policy's memory."""
    rnn_type: Literal["none", "gru", "lstm"] = "none"
    """A recurrent student (rsl_rl's ``StudentTeacherRecurrent``) instead of a window of frames."""
    rnn_hidden_dim: int = 256
    rnn_num_layers: int = 1
    noise_std: float = 0.1
    """Std of the Gaussian noise on the student's actions in rollouts (rsl_rl's ``init_noise_std``; fixed: behaviour
    cloning gives it no gradient); 0: the student acts deterministically."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a student that cannot be built."""
        expect(len(self.obs_groups) > 0, "obs_groups", "must name at least one observation group")
        dims = tuple(self.hidden_dims)
        expect(
            all(isinstance(d, int) and d >= 1 for d in dims), "hidden_dims", f"must all be integers >= 1, got {dims}"
        )
        act = self.activation
        expect(act in ACTIVATIONS, "activation", f"is unknown ({act!r}); use one of {', '.join(ACTIVATIONS)}")
        n = self.history_length
        expect(isinstance(n, int) and n >= 1, "history_length", f"must be an integer >= 1, got {n}")
        rnn = self.rnn_type
        expect(rnn in ("none", "gru", "lstm"), "rnn_type", f"must be 'none', 'gru' or 'lstm', got {rnn!r}")
        if rnn != "none":
            expect(n == 1, "history_length", f"must be 1 with a recurrent student (rnn_type {rnn}), got {n}")
            for name in ("rnn_hidden_dim", "rnn_num_layers"):
                value = getattr(self, name)
                expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        std = self.noise_std
        expect(finite(std) and std >= 0, "noise_std", f"must be a finite number >= 0, got {std}")


def student_obs_dim(obs: TensorDict, groups: tuple[str, ...]) -> int:
    """Summed size of the student's observation groups in ``obs``.

    Raises:
        ValueError: naming a group the env lacks or one that is not ``[num_envs, dim]``, and the flag to set.
    """
    for g in groups:
        if g not in obs.keys():
            raise ValueError(
                f"The student reads observation group '{g}', which the env does not provide (it has "
                f"{sorted(obs.keys())}); set --agent.student.obs_groups."
            )
        if obs[g].dim() != 2:
            raise ValueError(
                f"Observation group '{g}' must be [num_envs, dim] for the student, got {list(obs[g].shape)}."
            )
    return sum(int(obs[g].shape[-1]) for g in groups)


def clone_hidden(hidden: Hidden | None) -> Hidden | None:
    """A copy of a memory state detached from autograd and out of inference mode (rollout -> update)."""
    if hidden is None:
        return None
    if isinstance(hidden, tuple):
        return hidden[0].detach().clone(), hidden[1].detach().clone()
    return hidden.detach().clone()


class StudentTeacher(nn.Module):
    """A student MLP over the current observation (or a window of frames) and a frozen teacher.

    Rollout: :meth:`act` (noisy student actions, advances the student's state) and :meth:`teacher_act` (the
    labels). Update: :meth:`student_sequence`. Deployment: :meth:`act_inference` and, for export, :meth:`encode`
    with an explicit state.

    Args:
        obs: an observation of the env (sizes of the groups).
        num_actions: action size ``A``.
        cfg: the student's settings.
        teacher: the trained actor-critic (frozen here; its actor's deterministic env actions are the labels).
    """

    def __init__(self, obs: TensorDict, num_actions: int, cfg: StudentCfg, teacher: ActorCritic) -> None:
        super().__init__()
        self.cfg = cfg
        self.obs_groups = tuple(cfg.obs_groups)
        dim = student_obs_dim(obs, self.obs_groups)
        self.obs_dims = {g: int(obs[g].shape[-1]) for g in self.obs_groups}
        self.normalizer: nn.Module = EmpiricalNormalization(dim) if cfg.obs_normalization else nn.Identity()
        self.memory: nn.Module | None = self._make_memory(dim)
        self.student = make_mlp(self._trunk_dim(dim), cfg.hidden_dims, num_actions, cfg.activation)
        self.teacher = teacher.requires_grad_(False).eval()
        self.num_actions = num_actions
        self.hidden: Hidden | None = None
        """The student's memory state during rollouts and inference (None: zeros at the next step)."""

    # ------------------------------------------------------------------ the student's memory
    def _make_memory(self, dim: int) -> nn.Module | None:
        """The window of frames (None for a single frame)."""
        return ObservationHistory(dim, self.cfg.history_length) if self.cfg.history_length > 1 else None

    def _trunk_dim(self, dim: int) -> int:
        """Input size of the student MLP."""
        return dim * self.cfg.history_length

    def encode(self, x: torch.Tensor, hidden: Hidden | None) -> tuple[torch.Tensor, Hidden | None]:
        """The student MLP's input for the raw observation ``x [B, D]`` and the memory state that follows.

        A window stores raw frames and normalizes them when read (so older frames use today's statistics).
        """
        if self.memory is None:
            return self.normalizer(x), None
        assert isinstance(self.memory, ObservationHistory) and isinstance(hidden, torch.Tensor)
        frames, hidden = self.memory.step(x, hidden)
        return self.normalizer(frames).flatten(1), hidden

    def init_hidden(self, batch: int, device: torch.device) -> Hidden | None:
        """Zero memory state for ``batch`` envs (None without memory)."""
        if self.memory is None:
            return None
        assert isinstance(self.memory, (ObservationHistory, Memory))
        return self.memory.init_hidden(batch, device)

    # ------------------------------------------------------------------ rollout and inference
    def student_input(self, obs: TensorDict) -> torch.Tensor:
        """The student's raw observation ``[..., D]`` (its groups concatenated)."""
        parts = [obs[g] for g in self.obs_groups]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def ensure_hidden(self, batch: int, device: torch.device) -> None:
        """Create the zero memory state where there is none yet (the teacher's too)."""
        if self.memory is not None and self.hidden is None:
            self.hidden = self.init_hidden(batch, device)
        self.teacher.ensure_hidden(batch, device)

    def act_inference(self, obs: TensorDict) -> torch.Tensor:
        """The student's deterministic actions ``[N, A]`` (advances its memory)."""
        x = self.student_input(obs)
        self.ensure_hidden(x.shape[0], x.device)
        features, self.hidden = self.encode(x, self.hidden)
        return self.student(features)

    def act(self, obs: TensorDict) -> torch.Tensor:
        """The student's actions with Gaussian noise of ``cfg.noise_std`` (the rollout's exploration)."""
        actions = self.act_inference(obs)
        if self.cfg.noise_std > 0:
            actions = actions + self.cfg.noise_std * torch.randn_like(actions)
        return actions

    @torch.no_grad()
    def teacher_act(self, obs: TensorDict) -> torch.Tensor:
        """The teacher's deterministic env actions ``[N, A]``: the labels (advances a recurrent teacher's memory)."""
        return self.teacher.act_inference(obs)

    def reset(self, dones: torch.Tensor | None = None) -> None:
        """Zero the student's and the teacher's memory of finished episodes (all of it when ``dones`` is None)."""
        self.teacher.reset(dones)
        if self.memory is None:
            return
        if dones is None or self.hidden is None:
            self.hidden = None
            return
        self.hidden = mask_hidden(self.hidden, ~dones.bool())

    # ------------------------------------------------------------------ update
    def student_sequence(
        self, x: torch.Tensor, hidden: Hidden | None, resets: torch.Tensor
    ) -> tuple[torch.Tensor, Hidden | None]:
        """Student actions for the raw observations ``x [T, B, D]`` from the memory state ``hidden``, zeroing the
        state before step ``t`` where ``resets[t]`` is set (exactly as the rollout did).

        Returns:
            ``(actions [T, B, A], the state after the last step)``.
        """
        if self.memory is None:
            return self.student(self.normalizer(x)), None
        outs = []
        for t in range(x.shape[0]):
            assert hidden is not None
            hidden = mask_hidden(hidden, ~resets[t])
            features, hidden = self.encode(x[t], hidden)
            outs.append(self.student(features))
        return torch.stack(outs), hidden

    def student_parameters(self) -> list[nn.Parameter]:
        """The trained parameters (the student's; the teacher is frozen)."""
        return [p for name, p in self.named_parameters() if not name.startswith("teacher.")]

    @torch.no_grad()
    def update_normalization(self, obs: TensorDict) -> None:
        """Fold the student's observations (any batch shape) into its normalizer's statistics."""
        if isinstance(self.normalizer, EmpiricalNormalization):
            x = self.student_input(obs)
            self.normalizer.update(x.reshape(-1, x.shape[-1]))

    def train(self, mode: bool = True) -> StudentTeacher:
        """Train or eval mode for the student; the teacher always stays in eval mode."""
        super().train(mode)
        self.teacher.eval()
        return self
