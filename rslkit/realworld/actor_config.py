"""Settings of the actor loop. CLI: ``--actor.<field>`` (the paced robot: ``--actor.robot.<field>``; the connection
to the learner: :class:`~rslkit.link.transport.ActorLinkCfg`'s ``--actor.learner``, ``--actor.id`` ...)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rslkit.link.transport import ActorLinkCfg
from rslkit.realworld.sim_robot import RealTimeCfg
from rslkit.rewards.loop_reward import LoopRewardCfg
from rslkit.utils.validation import expect, finite


@dataclass
class ActorCfg(ActorLinkCfg):
    """How the actor reaches the learner, acts, records and stops. Limits of 0 mean "no limit" (stop with Ctrl-C)."""

    max_episodes: int = 0
    max_env_steps: int = 0
    max_time_s: float = 0.0
    realtime: bool = True
    """Pace a simulated task in wall-clock time at its control rate, with latencies and timed resets
    (:class:`~rslkit.realworld.sim_robot.RealTimeRobot`); off: step as fast as the simulator goes."""
    robot: RealTimeCfg = field(default_factory=RealTimeCfg)
    random_steps: int = 0
    """Env steps with uniform random actions before the policy acts (a fresh learner's policy is random too)."""
    deterministic: bool = False
    """Act with the mean action (evaluation) instead of sampling (exploration)."""
    spool_every_s: float = 1.0
    """Hand the running episode's transitions to the spool at least every this many seconds of robot time (counted
    in control periods, so a simulated run stays reproducible), not only at its end: an actor killed mid-episode
    loses at most this much. 0: at episode ends only, as SERL does."""
    swap_every: int = 0
    """Also take new weights every this many steps of an episode (a chunk boundary; 0: at episode ends only). The
    policy then improves within long episodes, as HIL-SERL's actors do; each transition records its version."""
    on_learner_lost: Literal["continue", "hold"] = "continue"
    """With the learner unreachable for ``lost_after_s``: keep acting with the last weights, or hold the robot
    (no actions; the episode resumes when the learner is back)."""
    lost_after_s: float = 3.0
    first_weights_timeout_s: float = 10.0
    """Wait this long for the learner's first weights before acting with the actor's own initial ones."""
    interventions: str = "none"
    """Who may take over: ``none``, ``scripted`` (the task's scripted expert, for tests and benchmarks),
    ``keyboard`` or ``gamepad``."""
    return_and_explore: float = 0.0
    """VLAC's mode 2: the share of episodes that start from a state of an earlier successful episode (exact
    simulator state through :meth:`RealTimeRobot.start_from`; needs ``realtime`` and a task with exact state)."""
    start_state_stride: int = 10
    """Keep every this many steps of a successful episode as a start state."""
    takeover_prob: float = 1.0
    """``scripted``: chance that a trigger (a stall, leaving the corridor) makes the expert take over..."""
    takeover_decay: float = 1.0
    """... times this per episode (below 1: the "human" helps less and less, as people do once the policy works)."""
    reward: str = "task"
    """The reward stored with each transition: ``task`` (the env's), ``learned`` (the progress critic set by
    ``learned_reward``), or ``package.module:function`` called with a :class:`~rslkit.link.transitions.TransitionBatch`
    and returning rewards ``[N]`` (a success classifier), evaluated off the control loop when a batch is spooled."""
    learned_reward: LoopRewardCfg = field(default_factory=LoopRewardCfg)
    """``reward learned``: the critic and its shaping (``--actor.learned_reward.model PATH`` ...)."""
    lockstep: bool = False
    """Simulation only: at each episode end wait until the learner has done the updates it owes for the data so far
    (``agent.algorithm.utd_ratio`` per transition), so results do not depend on how fast this machine trains. A
    real robot cannot wait: off by default."""
    lockstep_timeout_s: float = 600.0
    drain_timeout_s: float = 30.0
    """At the end, wait this long for the learner to acknowledge what is spooled (the spool keeps the rest)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the actor cannot run with."""
        for name in ("max_episodes", "max_env_steps", "random_steps", "swap_every"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 0, name, f"must be an integer >= 0, got {value}")
        expect(
            isinstance(self.start_state_stride, int) and self.start_state_stride >= 1,
            "start_state_stride",
            f"must be an integer >= 1, got {self.start_state_stride}",
        )
        expect(
            self.return_and_explore == 0 or self.realtime,
            "return_and_explore",
            "needs actor.realtime true (the simulated robot sets the start states)",
        )
        for name in ("takeover_prob", "takeover_decay", "return_and_explore"):
            value = getattr(self, name)
            expect(finite(value) and 0 <= value <= 1, name, f"must be in [0, 1], got {value}")
        times = ("max_time_s", "lost_after_s", "first_weights_timeout_s", "drain_timeout_s", "lockstep_timeout_s")
        for name in (*times, "spool_every_s"):
            value = getattr(self, name)
            expect(finite(value) and value >= 0, name, f"must be a finite number >= 0, got {value}")
        expect(
            self.on_learner_lost in ("continue", "hold"),
            "on_learner_lost",
            f"must be continue or hold, got {self.on_learner_lost}",
        )
        sources = ("none", "scripted", "keyboard", "gamepad")
        expect(self.interventions in sources, "interventions", f"must be one of {sources}, got {self.interventions}")
        expect(bool(self.reward), "reward", "must be 'task', 'learned' or package.module:function")
