"""From progress deltas to a value and rewards: VLAC's value recursion, a dead-band, a frame stride, a done threshold.

VLAC (arXiv 2509.15937) accumulates the critic's pairwise progress ``c`` (percent) of consecutive frames into a
task value ``V`` in ``[0, 100]``: ``V <- V + (100 - V) c / 100``. With ``v = V / 100`` and ``delta = c / 100``:

- progress (``delta >= 0``) closes that fraction of the remaining gap: ``v <- v + (1 - v) delta``;
- regression (``delta < 0``) loses that fraction of what was achieved: ``v <- v + v delta``.

Both keep ``v`` in ``[0, 1]`` for ``delta`` in ``[-1, 1]``. A critic trained on rslkit's pair labels ``(j - i) / T``
(a fraction of the whole task, not of the gap still open) is compressed by this recursion: ``T`` exact steps of
``1 / T`` end at ``1 - (1 - 1/T)^T``, about ``1 - 1/e = 0.63``, and later progress pays less than earlier progress.
``accumulate="sum"`` adds the deltas instead (``v <- clip(v + delta, 0, 1)``), which those labels add up to 1 along
a demonstration (so101-lift's state critic under both: docs/benchmarks.md, section 10).

A ``dead_band`` zeroes ``|delta|`` below it (the critic's noise on a robot that does not move would otherwise drift the
value), and the reward of a step is the value's increment, so the return of an episode is its final value minus the
first. Increments alone pay nothing for staying at the goal and can be gamed by states the critic never saw (a pendulum
spinning through upright); ``done_bonus`` adds ``done_bonus * done(o_t)`` per scored step, the success-classifier reward
of HIL-SERL, which pays for holding the goal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rslkit.utils.validation import expect

ACCUMULATE = ("vlac", "sum")
"""How deltas accumulate into a value: VLAC's recursion, or their clipped sum."""
DONE_TERMS = ("prob", "log_odds")
"""What the done bonus pays: the done probability ``D`` (HIL-SERL), or VICE's ``log D - log(1 - D)``."""
LOG_ODDS_EPS = 1e-4
"""``D`` is clamped to ``[eps, 1 - eps]`` before the log-odds (so they lie within +-9.2)."""


@dataclass
class ValueCfg:
    """How deltas become values and rewards."""

    dead_band: float = 0.02
    """``|delta|`` below this counts as no progress."""
    stride: int = 1
    """Score every ``stride``-th control step (the pair is the last scored frame and the current one); the reward
    of the steps in between is 0."""
    done_threshold: float = 0.9
    """A done probability at or above this ends the episode (success), with ``end_on_done``."""
    end_on_done: bool = True
    """End episodes when the critic says done (False: the task's own terminations and time-outs only; a critic whose
    done head fires early then cannot cut episodes short, which a policy learns to exploit)."""
    scale: float = 1.0
    """Reward = ``scale * (progress_weight * (v_t - v_{t-1}) + done_bonus * done_term(D(o_t)))``."""
    done_bonus: float = 0.0
    """Weight of the done probability in each scored step's reward (0: value increments only)."""
    progress_weight: float = 1.0
    """Weight of the value increments in the reward (0 with ``done_bonus > 0``: the done probability alone, HIL-SERL's
    success-classifier reward)."""
    accumulate: str = "vlac"
    """``vlac``: VLAC's recursion (progress closes a fraction of the gap); ``sum``: ``clip(v + delta, 0, 1)``, what
    the pair labels ``(j - i) / T`` add up to (see the module docstring)."""
    done_term: str = "prob"
    """``prob``: the bonus pays ``D``; ``log_odds``: VICE's ``log D - log(1 - D)``, which keeps ranking states after
    refits on online data (:mod:`rslkit.rewards.done_refit`) have pushed ``D`` near 0 wherever the policy goes."""

    def __post_init__(self) -> None:
        for name, problem in self.problems():
            raise ValueError(f"{name} {problem}.")

    def check(self) -> None:
        """Raise ``ConfigError`` for the first bad field (``validate(cfg, "reward")`` names ``--reward.<field>``)."""
        for name, problem in self.problems():
            expect(False, name, problem)

    def problems(self) -> list[tuple[str, str]]:
        """``(field, what is wrong)`` for every field the value recursion cannot run with (empty: all good)."""
        rules = [
            (0.0 <= self.dead_band < 1.0, "dead_band", f"must be in [0, 1), got {self.dead_band}"),
            (self.stride >= 1, "stride", f"must be >= 1, got {self.stride}"),
            (self.accumulate in ACCUMULATE, "accumulate", f"must be one of {ACCUMULATE}, got {self.accumulate!r}"),
            (self.scale > 0, "scale", f"must be > 0, got {self.scale}"),
            (self.done_bonus >= 0, "done_bonus", f"must be >= 0, got {self.done_bonus}"),
            (self.progress_weight >= 0, "progress_weight", f"must be >= 0, got {self.progress_weight}"),
            (
                self.progress_weight != 0 or self.done_bonus > 0,
                "progress_weight",
                "0 needs done_bonus > 0 (the done classifier's reward); every reward would be 0",
            ),
            (self.done_term in DONE_TERMS, "done_term", f"must be one of {DONE_TERMS}, got {self.done_term!r}"),
            (0.0 < self.done_threshold <= 1.0, "done_threshold", f"must be in (0, 1], got {self.done_threshold}"),
        ]
        return [(name, problem) for ok, name, problem in rules if not ok]


def check_reward_weights(progress_weight: float, done_bonus: float) -> None:
    """Raise ``ValueError`` for a negative ``progress_weight`` or weights that make every reward 0 (the rules of
    :meth:`ValueCfg.problems`)."""
    ValueCfg(progress_weight=progress_weight, done_bonus=done_bonus)


def done_term(done: torch.Tensor, kind: str = "prob") -> torch.Tensor:
    """What the done bonus pays for done probabilities ``done`` (any shape): ``done`` itself (``prob``), or
    ``log D - log(1 - D)`` with ``D`` clamped to ``[LOG_ODDS_EPS, 1 - LOG_ODDS_EPS]`` (``log_odds``)."""
    if kind == "prob":
        return done
    if kind != "log_odds":
        raise ValueError(f"done_term must be one of {DONE_TERMS}, got {kind!r}.")
    d = done.clamp(LOG_ODDS_EPS, 1.0 - LOG_ODDS_EPS)
    return torch.log(d) - torch.log1p(-d)


def apply_dead_band(delta: torch.Tensor, dead_band: float) -> torch.Tensor:
    """``delta`` with entries of magnitude below ``dead_band`` set to 0 (shape kept)."""
    return torch.where(delta.abs() < dead_band, torch.zeros_like(delta), delta)


def value_step(value: torch.Tensor, delta: torch.Tensor, accumulate: str = "vlac") -> torch.Tensor:
    """One step from ``value [N]`` in ``[0, 1]`` and ``delta [N]`` in ``[-1, 1]`` to the new value ``[N]``.

    ``vlac`` (VLAC's recursion): ``v + (1 - v) delta`` for ``delta >= 0``, ``v + v delta`` for ``delta < 0``;
    ``sum``: ``clip(v + delta, 0, 1)``.

    Raises:
        ValueError: an unknown ``accumulate``.
    """
    delta = delta.clamp(-1.0, 1.0)
    if accumulate == "sum":
        return (value + delta).clamp(0.0, 1.0)
    if accumulate != "vlac":
        raise ValueError(f"accumulate must be one of {ACCUMULATE}, got {accumulate!r}.")
    return torch.where(delta >= 0, value + (1.0 - value) * delta, value + value * delta)


def value_trajectory(
    deltas: torch.Tensor, initial: float | torch.Tensor = 0.0, dead_band: float = 0.0, accumulate: str = "vlac"
) -> torch.Tensor:
    """Values of an episode from the deltas of its consecutive (strided) frame pairs.

    Args:
        deltas: ``[T]`` (or ``[N, T]``): ``delta(o_k, o_{k+1})``.
        initial: value of the first frame (0: nothing done yet; ``done(o_0)`` for an episode that may start done).
        dead_band, accumulate: see :class:`ValueCfg`.

    Returns:
        ``[T + 1]`` (or ``[N, T + 1]``) values, the first being ``initial``.
    """
    deltas = apply_dead_band(deltas, dead_band)
    value = torch.as_tensor(initial, dtype=deltas.dtype).expand(deltas.shape[:-1]).clone()
    values = [value]
    for k in range(deltas.shape[-1]):
        value = value_step(value, deltas[..., k], accumulate)
        values.append(value)
    return torch.stack(values, dim=-1)
