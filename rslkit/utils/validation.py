"""Config validation: each config dataclass checks its own fields; errors name the full field path.

A config class defines ``check(self) -> None`` and calls :func:`expect` for each rule. :func:`validate` walks a
config and every nested dataclass, so ``validate(agent_cfg, "agent")`` reports ``--agent.algorithm.gamma``.
Runners validate their config at construction, after the command line's overrides were applied.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any


class ConfigError(ValueError):
    """A config field holds a value the code cannot run with.

    Attributes:
        field: dotted path of the field (``agent.algorithm.gamma``).
        problem: what is wrong, e.g. ``must be in (0, 1], got nan``.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"Invalid config value --{field}: {problem}.")
        self.field = field
        self.problem = problem


def expect(ok: bool, field: str, problem: str) -> None:
    """Raise :class:`ConfigError` for ``field`` (a name relative to the config being checked) unless ``ok``."""
    if not ok:
        raise ConfigError(field, problem)


def finite(value: float) -> bool:
    """Whether ``value`` is a finite number (False for NaN and infinities)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def validate(cfg: Any, prefix: str = "") -> None:
    """Run ``check()`` on ``cfg`` and on every nested dataclass field, innermost first.

    Args:
        cfg: a config dataclass.
        prefix: path of ``cfg`` in the command line (``agent``, ``env``), prepended to field names in errors.

    Raises:
        ConfigError: the first rule broken, naming ``<prefix>.<field>``.
    """
    if not is_dataclass(cfg) or isinstance(cfg, type):
        return
    dot = f"{prefix}." if prefix else ""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if is_dataclass(value):
            validate(value, f"{dot}{f.name}")
    check = getattr(cfg, "check", None)
    if check is None:
        return
    try:
        check()
    except ConfigError as err:
        raise ConfigError(f"{dot}{err.field}", err.problem) from None
