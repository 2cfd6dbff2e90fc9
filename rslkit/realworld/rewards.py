"""Reward plug-ins of the actor: ``--actor.reward`` replaces the env's reward when batches are spooled.

``--actor.reward learned`` is the local progress critic (:class:`~rslkit.rewards.loop_reward.LoopProgressReward`)
with the typed settings ``--actor.learned_reward.<field>`` (:class:`~rslkit.rewards.loop_reward.LoopRewardCfg`);
``--actor.reward package.module:function`` names a callable ``f(batch: TransitionBatch) -> rewards [N]`` (or
``package.module:factory()``, which builds one): a success classifier, a hand-written shaping. It runs in the
actor's spool writer thread, off the control loop, once per spooled batch; a reward model that needs a GPU should
be served from there (one call per batch keeps its latency off the ticks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rslkit.link.spool_writer import RewardFn
from rslkit.utils.plugins import load_plugin

if TYPE_CHECKING:
    from rslkit.rewards.loop_reward import LoopRewardCfg


def load_reward(name: str, learned: LoopRewardCfg | None = None, flag: str = "--actor.reward") -> RewardFn | None:
    """The reward function ``name`` names: None for ``task`` (keep the env's), the progress critic for ``learned``
    (with ``learned``'s settings), else the plug-in ``package.module:function`` / ``package.module:factory()``.

    Raises:
        ValueError: a name that does not load, or a plug-in that is not callable (naming ``flag``).
    """
    if name == "task":
        return None
    if name == "learned":  # torch, on the actor's machine: imported only when asked for
        from rslkit.rewards.loop_reward import LoopProgressReward, LoopRewardCfg

        return LoopProgressReward.from_cfg(learned or LoopRewardCfg())
    fn = load_plugin(name, flag)
    if not callable(fn):
        raise ValueError(f"{flag} {name}: {type(fn).__name__} is not a reward function (batch -> rewards [N]).")
    return fn
