"""Plots of a progress critic on episodes: value and done probability over time, forward and reversed."""

from __future__ import annotations

from pathlib import Path

import torch

from rslkit.rewards.contract import ProgressCritic
from rslkit.rewards.pairs import ProgressData
from rslkit.rewards.value import value_trajectory


def plot_values(
    critic: ProgressCritic,
    data: ProgressData,
    path: str | Path,
    stride: int = 1,
    dead_band: float = 0.0,
    episodes: int = 6,
) -> Path:
    """Write a PNG of value (solid) and reversed-episode value (dashed) and done probability (bottom) over
    normalised time, for the first ``episodes`` successful episodes of ``data``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ids = data.success.nonzero().squeeze(-1).tolist()[:episodes]
    for k, e in enumerate(ids):
        s, t = int(data.starts[e]), int(data.ends[e])
        index = torch.unique(torch.cat([torch.arange(s, t, stride), torch.tensor([t - 1])]))
        time = torch.linspace(0, 1, len(index))
        color = f"C{k % 10}"
        for order, style in ((index, "-"), (index.flip(0), "--")):
            frames = data.frames[order]
            score = critic.score(frames[:-1], frames[1:], data.goals[e])
            first = critic.score(frames[:1], frames[:1], data.goals[e]).done
            values = value_trajectory(score.delta, float(first[0]), dead_band)
            top.plot(time, values, style, color=color, label=data.goals[e] if style == "-" else None)
            if style == "-":
                bottom.plot(time, torch.cat([first, score.done]), color=color)
    top.set_ylabel("value (dashed: reversed)")
    bottom.set_ylabel("done probability")
    bottom.set_xlabel("normalised time")
    top.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
