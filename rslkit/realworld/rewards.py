"""Reward plug-ins of the actor: a function named on the command line replaces the env's reward.

``--actor.reward package.module:function`` names a callable ``f(batch: wire.TransitionBatch) -> rewards [N]``: a
success classifier (1 where the goal is reached), a hand-written shaping, or a learned reward model (the VLAC-style
critic of rslkit.rewards). It runs in the actor's spool writer thread, off the control loop, once per spooled batch;
a reward model that needs a GPU should be served from there (one call per batch keeps its latency off the ticks).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np

from rslkit.realworld import wire

RewardFn = Callable[[wire.TransitionBatch], np.ndarray]


def load_reward(name: str) -> RewardFn:
    """The reward function ``package.module:function`` (or a factory of one: ``package.module:factory()``).

    Raises:
        ValueError: a malformed name, a module that does not import, or an attribute that is not callable.
    """
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--actor.reward must be 'task' or package.module:function, got {name!r}.")
    call = attr.endswith("()")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"--actor.reward {name}: cannot import {module_name!r} ({err}).") from err
    fn = getattr(module, attr.removesuffix("()"), None)
    if not callable(fn):
        raise ValueError(f"--actor.reward {name}: {module_name} has no callable {attr.removesuffix('()')!r}.")
    out = fn() if call else fn
    if not callable(out):
        raise ValueError(f"--actor.reward {name}: the factory returned {type(out).__name__}, not a function.")
    return out
