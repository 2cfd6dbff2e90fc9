"""Settings of the node's actor mode (``--actor.*`` flags): the learner, the spool, rewards, episodes and batching."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rslkit.deploy.metadata import PolicyMetadata
from rslkit.link.transport import ActorLinkCfg

RewardKind = Literal["topic", "json", "plugin", "none"]
REWARD_KINDS: tuple[str, ...] = ("topic", "json", "plugin", "none")
MAX_BATCH_STEPS = 1000
"""Transitions per spooled batch at most, also with ``chunk_steps=0`` (a long episode is sent in parts)."""


@dataclass
class RobotActorCfg(ActorLinkCfg):
    """The actor mode of the ROS 2 node: record every control tick as a transition and stream it to a learner.

    Each flag is ``--actor.<field>``, the connection's (:class:`~rslkit.link.transport.ActorLinkCfg`: ``learner``,
    ``id``, ``token_file``, ``tls_ca`` ...) as for every actor; ``--actor.learner`` turns the mode on.
    """

    learner: str = ""
    """The learner's ``HOST:PORT`` (a host other than loopback needs ``tls_ca``); empty: the actor mode is off."""
    spool: str = ""
    """Spool directory (empty: ``spool/<id>``); transitions wait here until the learner acknowledges them."""
    token: str = ""
    """The learner's token (prefer ``token_file`` or the ``RSLKIT_TOKEN`` environment variable: a flag shows in the
    process list)."""
    task: str = ""
    """The task every policy must be exported from (its metadata's ``task``); empty: not checked."""
    schema: str = ""
    """A JSON file with the learner's ``TransitionSchema`` (``to_json``); empty: built from the policy's inputs."""
    chunk_steps: int = 0
    """Spool a batch every this many transitions (0: at each episode end), and at most every 1000."""
    spool_every_s: float = 1.0
    """Spool the running episode at least every this many seconds too (0: off): a killed node loses at most this."""
    max_episode_steps: int = 0
    """An episode is truncated after this many transitions (0: only the reward source ends episodes)."""
    reward: RewardKind = "topic"
    """``topic``: std_msgs/Float32 on ``reward_topic`` and std_msgs/Bool on ``done_topic``; ``json``: std_msgs/String
    ``{"reward": r, "done": b, "intervention": b}`` on ``reward_topic``; ``plugin``: ``reward_fn``; ``none``: 0."""
    reward_topic: str = "reward"
    done_topic: str = "episode_end"
    reward_fn: str = ""
    """``module:function`` called as ``function(obs) -> (reward, done[, intervention])`` with ``obs`` the
    ``{group: float32 [D]}`` the policy sees next; on the control thread, so it must take microseconds."""
    max_buffered: int = 100_000
    """Transitions held in memory while the spool's disk is slow; beyond it new batches are dropped (and counted)."""
    initial_version: int = 0
    """The policy version recorded for the policy file the node starts with."""
    dead_after_s: float = 3.0
    """The stream is reopened when the learner has said nothing for this long (gone, hung or unreachable)."""
    drain_s: float = 2.0
    """On shutdown, wait this long at most for the learner to acknowledge what is spooled (the rest stays spooled)."""

    def validate(self) -> None:
        """Check values.

        Raises:
            ValueError: naming the flag to fix.
        """
        if ":" not in self.learner:
            raise ValueError(f"--actor.learner must be HOST:PORT, got '{self.learner}'.")
        if self.token and self.token_file:
            raise ValueError("Give --actor.token or --actor.token_file, not both.")
        if self.reward not in REWARD_KINDS:
            raise ValueError(f"--actor.reward must be one of {REWARD_KINDS}, got '{self.reward}'.")
        if (self.reward == "plugin") != bool(self.reward_fn):
            raise ValueError("--actor.reward plugin needs --actor.reward_fn module:function (and only it uses one).")
        if self.chunk_steps < 0 or self.max_episode_steps < 0 or self.initial_version < 0:
            raise ValueError("--actor.chunk_steps, --actor.max_episode_steps and --actor.initial_version must be >= 0.")
        if self.max_buffered < 1 or self.dead_after_s <= 0.1 or self.drain_s < 0 or not self.spool_every_s >= 0:
            raise ValueError(
                "--actor.max_buffered must be >= 1, --actor.dead_after_s > 0.1, --actor.drain_s and "
                "--actor.spool_every_s >= 0."
            )

    @property
    def spool_dir(self) -> Path:
        """Where the spool lives."""
        return Path(self.spool or f"spool/{self.id}")

    @property
    def batch_steps(self) -> int:
        """Transitions per spooled batch at most."""
        return min(self.chunk_steps or MAX_BATCH_STEPS, MAX_BATCH_STEPS)

    def read_token(self) -> str | None:
        """The token from ``token``, ``token_file`` or the secret ``RSLKIT_TOKEN`` (None: the learner has none)."""
        return self.token or super().read_token()


def schema_json(cfg: RobotActorCfg, meta: PolicyMetadata) -> dict[str, Any]:
    """The transitions' schema as JSON: from ``cfg.schema``'s file, or the policy's inputs (float32 groups and action).

    Raises:
        ValueError: when the policy is not a single-group vector policy the schema can be built from.
    """
    if cfg.schema:
        return json.loads(Path(cfg.schema).read_text())
    groups = {g: {"shape": list(shape), "dtype": "float32"} for g, shape in meta.obs_groups.items()}
    return {"obs": groups, "action": {"shape": [meta.action_dim], "dtype": "float32"}}


def actor_flag_help() -> dict[str, str]:
    """``field -> help`` for the command line: the field docs above, shortened."""
    return {
        "learner": "learner HOST:PORT: turns the actor mode on",
        "id": "this actor's id, one per robot",
        "spool": "spool directory (default spool/<id>)",
        "token": "the learner's token (prefer --actor.token_file)",
        "token_file": "a file holding the learner's token",
        "tls_ca": "CA certificate (PEM) of the learner; empty: plain text, loopback only",
        "tls_server_name": "the name in the learner's certificate, when the address is not in it",
        "allow_insecure_remote": "dial a non-loopback learner in plain text (a network you trust)",
        "task": "refuse policies exported from another task",
        "schema": "TransitionSchema JSON file (default: from the policy's inputs)",
        "chunk_steps": "spool every K transitions (0: per episode; at most 1000 per batch)",
        "spool_every_s": "spool the running episode at least every S seconds too (0: off)",
        "max_episode_steps": "truncate episodes after N transitions (0: never)",
        "reward": "reward source: topic (Float32 + Bool), json (String), plugin (--actor.reward_fn) or none",
        "reward_topic": "std_msgs/Float32 reward (reward topic) or std_msgs/String JSON (reward json)",
        "done_topic": "std_msgs/Bool episode end (reward topic)",
        "reward_fn": "module:function(obs) -> (reward, done[, intervention]) (reward plugin)",
        "max_buffered": "transitions buffered in memory while the disk is slow; more are dropped and counted",
        "initial_version": "policy version recorded for the starting policy file",
        "dead_after_s": "reopen the stream when the learner is silent this long",
        "drain_s": "on shutdown, wait this long at most for acknowledgements",
    }
