"""The one episode evaluator: one complete episode per env under a deterministic step policy.

Used by the runners' periodic evaluations, ``play.py`` and the benchmarks.

**The step limit.** Every episode, counted or skipped, must end within ``max_episode_length + 1`` steps (the env's
time-out, plus one step for envs that count the step which reaches the limit). An env that is reset first (or whose
episodes all start at step 0) starts its counted episode at once: at most ``max_episode_length + 1`` steps in all.
An env that cannot reset first finishes the episode it is in, which is skipped: at most twice that. An episode
still running at the limit breaks the env's time-out contract and raises.

**Success** is the env's ``extras["success"]`` at the step where an episode ends; an env with instructions (an
``instructions`` list and a ``goal`` observation group, :mod:`rslkit.envs.instruction_groups`) also gets success
per instruction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.envs.instruction_groups import INSTRUCTION_INDEX_GROUP
from rslkit.envs.vec_env import VecEnv

StepHook = Callable[[torch.Tensor, dict[str, Any], torch.Tensor], None]
"""``on_step(dones [N], extras, active [N])`` of :func:`evaluate_episodes`."""


@dataclass
class Episodes:
    """One finished episode per env, all ``[N]`` on the CPU."""

    returns: torch.Tensor
    lengths: torch.Tensor
    success: torch.Tensor
    """Whether the episode ended in ``extras["success"]`` (bool; False where the env reports none)."""
    goal: torch.Tensor | None
    """Each episode's instruction index (long), or None for an env without instructions."""
    has_success: bool
    """Whether the env reports ``extras["success"]``."""

    def metrics(self) -> dict[str, float]:
        """``Eval/mean_return``, ``Eval/std_return``, ``Eval/mean_episode_length``; where the env reports success,
        ``Eval/success_rate`` and, with instructions, ``Eval/success/<instruction index>``."""
        out = {
            "Eval/mean_return": float(self.returns.mean()),
            "Eval/std_return": float(self.returns.std()),
            "Eval/mean_episode_length": float(self.lengths.mean()),
        }
        if self.has_success:
            out["Eval/success_rate"] = float(self.success.float().mean())
            if self.goal is not None:
                for g in self.goal.unique().tolist():
                    out[f"Eval/success/{g}"] = float(self.success[self.goal == g].float().mean())
        return out


def step_limit(env: VecEnv, from_reset: bool) -> int:
    """The step limit of :func:`evaluate_episodes`: ``max_episode_length + 1``, twice that when ``from_reset`` is
    False (each env first finishes a skipped episode)."""
    per_episode = int(torch.as_tensor(env.max_episode_length).max()) + 1
    return per_episode if from_reset else 2 * per_episode


@torch.inference_mode()
def evaluate_episodes(
    env: VecEnv,
    policy: Callable[[TensorDict], torch.Tensor],
    reset_policy: Callable[[torch.Tensor | None], None],
    device: str | torch.device = "cpu",
    reset: bool = True,
    on_step: StepHook | None = None,
) -> Episodes:
    """Run ``policy`` (``obs -> actions [N, A]`` on ``device``) until every env finished one episode.

    Args:
        env: the env; reset first when ``reset`` and it has ``reset()``. Otherwise only episodes that start at
            step 0 are counted (an env in the middle of one finishes it first).
        policy: deterministic step policy; observations are moved to ``device``, actions to the env's device.
        reset_policy: ``reset_policy(None)`` before the first step, then ``reset_policy(dones [N])`` (on ``device``)
            after each step (recurrent state, open action chunks).
        device: the policy's device.
        reset: whether to reset the env first.
        on_step: called after each step with ``(dones, extras, active)``: ``dones [N]`` and ``active [N]`` (the envs
            whose counted episode the step belonged to) bool on the CPU; for figures of a benchmark's own.

    The global torch RNG is restored afterwards, so an evaluation does not change the course of training (exact
    resume). The step limit is the module's rule (:func:`step_limit`).

    Raises:
        RuntimeError: an env's episode did not end within the step limit.
    """
    device = torch.device(device)
    devices = [d for d in {device, torch.device(env.device)} if d.type == "cuda"]
    with torch.random.fork_rng(devices=devices):
        return _run_episodes(env, policy, reset_policy, device, reset, on_step)


def _run_episodes(
    env: VecEnv,
    policy: Callable[[TensorDict], torch.Tensor],
    reset_policy: Callable[[torch.Tensor | None], None],
    device: torch.device,
    reset: bool,
    on_step: StepHook | None,
) -> Episodes:
    if reset and hasattr(env, "reset"):
        env.reset()
        counting = torch.ones(env.num_envs, dtype=torch.bool)
    else:
        counting = (env.episode_length_buf == 0).cpu()
    reset_policy(None)
    n = env.num_envs
    returns, lengths = torch.zeros(n), torch.zeros(n)
    success, finished = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    obs = env.get_observations()
    instructed = bool(getattr(env, "instructions", None)) and INSTRUCTION_INDEX_GROUP in obs.keys()
    goal = torch.zeros(n, dtype=torch.long)
    has_success = False
    limit = step_limit(env, bool(counting.all()))
    for _ in range(limit):
        if instructed:  # the instruction of the episode each env counts, read where that episode starts
            starting = counting & ~finished & (lengths == 0)
            goal[starting] = obs[INSTRUCTION_INDEX_GROUP].reshape(-1).long().cpu()[starting]
        obs, rewards, dones, extras = env.step(policy(obs.to(device)).to(env.device))
        reset_policy(dones.to(device))
        dones = dones.cpu().bool()
        active = counting & ~finished
        returns += rewards.cpu() * active
        lengths += active.float()
        if "success" in extras:
            has_success = True
            success |= dones & active & extras["success"].cpu().bool()
        finished |= dones & active
        if on_step is not None:
            on_step(dones, extras, active)
        counting |= dones
        if bool(finished.all()):
            return Episodes(returns, lengths, success, goal if instructed else None, has_success)
    raise RuntimeError(
        f"Evaluation: {int((~finished).sum())} of {n} envs did not finish an episode within {limit} steps (an episode "
        "must end within max_episode_length + 1 steps); check the env's max_episode_length and time-outs."
    )
