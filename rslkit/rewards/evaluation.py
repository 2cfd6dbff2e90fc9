"""Grade any :class:`~rslkit.rewards.contract.ProgressCritic` on held-out episodes (the monitors of issue 15).

For each successful episode, frames ``s, s + stride, ..., e - 1`` are scored pairwise in order; the deltas
accumulate into a value by VLAC's recursion (:mod:`rslkit.rewards.value`) from ``done(o_0)``. Reported:

- ``voc`` (mean and minimum over episodes): Spearman correlation of that value with time;
- ``voc_reversed``: the same for the episode played backwards (want near -1);
- ``negative_step_rate``: fraction of forward deltas below ``-dead_band``;
- ``mismatched_abs_delta``: mean ``|delta|`` of the same pairs under another goal (want near 0), and
  ``mismatched_abs_delta_full``: of the (first, last) pair, where the true goal's delta is near 1;
- ``first_last_delta``: mean delta of (first, last) under the true goal;
- ``done_auroc``: done probability of done frames (the last ``done_frames`` of each episode) against all others,
  mismatched-goal frames included as not done.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from rslkit.rewards.contract import ProgressCritic
from rslkit.rewards.metrics import done_auroc, negative_step_rate, value_order_correlation
from rslkit.rewards.pairs import ProgressData
from rslkit.rewards.value import value_trajectory


def _score_chain(critic: ProgressCritic, data: ProgressData, index: torch.Tensor, goal: str):
    """Deltas of consecutive frames ``index [K]`` and done probabilities of all K frames."""
    first = data.frames[index[:1]]
    s0 = critic.score(first, first, goal)
    score = critic.score(data.frames[index[:-1]], data.frames[index[1:]], goal)
    return score.delta, torch.cat([s0.done, score.done])


def evaluate_critic(
    critic: ProgressCritic,
    data: ProgressData,
    stride: int = 1,
    dead_band: float = 0.0,
    done_frames: int = 3,
    other_goals: Sequence[str] = (),
) -> dict[str, float]:
    """Metrics of ``critic`` on the successful episodes of ``data`` (see the module docstring).

    Args:
        critic: the critic to grade.
        data: held-out episodes.
        stride: frames between scored pairs.
        dead_band: deltas below this magnitude count as 0 in the value and the negative-step rate.
        done_frames: how many final frames are done.
        other_goals: instructions for the mismatched-goal check (besides the other episodes' goals).

    Raises:
        ValueError: no successful episode, or no second goal for the mismatched check.
    """
    episodes = data.success.nonzero().squeeze(-1).tolist()
    if not episodes:
        raise ValueError("evaluate_critic needs successful episodes.")
    pool = sorted(set(data.goals) | set(other_goals))
    voc, voc_rev, neg, mis, mis_full, full = [], [], [], [], [], []
    done_p, done_y = [], []
    for e in episodes:
        s, t = int(data.starts[e]), int(data.ends[e])
        index = torch.unique(torch.cat([torch.arange(s, t, stride), torch.tensor([t - 1])]))
        goal = data.goals[e]
        deltas, done = _score_chain(critic, data, index, goal)
        voc.append(value_order_correlation(value_trajectory(deltas, float(done[0]), dead_band)))
        neg.append(negative_step_rate(deltas, dead_band))
        rev_deltas, rev_done = _score_chain(critic, data, index.flip(0), goal)
        voc_rev.append(value_order_correlation(value_trajectory(rev_deltas, float(rev_done[0]), dead_band)))
        ends = data.frames[index[:1]], data.frames[index[-1:]]
        full.append(float(critic.score(*ends, goal).delta[0]))
        frame_ids = index
        done_p.append(done.numpy())
        done_y.append((frame_ids >= t - done_frames).numpy())
        others = [g for g in pool if g != goal]
        if not others:
            raise ValueError("The mismatched-goal check needs a second goal: pass other_goals.")
        wrong = others[e % len(others)]
        wrong_deltas, wrong_done = _score_chain(critic, data, index, wrong)
        mis.append(float(wrong_deltas.abs().mean()))
        mis_full.append(abs(float(critic.score(*ends, wrong).delta[0])))
        done_p.append(wrong_done.numpy())
        done_y.append(np.zeros(len(index), dtype=bool))
    return {
        "voc": float(np.mean(voc)),
        "voc_min": float(np.min(voc)),
        "voc_reversed": float(np.mean(voc_rev)),
        "negative_step_rate": float(np.mean(neg)),
        "first_last_delta": float(np.mean(full)),
        "mismatched_abs_delta": float(np.mean(mis)),
        "mismatched_abs_delta_full": float(np.mean(mis_full)),
        "done_auroc": done_auroc(np.concatenate(done_p), np.concatenate(done_y)),
        "episodes": float(len(episodes)),
    }
