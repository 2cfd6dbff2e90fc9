"""Instructions per episode: how an env that draws a language instruction for each episode exposes it.

The env lists its instruction texts in ``env.instructions`` and returns an observation group ``goal`` ``[N, 1]``
(int) with each env's index into them (``so101-pick-place``). Recorders store each episode's instruction as its
LeRobot task, VLA runners embed it, and learned rewards score progress towards it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

INSTRUCTION_INDEX_GROUP = "goal"
"""Observation group of each env's index into ``env.instructions``."""


def episode_instructions(env: Any, index: Sequence[int]) -> list[str] | None:
    """The instruction texts of ``index`` (values of the ``goal`` group), or None for an env without instructions.

    Raises:
        ValueError: for an index outside ``env.instructions``.
    """
    instructions = getattr(env, "instructions", None)
    if not instructions:
        return None
    bad = [int(i) for i in index if not 0 <= int(i) < len(instructions)]
    if bad:
        raise ValueError(f"Instruction indices {bad[:4]} are outside the env's {len(instructions)} instructions.")
    return [instructions[int(i)] for i in index]
