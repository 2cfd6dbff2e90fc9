"""Toy episodes for progress-critic tests: a point that moves right (goal "move right") or left ("move left")."""

import torch
from tensordict import TensorDict

from rslkit.rewards.pairs import ProgressData

GOALS = ("move right", "move left")
DISTRACTOR = "open the drawer"


def toy_data(episodes: int, seed: int, image: bool = False) -> ProgressData:
    """``episodes`` episodes of 15-29 frames: state ``policy [F, 2]`` (x, noise) and, with ``image``, a 16x16
    ``camera_front`` showing a bright column at x."""
    g = torch.Generator().manual_seed(seed)
    states, goals, lengths = [], [], []
    for e in range(episodes):
        t = int(torch.randint(15, 30, (1,), generator=g))
        right = e % 2 == 0
        x = (torch.linspace(0, 1, t) if right else torch.linspace(1, 0, t)) + 0.01 * torch.randn(t, generator=g)
        states.append(torch.stack([x, 0.1 * torch.randn(t, generator=g)], -1))
        goals.append(GOALS[0] if right else GOALS[1])
        lengths.append(t)
    n = torch.tensor(lengths)
    ends = n.cumsum(0)
    state = torch.cat(states)
    groups = {"policy": state}
    if image:
        img = torch.zeros(state.shape[0], 16, 16, 3, dtype=torch.uint8)
        cols = (state[:, 0].clamp(0, 1) * 15).round().long()
        img[torch.arange(state.shape[0]), :, cols] = 255
        groups["camera_front"] = img
    return ProgressData(TensorDict(groups, [state.shape[0]]), ends - n, ends, goals, torch.ones(episodes, dtype=bool))
