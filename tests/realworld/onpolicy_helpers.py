"""Test helpers of the on-policy loop: a learner served on a free loopback port and actors on threads."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rslkit.link.client import ActorClient, Backoff, ClientConfig
from rslkit.realworld.onpolicy_actor import OnPolicyActor, RolloutSummary
from rslkit.realworld.onpolicy_codec import codec_for
from rslkit.realworld.onpolicy_config import OnPolicyActorCfg, OnPolicyLearnerCfg
from rslkit.realworld.onpolicy_learner import PPOLearner, ReinFlowLearner
from rslkit.recipes import build_run
from rslkit.utils.checkpoint import save_checkpoint
from rslkit.utils.config import to_dict

FAST = ClientConfig(heartbeat_s=0.1, dead_after_s=1.0, poll_s=0.01, close_s=2.0, backoff=Backoff(0.05, 0.3))
LEARNERS = {"ppo": PPOLearner, "reinflow": ReinFlowLearner}


@dataclass
class Loop:
    """A served learner and its actors (threads); :meth:`close` stops them all."""

    learner: Any
    actors: list[OnPolicyActor] = field(default_factory=list)
    clients: list[ActorClient] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    summaries: dict[str, RolloutSummary] = field(default_factory=dict)

    def close(self) -> None:
        for actor in self.actors:
            actor.stop_requested = True
        for client in self.clients:
            client.interrupt()
        self.learner.stop_serving()
        for thread in self.threads:
            thread.join(10.0)
        for client in self.clients:
            client.close()


def learner(
    task: str, algo: str, overrides: list[str], cfg: OnPolicyLearnerCfg, iterations: int, log_dir: Path | None = None
) -> Any:
    """A learner of ``algo`` on ``task`` (one-env descriptor), served on a free loopback port."""
    factory = functools.partial(LEARNERS[algo], learner_cfg=cfg)
    _, runner = build_run(task, algo, overrides, num_envs=1, seed=0, max_iterations=iterations, log_dir=log_dir,
                          runner_cls=factory)  # fmt: skip
    runner.serve("127.0.0.1:0")
    return runner


def add_actor(loop: Loop, task: str, algo: str, overrides: list[str], num_envs: int, index: int,
              cfg: OnPolicyActorCfg | None = None, start: bool = True) -> OnPolicyActor:  # fmt: skip
    """An actor ``actor-<index>`` of ``num_envs`` envs connected to the loop's learner, run on a thread."""
    _, runner = build_run(task, algo, overrides, num_envs=num_envs, seed=index + 1)
    codec = codec_for(runner)
    client = ActorClient(f"127.0.0.1:{loop.learner.server.port}", f"actor-{index}", schema=codec.schema(num_envs),
                         config=FAST, seed=index)  # fmt: skip
    actor = OnPolicyActor(codec, client, cfg or OnPolicyActorCfg(give_up_s=5.0, permit_timeout_s=2.0), seed=index)
    loop.actors.append(actor)
    loop.clients.append(client)
    if start:
        thread = threading.Thread(target=lambda: loop.summaries.update({client.actor_id: actor.run()}), daemon=True)
        thread.start()
        loop.threads.append(thread)
    return actor


def flow_bc_checkpoint(task: str, path: Path) -> str:
    """An untrained flow-bc checkpoint of ``task``'s ReinFlow policy (what ``--pretrained`` takes)."""
    from rslkit.models.flow.policy import FlowPolicy
    from rslkit.recipes import build_env
    from rslkit.recipes.catalog import agent_cfg as recipe_agent_cfg
    from rslkit.runners.checks import policy_obs_dim

    cfg = recipe_agent_cfg(task, "reinflow").policy
    env = build_env(task, num_envs=1)
    torch.manual_seed(0)
    policy = FlowPolicy(policy_obs_dim(env, cfg.obs_group), env.num_actions, cfg)
    save_checkpoint(path, {"algorithm": "flow-bc", "iteration": 0, "agent_cfg": {"policy": to_dict(cfg)},
                           "alg": {"ema": {"model": policy.state_dict()}}})  # fmt: skip
    return str(path)
