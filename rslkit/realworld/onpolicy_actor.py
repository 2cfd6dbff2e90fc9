"""An on-policy actor: a batched simulated env that collects whole rollouts for the asynchronous PPO / ReinFlow
learner, one permit at a time.

Per rollout: ask for a permit (bounded wait), load the weights of the version it names (or newer) if they are not
the ones running, collect ``T`` decisions with that policy recording what the algorithm needs (behaviour
log-probs; ReinFlow: the whole chains), send the rollout. Weights change only between rollouts, so every sample of
a rollout carries one policy version. The env keeps running across rollouts (the last observation of one is the
first of the next). The actor exits cleanly when the learner has been silent for ``give_up_s``.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

import numpy as np
import torch

from rslkit.link.client import ActorClient
from rslkit.link.rollouts import Permit, PermitRequest, Rollout, RolloutSchema
from rslkit.realworld.onpolicy_codec import RolloutCodec
from rslkit.realworld.onpolicy_config import OnPolicyActorCfg
from rslkit.utils.validation import validate

log = logging.getLogger(__name__)


@dataclass
class RolloutSummary:
    """What an on-policy actor did: rollouts sent (and dropped because their stream ended), env steps, why it
    stopped."""

    rollouts: int = 0
    dropped: int = 0
    env_steps: int = 0
    versions: tuple[int, ...] = ()
    stopped_because: str = ""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "rollouts": self.rollouts, "dropped": self.dropped, "env_steps": self.env_steps,
            "versions": list(self.versions), "stopped_because": self.stopped_because,
        }  # fmt: skip


class OnPolicyActor:
    """Collects rollouts with ``codec``'s algorithm on its env and sends them through ``client``.

    Args:
        codec: the algorithm's rollout codec, built on the actor's runner (its env has ``num_envs`` envs).
        client: the connection to the learner (its ``schema`` the actor's :class:`RolloutSchema`).
        cfg: waits and optional slowness.
        seed: of the slowness jitter.
    """

    def __init__(self, codec: RolloutCodec, client: ActorClient, cfg: OnPolicyActorCfg, seed: int = 0) -> None:
        validate(cfg, "actor")
        if not isinstance(client.schema, RolloutSchema):
            raise ValueError("an on-policy actor's client needs its RolloutSchema (ActorClient(schema=...)).")
        self.codec, self.client, self.cfg = codec, client, cfg
        self.schema: RolloutSchema = client.schema
        self.version = -1
        self.stop_requested = False
        self._rng = random.Random(seed)
        self._obs = codec.env.get_observations()

    def run(self) -> RolloutSummary:
        """Collect until ``max_rollouts``, a signal (:attr:`stop_requested`) or the learner is gone."""
        summary, versions, last = RolloutSummary(), [], -1
        while not self.stop_requested:
            if self.cfg.max_rollouts and summary.rollouts >= self.cfg.max_rollouts:
                summary.stopped_because = "max_rollouts"
                break
            request = PermitRequest(self.client.actor_id, last)
            got = self.client.request(request, "permit", self.cfg.permit_timeout_s)
            reason = "" if got is not None else self._gone()
            while got is not None and not reason and not self._take_weights(got[1]):
                reason = self._gone()  # holding a permit: wait for its weights until the learner is gone
            if reason:
                summary.stopped_because = reason
                break
            if got is None:
                continue
            stream, permit = got
            rollout = self.collect(permit.rollout)
            if self.client.send(rollout, stream):
                summary.rollouts, last = summary.rollouts + 1, permit.rollout
                versions.append(rollout.policy_version)
            else:
                summary.dropped += 1
            summary.env_steps += self.schema.steps * self.schema.envs * self.codec.env_steps()
        if self.stop_requested and not summary.stopped_because:
            summary.stopped_because = "signal"
        summary.versions = tuple(versions)
        return summary

    def _gone(self) -> str:
        """Why to stop now ('' to keep waiting)."""
        if self.stop_requested:
            return "signal"
        if self.client.fatal:
            raise RuntimeError(f"actor {self.client.actor_id}: {self.client.fatal}")
        if self.client.stopping:
            return "client closed"
        if self.client.silent_s() > self.cfg.give_up_s:
            log.warning(
                "actor %s: the learner said nothing in %.0f s; exiting", self.client.actor_id, self.cfg.give_up_s
            )
            return "learner gone"
        return ""

    def _take_weights(self, permit: Permit) -> bool:
        """Load the weights the permit names (or newer) if they are not the running ones; False if none came."""
        if self.version >= permit.policy_version:
            return True
        weights = self.client.wait_weights(permit.policy_version, self.cfg.permit_timeout_s)
        if weights is None:
            return False
        self.codec.load_weights(weights[1])
        self.version = weights[0]
        self.client.set_policy_version(self.version)
        return True

    @torch.inference_mode()
    def collect(self, k: int) -> Rollout:
        """Rollout ``k``: ``T`` decisions of every env with the running weights."""
        t_steps = self.schema.steps
        obs = {g: np.empty((t_steps + 1, *self._obs[g].shape), np.float32) for g in self.schema.obs}
        step: dict[str, list[np.ndarray]] = {name: [] for name in self.schema.step}
        for t in range(t_steps):
            for g in obs:
                obs[g][t] = self._obs[g].numpy()
            actions, record = self.codec.act(self._obs)
            self._obs, rewards, dones, extras = self.codec.step(actions)
            record |= self.codec.step_extras(rewards, dones, extras)
            for name in step:
                step[name].append(record[name].detach().to("cpu").numpy())
            self._pace()
        for g in obs:
            obs[g][t_steps] = self._obs[g].numpy()
        arrays = {name: np.stack(v).astype(self._dtype(name)) for name, v in step.items()}
        return Rollout(self.client.actor_id, k, self.version, obs, arrays, self.schema)

    def _dtype(self, name: str) -> str:
        return self.schema.step[name].dtype

    def _pace(self) -> None:
        if self.cfg.step_delay_s > 0:
            time.sleep(self.cfg.step_delay_s * (1.0 + self.cfg.step_delay_jitter * self._rng.random()))
