"""Policy distillation (DAgger-style behaviour cloning): the student acts, a trained teacher labels every state the
student visits with its own action, and the student regresses onto the labels (Ross et al. 2011 with the expert's
mixing weight 0; rsl_rl's ``Distillation``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from tensordict import TensorDict

from rslkit.models.recurrent import Hidden
from rslkit.models.student_teacher import StudentTeacher, clone_hidden
from rslkit.storage.rollout_storage import RolloutStorage
from rslkit.utils.validation import expect, finite

LOSSES: dict[str, Callable[..., torch.Tensor]] = {"mse": F.mse_loss, "huber": F.huber_loss}
"""``loss_type`` -> loss between the student's and the teacher's actions (mean over actions, envs and steps)."""


@dataclass
class DistillationCfg:
    """Distillation hyperparameters (rsl_rl's names and defaults). CLI: ``--agent.algorithm.<field>``."""

    num_learning_epochs: int = 1
    """Passes over each rollout."""
    gradient_length: int = 15
    """Env steps (of all envs) per optimizer step; a recurrent student backpropagates through this many steps."""
    learning_rate: float = 1e-3
    max_grad_norm: float = 0.0
    """Clip the student's gradient norm to this (0: no clipping; rsl_rl: None)."""
    loss_type: Literal["mse", "huber"] = "mse"

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field distillation cannot run with."""
        for name in ("num_learning_epochs", "gradient_length"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        lr, clip = self.learning_rate, self.max_grad_norm
        expect(finite(lr) and lr > 0, "learning_rate", f"must be a finite number > 0, got {lr}")
        expect(finite(clip) and clip >= 0, "max_grad_norm", f"must be >= 0 (0: no clipping), got {clip}")
        expect(self.loss_type in LOSSES, "loss_type", f"must be one of {', '.join(LOSSES)}, got {self.loss_type!r}")


class Distillation:
    """Behaviour cloning of a teacher on the student's own rollouts.

    The rollout stores the student's raw observations and the teacher's actions (as the storage's actions) in a
    :class:`~rslkit.storage.rollout_storage.RolloutStorage`; the update replays the rollout in time order from the
    student's memory state at its start, one optimizer step per ``gradient_length`` steps, then folds the rollout
    into the student's normalizer (so the first epoch sees the actions the student took, noise aside).
    """

    def __init__(
        self, policy: StudentTeacher, cfg: DistillationCfg, num_steps: int, obs: TensorDict, device: torch.device | str
    ) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.policy = policy.to(self.device)
        self.learning_rate = cfg.learning_rate
        self.optimizer = torch.optim.Adam(policy.student_parameters(), lr=cfg.learning_rate)
        self.loss_fn = LOSSES[cfg.loss_type]
        self.storage = RolloutStorage(num_steps, obs, policy.num_actions, 0, self.device, policy.obs_groups)
        self._pending: tuple[TensorDict, torch.Tensor] | None = None
        self._hidden0: Hidden | None = None
        self.version = 0
        """Updates made (for the logs)."""

    # ------------------------------------------------------------------ rollout
    def begin_rollout(self) -> None:
        """Record the student's memory state the rollout starts from (call outside inference mode)."""
        self.policy.ensure_hidden(self.storage.num_envs, self.device)
        self._hidden0 = clone_hidden(self.policy.hidden)

    def act(self, obs: TensorDict) -> torch.Tensor:
        """The student's (noisy) env actions ``[N, A]``; the teacher's actions are kept as this step's labels."""
        actions = self.policy.act(obs)
        self._pending = (obs, self.policy.teacher_act(obs))
        return actions

    def process_env_step(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        """Store the step's observation and labels; reset the memory of finished episodes."""
        if self._pending is None:
            raise RuntimeError("process_env_step called before act().")
        obs, labels = self._pending
        zeros = torch.zeros_like(rewards, dtype=torch.float32, device=self.device)
        dones = dones.to(self.device).bool()
        self.storage.add(obs, labels, zeros, zeros, rewards.to(self.device, torch.float32), dones, (), self.version)
        self.policy.reset(dones)
        self._pending = None

    def compute_returns(self, last_obs: TensorDict) -> None:
        """Nothing to bootstrap: behaviour cloning has no returns."""

    # ------------------------------------------------------------------ update
    def update(self) -> dict[str, float]:
        """``num_learning_epochs`` passes over the rollout in time order, one optimizer step per ``gradient_length``
        steps (truncated backpropagation through time for a recurrent student).

        Returns:
            ``behavior``: the mean loss between the student's and the teacher's actions over the update's steps.
        """
        c, st = self.cfg, self.storage
        x = self.policy.student_input(st.obs)
        resets = torch.zeros_like(st.dones)
        resets[1:] = st.dones[:-1]  # zero the memory before step t where step t-1 ended an episode
        total, count = torch.zeros((), device=self.device), 0
        params = self.policy.student_parameters()
        for _ in range(c.num_learning_epochs):
            hidden = self._hidden0
            for start in range(0, st.num_steps, c.gradient_length):
                window = slice(start, start + c.gradient_length)
                actions, hidden = self.policy.student_sequence(x[window], hidden, resets[window])
                loss = self.loss_fn(actions, st.actions[window])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if c.max_grad_norm > 0:
                    nn.utils.clip_grad_norm_(params, c.max_grad_norm)
                self.optimizer.step()
                hidden = clone_hidden(hidden)
                total += loss.detach()
                count += 1
        self.policy.update_normalization(st.obs)
        st.clear()
        self.version += 1
        return {"behavior": float(total) / count}

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Student and teacher (with normalizers), optimizer and the update count."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(), "version": self.version}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
