"""Terrain heights under any batch of points, read from the height grid (no ray casts): the surface MuJoCo collides
with.

MuJoCo splits every cell of a heightfield into two triangles along the diagonal from sample ``[i, j]`` to
``[i + 1, j + 1]`` and interpolates linearly on each; :meth:`HeightField.height` does the same, so it returns
exactly the height a ray cast straight down (``mj_ray``) would hit (``tests/envs/test_terrain.py`` checks this).
That is bilinear interpolation's cheaper sibling: three samples per point instead of four, and no bump where MuJoCo
has none.
"""

from __future__ import annotations

import math

import torch

from rslkit.envs.terrain.generator import Terrain


class HeightField:
    """Torch lookup of a :class:`~rslkit.envs.terrain.generator.Terrain`'s heights on ``device``."""

    def __init__(self, terrain: Terrain, device: str | torch.device = "cpu") -> None:
        self.heights = torch.as_tensor(terrain.heights, dtype=torch.float32, device=device)
        self._flat = self.heights.reshape(-1)
        self.ny, self.nx = terrain.heights.shape
        self.origin = terrain.origin
        self.scale = terrain.horizontal_scale

    def height(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Ground height (metres) under world points ``x, y`` (any equal shapes); points off the grid read its edge."""
        u = ((x - self.origin[0]) / self.scale).clamp(0.0, self.nx - 1.0)
        v = ((y - self.origin[1]) / self.scale).clamp(0.0, self.ny - 1.0)
        j = u.floor().clamp_(max=self.nx - 2)
        i = v.floor().clamp_(max=self.ny - 2)
        fx, fy = u - j, v - i
        base = (i * self.nx + j).long()
        # Above the diagonal (fx >= fy) the triangle is (i, j), (i, j + 1), (i + 1, j + 1); below, (i + 1, j)
        # takes the place of (i, j + 1). Either way: h00 + max(fx, fy) (side - h00) + min(fx, fy) (h11 - side).
        below = fy > fx
        side = self._flat[base + 1 + below * (self.nx - 1)]
        h00 = self._flat[base]
        h11 = self._flat[base + self.nx + 1]
        return h00 + torch.maximum(fx, fy) * (side - h00) + torch.minimum(fx, fy) * (h11 - side)


def scan_grid(length: float, width: float, spacing: float) -> torch.Tensor:
    """Points ``[P, 2]`` of a centred ``length x width`` grid (metres, ``x`` forward) every ``spacing`` metres, ``x``
    major: legged_gym's 17 x 11 = 187 points for 1.6 x 1.0 m at 0.1 m."""
    nx = math.floor(length / spacing + 1e-6) + 1
    ny = math.floor(width / spacing + 1e-6) + 1
    xs = (torch.arange(nx) - (nx - 1) / 2) * spacing
    ys = (torch.arange(ny) - (ny - 1) / 2) * spacing
    return torch.stack(torch.meshgrid(xs, ys, indexing="ij"), -1).reshape(-1, 2)
