"""Training samples of a progress critic, VLAC's kinds: progress pairs, stagnant pairs, mismatched goals, done frames.

From episodes of frames with their goals (:class:`ProgressData`), every sample is a pair of frames ``(i, j)``, a
goal and two labels:

- **progress**: ``i``, ``j`` from one successful episode of length ``L``, labelled ``(j - i) / (L - 1)``; both
  orders occur, so reversed pairs carry the negative label;
- **stagnant**: ``i = j`` (the trainer augments the two copies independently), labelled 0: no motion, no progress;
- **mismatched goal**: a progress pair with another goal (another episode's, or a distractor instruction),
  labelled 0 and not done: the critic must ignore instructions the frames do not follow;
- **done**: ``j`` among the last ``done_frames`` frames of a successful episode, done label 1; every other frame
  of a sample is labelled not done;
- **failed episodes** (``success`` False) give pairs whose progress is unknown (masked out of the delta loss) and
  whose frames are never done.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict


@dataclass
class ProgressData:
    """Frames of several episodes, concatenated, with each episode's goal and outcome."""

    frames: TensorDict
    """``[F]``: the groups the critic reads (``camera_<name>`` uint8 ``[F, H, W, 3]``, a state ``[F, D]``)."""
    starts: torch.Tensor
    """``[E]`` first frame of each episode."""
    ends: torch.Tensor
    """``[E]`` one past its last frame."""
    goals: list[str]
    """``E`` language goals."""
    success: torch.Tensor
    """``[E]`` bool: the episode reached its goal at its end."""

    def __post_init__(self) -> None:
        e = len(self.goals)
        if self.starts.shape != (e,) or self.ends.shape != (e,) or self.success.shape != (e,):
            raise ValueError(f"ProgressData needs starts, ends and success of shape [{e}] (one per goal).")
        if e == 0 or bool((self.ends - self.starts < 2).any()):
            raise ValueError("ProgressData needs at least one episode, each of >= 2 frames.")
        if int(self.ends.max()) > int(self.frames.batch_size[0]):
            raise ValueError(f"Episode bounds reach frame {int(self.ends.max())} of {self.frames.batch_size[0]}.")

    @property
    def num_episodes(self) -> int:
        return len(self.goals)

    def subset(self, episodes: torch.Tensor | list[int]) -> ProgressData:
        """The episodes ``episodes`` only (frames copied, bounds renumbered)."""
        ids = torch.as_tensor(episodes, dtype=torch.long)
        spans = [torch.arange(int(self.starts[i]), int(self.ends[i])) for i in ids]
        lengths = torch.tensor([len(s) for s in spans])
        ends = lengths.cumsum(0)
        return ProgressData(
            frames=self.frames[torch.cat(spans)],
            starts=ends - lengths,
            ends=ends,
            goals=[self.goals[int(i)] for i in ids],
            success=self.success[ids].clone(),
        )


@dataclass
class PairSamplerCfg:
    """Mixture of sample kinds in a batch (fractions of the batch; progress takes the rest)."""

    stagnant: float = 0.1
    mismatched: float = 0.2
    done: float = 0.2
    done_frames: int = 3
    """The last this many frames of a successful episode are labelled done."""
    distractor_goals: tuple[str, ...] = ()
    """Instructions no episode follows, used as mismatched goals besides the other episodes' goals."""

    def __post_init__(self) -> None:
        fractions = (self.stagnant, self.mismatched, self.done)
        if min(fractions) < 0 or sum(fractions) > 1:
            raise ValueError(f"Sample fractions must be >= 0 and sum to <= 1, got {fractions}.")
        if self.done_frames < 1:
            raise ValueError(f"done_frames must be >= 1, got {self.done_frames}.")


@dataclass
class PairBatch:
    """Indices into :attr:`ProgressData.frames` and labels of ``B`` samples."""

    index_a: torch.Tensor
    index_b: torch.Tensor
    goals: list[str]
    delta: torch.Tensor
    """``[B]`` target progress in ``[-1, 1]``."""
    delta_mask: torch.Tensor
    """``[B]`` 1 where the progress label is known."""
    done: torch.Tensor
    """``[B]`` 1 where ``frame b`` is done under the goal."""


def check_pair_data(data: ProgressData, cfg: PairSamplerCfg) -> None:
    """Check that ``data`` can fill every sample kind of ``cfg`` (before anything is trained or written).

    Raises:
        ValueError: no successful episode, or mismatched-goal samples with only one instruction (names the
            ``--distractor_goal`` flag of ``python -m rslkit.rewards train``).
    """
    if not bool(data.success.any()):
        raise ValueError("Training a progress critic needs successful episodes (demonstrations that reach the goal).")
    if cfg.mismatched > 0 and len(set(data.goals) | set(cfg.distractor_goals)) < 2:
        raise ValueError(
            "Mismatched-goal samples need a second instruction: train on episodes of several goals, or pass "
            "an instruction no episode follows with --distractor_goal 'open the drawer' (repeatable)."
        )


class PairSampler:
    """Draws :class:`PairBatch` es from :class:`ProgressData` with its own generator."""

    def __init__(self, data: ProgressData, cfg: PairSamplerCfg, seed: int = 0) -> None:
        check_pair_data(data, cfg)
        self.data, self.cfg = data, cfg
        self.generator = torch.Generator().manual_seed(seed)
        self._ok, self._failed = data.success.nonzero().squeeze(-1), (~data.success).nonzero().squeeze(-1)
        self._other_goals = sorted(set(data.goals) | set(cfg.distractor_goals))

    def _uniform(self, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
        """Integers uniform in ``[low, high)`` elementwise."""
        u = torch.rand(low.shape, generator=self.generator)
        return low + (u * (high - low).float()).long().clamp_max(high - low - 1)

    def _pick(self, pool: torch.Tensor, n: int) -> torch.Tensor:
        if n == 0:
            return pool[:0]
        return pool[torch.randint(len(pool), (n,), generator=self.generator)]

    def sample(self, batch: int) -> PairBatch:
        """``batch`` samples of the configured mixture."""
        cfg, d = self.cfg, self.data
        n_stag, n_mis, n_done = (int(round(f * batch)) for f in (cfg.stagnant, cfg.mismatched, cfg.done))
        n_fail = batch // 10 if len(self._failed) else 0  # failed episodes: done negatives
        n_prog = batch - n_stag - n_mis - n_done - n_fail
        if n_prog < 0:
            raise ValueError(f"Batch of {batch} is too small for the sample mixture.")
        kinds = torch.cat([torch.full((n,), k) for k, n in enumerate((n_prog, n_stag, n_mis, n_done, n_fail))])
        episodes = torch.cat([self._pick(self._ok, batch - n_fail), self._pick(self._failed, n_fail)])
        start, end = d.starts[episodes], d.ends[episodes]
        i, j = self._uniform(start, end), self._uniform(start, end)
        last = (end - cfg.done_frames).clamp_min(start)
        j = torch.where(kinds == 3, self._uniform(last, end), j)
        i = torch.where(kinds == 1, j, i)
        length = (end - start - 1).float()
        delta = (j - i).float() / length
        ok = d.success[episodes]
        done = (ok & (j >= end - cfg.done_frames)).float()
        goals = [d.goals[int(e)] for e in episodes]
        for k in (kinds == 2).nonzero().squeeze(-1).tolist():
            others = [g for g in self._other_goals if g != goals[k]]
            goals[k] = others[int(torch.randint(len(others), (1,), generator=self.generator))]
        mismatched = kinds == 2
        delta = torch.where(mismatched, torch.zeros_like(delta), delta)
        done = torch.where(mismatched, torch.zeros_like(done), done)
        return PairBatch(i, j, goals, delta, ok.float(), done)
