"""A VecEnv whose reward comes from a progress critic: the task's reward is hidden from the agent.

Every ``stride`` control steps (and at each episode end) each env's current observation is scored against the last
scored one; VLAC's recursion turns the delta into a value (:mod:`rslkit.rewards.value`) and the reward is the
value's increment. A done probability at or above ``done_threshold`` ends the episode there (a termination, not a
time-out), through the task's ``reset_envs``. The true reward stays available for evaluation:
``extras["true_reward"]`` ``[N]``, and the per-iteration log gets ``Learned_Reward/*`` monitors (value, true
reward, critic terminations, VOC and negative-step rate of finished episodes). With a
:class:`~rslkit.rewards.done_refit.DoneRefitter` the scored frames are also the negatives of periodic refits of the
critic's done head (VICE's online classifier).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.envs.instruction_groups import INSTRUCTION_INDEX_GROUP, episode_instructions
from rslkit.envs.vec_env import VecEnv
from rslkit.rewards.contract import ProgressCritic
from rslkit.rewards.done_refit import DoneRefitter
from rslkit.rewards.metrics import negative_step_rate, value_order_correlation
from rslkit.rewards.value import ValueCfg, apply_dead_band, done_term, value_step


class LearnedRewardEnv(VecEnv):
    """Wrap ``env`` so that ``step`` returns the critic's rewards.

    Args:
        env: the task (it must offer ``request_final_obs``; ``reset_envs`` too for ``end_on_done``).
        critic: a progress critic reading groups of ``env``'s observations.
        goal: the language goal, one for all envs or one per env; None: each episode's instruction, for envs that
            draw one per episode (``env.instructions`` and an observation group ``goal`` with each env's index into
            them, e.g. ``so101-pick-place``): a VLA policy fine-tuned on the critic is rewarded for the instruction
            it was given.
        cfg: dead-band, stride, done threshold, reward scale, ``end_on_done``.
        end_on_done: end episodes when the critic says done (None: ``cfg.end_on_done``).
        refitter: refits of the critic's done head on the frames this env scores (every ``refitter.cfg.every``
            control steps; :mod:`rslkit.rewards.done_refit`); None: the critic stays as trained.

    Raises:
        ValueError: the env cannot report final observations or reset single envs, ``goal`` is None for an env
            without instructions, or the critic rejects its observations (missing camera, wrong image size: the
            critic's message says which).
    """

    def __init__(
        self,
        env: VecEnv,
        critic: ProgressCritic,
        goal: str | Sequence[str] | None,
        cfg: ValueCfg | None = None,
        end_on_done: bool | None = None,
        refitter: DoneRefitter | None = None,
    ) -> None:
        cfg = cfg or ValueCfg()
        end_on_done = cfg.end_on_done if end_on_done is None else end_on_done
        for needed in ("request_final_obs", *(("reset_envs",) if end_on_done else ())):
            if not callable(getattr(env, needed, None)):
                raise ValueError(
                    f"A learned reward needs env.{needed}() ({type(env).__name__} lacks it): rslkit's TorchTask "
                    "tasks have it; for other envs pass end_on_done=False or add the method."
                )
        self.env, self.critic, self.cfg, self.end_on_done = env, critic, cfg, end_on_done
        if refitter is not None and refitter.model is not critic:
            raise ValueError("The refitter must refit the critic this env scores with (DoneRefitter(critic, ...)).")
        self.refitter = refitter
        self._steps = 0
        self.goal = goal
        env.request_final_obs()  # type: ignore[attr-defined]
        obs = env.get_observations()
        if goal is None and not (getattr(env, "instructions", None) and INSTRUCTION_INDEX_GROUP in obs.keys()):
            raise ValueError(
                f"{type(env).__name__} draws no instruction per episode (no `instructions` with a "
                f"'{INSTRUCTION_INDEX_GROUP}' observation group): give the critic's goal (--reward.goal TEXT)."
            )
        n = env.num_envs
        self._anchor = obs.clone()
        self.critic.score(obs[:1], obs[:1], self._goals(torch.zeros(1, dtype=torch.long)))  # fail early on bad input
        self._since = torch.zeros(n, dtype=torch.long)
        self.value = torch.zeros(n)
        self._values: list[list[float]] = [[0.0] for _ in range(n)]
        self._deltas: list[list[float]] = [[] for _ in range(n)]

    def __getattr__(self, name: str) -> Any:  # num_envs, device, cfg, action_space, render_frame, ...
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def num_envs(self) -> int:  # type: ignore[override]
        return self.env.num_envs

    @property
    def num_actions(self) -> int:  # type: ignore[override]
        return self.env.num_actions

    @property
    def max_episode_length(self):  # type: ignore[override]
        return self.env.max_episode_length

    @property
    def episode_length_buf(self) -> torch.Tensor:  # type: ignore[override]
        return self.env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:  # runners spread episode starts at random
        self.env.episode_length_buf = value

    @property
    def device(self):  # type: ignore[override]
        return self.env.device

    def get_observations(self) -> TensorDict:
        return self.env.get_observations()

    def reset_envs(self, env_ids: torch.Tensor) -> TensorDict:
        """Start fresh episodes in ``env_ids [K]`` now (the task's ``reset_envs``); their values restart at 0 from
        the new first observation, and the unfinished episodes are not logged in the monitors.

        Raises:
            ValueError: when the task cannot reset single envs.
        """
        reset = getattr(self.env, "reset_envs", None)
        if not callable(reset):
            raise ValueError(f"{type(self.env).__name__} cannot reset single envs (it has no reset_envs).")
        obs = reset(env_ids)
        ids = torch.as_tensor(env_ids, dtype=torch.long).reshape(-1).cpu()
        self._anchor[ids.to(obs.device)] = obs[ids.to(obs.device)]
        self.value[ids], self._since[ids] = 0.0, 0
        for i in ids.tolist():
            self._values[i], self._deltas[i] = [0.0], []
        return obs

    def state_dict(self) -> dict[str, Any]:
        """The task's state (if it has one), the critic's per-env anchor frame, value and steps since scoring, so
        that a resumed run continues the values of running episodes; with a refitter, the refitted critic."""
        inner = getattr(self.env, "state_dict", None)
        return {
            "env": inner() if inner is not None else None,
            "anchor": {str(k): v.clone() for k, v in self._anchor.items()},
            "value": self.value.clone(),
            "since": self._since.clone(),
            "steps": self._steps,
            "refit": self.refitter.state_dict() if self.refitter is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (the monitors' per-episode lists and the refitter's visits
        restart)."""
        if state.get("env") is not None and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
        for key, value in state["anchor"].items():
            self._anchor[key] = value.to(self._anchor[key].device)
        self.value.copy_(state["value"])
        self._since.copy_(state["since"])
        self._steps = int(state.get("steps", 0))
        if self.refitter is not None and state.get("refit") is not None:
            self.refitter.load_state_dict(state["refit"])

    def _goals(self, ids: torch.Tensor) -> str | list[str]:
        """The goals of envs ``ids``: the fixed one(s), or the instruction of each one's episode (read from its
        anchor, an observation of the same episode)."""
        if self.goal is None:
            index = self._anchor[INSTRUCTION_INDEX_GROUP][ids.to(self._anchor.device)].reshape(-1).tolist()
            texts = episode_instructions(self.env, index)
            assert texts is not None  # checked in __init__
            return texts
        return self.goal if isinstance(self.goal, str) else [self.goal[i] for i in ids.tolist()]

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Step the task; rewards ``[N]`` from the critic; ``dones`` include the critic's terminations."""
        obs, true_reward, dones, extras = self.env.step(actions)
        dones = dones.clone()
        last = extras.get("final_obs", obs)
        self._since += 1
        scored = ((self._since >= self.cfg.stride) | dones.cpu()).nonzero().squeeze(-1)
        rewards = torch.zeros(self.num_envs)
        critic_done = torch.zeros(self.num_envs, dtype=torch.bool)
        if scored.numel() > 0:
            ids = scored.to(obs.device)
            goals = self._goals(scored)
            score = self.critic.score(self._anchor[ids], last[ids], goals)
            delta = apply_dead_band(score.delta.float(), self.cfg.dead_band)
            new_value = value_step(self.value[scored], delta, self.cfg.accumulate)
            bonus = self.cfg.done_bonus * done_term(score.done.float(), self.cfg.done_term)
            progress = self.cfg.progress_weight * (new_value - self.value[scored])
            rewards[scored] = self.cfg.scale * (progress + bonus)
            self.value[scored] = new_value
            self._anchor[ids] = last[ids]
            self._since[scored] = 0
            critic_done[scored] = score.done.float() >= self.cfg.done_threshold
            for k, i in enumerate(scored.tolist()):
                self._values[i].append(float(new_value[k]))
                self._deltas[i].append(float(delta[k]))
            if self.refitter is not None:
                self.refitter.add(last[ids], goals)
        log = extras.setdefault("log", {})
        self._steps += 1
        if self.refitter is not None and self.refitter.cfg.every > 0 and self._steps % self.refitter.cfg.every == 0:
            log.update(self.refitter.refit())
        log["Learned_Reward/true_reward"] = true_reward.float().mean()
        log["Learned_Reward/value"] = self.value.mean()
        ended_by_critic = critic_done & ~dones.cpu() if self.end_on_done else torch.zeros_like(critic_done)
        if ended_by_critic.any():
            ids = ended_by_critic.nonzero().squeeze(-1)
            extras["final_obs"] = obs.clone() if "final_obs" not in extras else extras["final_obs"]
            obs = self.env.reset_envs(ids.to(obs.device))  # type: ignore[attr-defined]
            dones[ids.to(dones.device)] = True
            if "time_outs" in extras:
                extras["time_outs"] = extras["time_outs"].clone()
                extras["time_outs"][ids.to(dones.device)] = False
        log["Learned_Reward/critic_terminations"] = ended_by_critic.float().sum()
        finished = dones.cpu().nonzero().squeeze(-1).tolist()
        if finished:
            self._log_episodes(finished, log)
            idx = torch.tensor(finished)
            self._anchor[idx.to(obs.device)] = obs[idx.to(obs.device)]
            self.value[idx], self._since[idx] = 0.0, 0
        extras["true_reward"] = true_reward
        return obs, rewards.to(true_reward.device), dones, extras

    def _log_episodes(self, finished: list[int], log: dict) -> None:
        vocs, negatives = [], []
        for i in finished:
            if len(self._values[i]) >= 3:
                vocs.append(value_order_correlation(self._values[i]))
            if self._deltas[i]:
                negatives.append(negative_step_rate(self._deltas[i]))
            self._values[i], self._deltas[i] = [0.0], []
        if vocs:
            log["Learned_Reward/voc"] = torch.tensor(vocs).mean()
        if negatives:
            log["Learned_Reward/negative_step_rate"] = torch.tensor(negatives).mean()
