"""Terrain: generation is deterministic per seed, tiles grow harder by level, the torch height lookup matches MuJoCo's
heightfield (rays cast straight down and resting spheres), and the curriculum promotes and demotes as configured."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from rslkit.envs.terrain.curriculum import CurriculumCfg, TerrainCurriculum
from rslkit.envs.terrain.generator import TerrainCfg, generate_terrain
from rslkit.envs.terrain.height_field import HeightField, scan_grid
from rslkit.envs.terrain.mjcf import set_terrain
from rslkit.envs.terrain.tiles import TILE_TYPES
from rslkit.utils.validation import ConfigError


def _cfg(**kw) -> TerrainCfg:
    """A small grid (4 levels x every tile type, 4 m tiles at 0.1 m) that builds in milliseconds."""
    kw.setdefault("tile_size", 4.0)
    kw.setdefault("num_rows", 4)
    kw.setdefault("border", 1.0)
    kw.setdefault("platform", 1.0)
    return TerrainCfg(**kw)


def test_same_seed_same_terrain_other_seed_other_terrain() -> None:
    a, b, c = (generate_terrain(_cfg(seed=seed)) for seed in (3, 3, 4))
    assert np.array_equal(a.heights, b.heights) and np.array_equal(a.tile_origins, b.tile_origins)
    assert not np.array_equal(a.heights, c.heights)
    assert a.heights.dtype == np.float32 and a.heights.shape == (6 * 40 + 20, 4 * 40 + 20)
    assert a.tile_origins.shape == (4, 6, 3)


def test_tiles_get_harder_by_level_and_meet_at_height_zero() -> None:
    terrain = generate_terrain(_cfg(seed=0))
    size, pad = 40, 10
    for col, name in enumerate(terrain.columns):
        spans = []
        for level in range(terrain.num_rows):
            tile = terrain.heights[
                pad + col * size : pad + (col + 1) * size, pad + level * size : pad + (level + 1) * size
            ]
            assert np.all(tile[0] == 0) and np.all(tile[:, -1] == 0), f"{name} level {level}: edges not at 0"
            spans.append(float(tile.max() - tile.min()))
        assert spans == sorted(spans) and spans[-1] > spans[0], f"{name}: {spans}"
    # Pits and summits: the centre platform of an "up" tile is below its edges, of a "down" tile above.
    hardest = terrain.tile_origins[-1]
    for col, name in enumerate(terrain.columns):
        if name.endswith("_up"):
            assert hardest[col, 2] < -0.1
        if name.endswith("_down"):
            assert hardest[col, 2] > 0.1


def test_bad_layout_names_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"--env\.terrain\.columns.*did you mean 'stairs_up'"):
        generate_terrain(_cfg(columns=("stairs_upp",), seed=0))
    with pytest.raises(ConfigError, match=r"--env\.terrain\.tile_size"):
        generate_terrain(_cfg(platform=5.0, seed=0))


def _model_with(terrain, spheres: int = 0) -> mujoco.MjModel:
    spec = mujoco.MjSpec()
    spec.worldbody.add_geom(name="ground", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[1, 1, 1])
    set_terrain(spec, terrain, "ground")
    for _ in range(spheres):
        body = spec.worldbody.add_body()
        body.add_freejoint()
        body.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[0.01, 0, 0], contype=2, conaffinity=1)
    return spec.compile()


def test_height_lookup_matches_mujoco_rays_at_random_points() -> None:
    terrain = generate_terrain(_cfg(seed=1))
    model = _model_with(terrain)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    x0, y0, x1, y1 = terrain.extent
    rng = np.random.default_rng(0)
    points = np.stack((rng.uniform(x0 + 0.01, x1 - 0.01, 300), rng.uniform(y0 + 0.01, y1 - 0.01, 300)), -1)
    top = 10.0
    ray = []
    for x, y in points:
        geom = np.zeros(1, np.int32)
        ray.append(top - mujoco.mj_ray(model, data, np.array([x, y, top]), np.array([0, 0, -1.0]), None, 1, -1, geom))
    lookup = HeightField(terrain).height(torch.tensor(points[:, 0]).float(), torch.tensor(points[:, 1]).float())
    np.testing.assert_allclose(lookup.numpy(), np.array(ray), atol=2e-5)


def test_height_lookup_matches_resting_spheres() -> None:
    """Small spheres dropped on the rough and obstacle tiles come to rest on the looked-up height (+ radius)."""
    terrain = generate_terrain(_cfg(columns=("rough", "obstacles"), num_rows=2, seed=2))
    model = _model_with(terrain, spheres=8)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(1)
    xy = terrain.tile_origins[:, :, :2].reshape(-1, 2).repeat(2, 0) + rng.uniform(-1.5, 1.5, (8, 2))
    hf = HeightField(terrain)
    ground = hf.height(torch.tensor(xy[:, 0]).float(), torch.tensor(xy[:, 1]).float()).numpy()
    qpos = data.qpos.reshape(8, 7)
    qpos[:, :2], qpos[:, 2], qpos[:, 3] = xy, ground + 0.05, 1.0
    for _ in range(300):
        mujoco.mj_step(model, data)
    rest = data.qpos.reshape(8, 7)
    moved = np.linalg.norm(rest[:, :2] - xy, axis=-1)
    under = hf.height(torch.tensor(rest[:, 0]).float(), torch.tensor(rest[:, 1]).float()).numpy()
    flat_enough = moved < 0.05  # a sphere on a steep spot rolls; compare where it came to rest
    np.testing.assert_allclose(rest[flat_enough, 2] - 0.01, under[flat_enough], atol=3e-3)
    assert flat_enough.sum() >= 4


def test_scan_grid_is_legged_gyms() -> None:
    points = scan_grid(1.6, 1.0, 0.1)
    assert points.shape == (187, 2)
    torch.testing.assert_close(points[0], torch.tensor([-0.8, -0.5]))
    torch.testing.assert_close(points[-1], torch.tensor([0.8, 0.5]))


def _curriculum(**kw) -> TerrainCurriculum:
    return TerrainCurriculum(CurriculumCfg(**kw), 6, num_rows=5, num_cols=3, tile_size=8.0,
                             generator=torch.Generator().manual_seed(0))  # fmt: skip


def test_curriculum_promotes_demotes_and_restarts_past_the_top() -> None:
    cur = _curriculum(max_init_level=0, promote_distance=0.5, demote_fraction=0.5)
    assert cur.levels.tolist() == [0] * 6 and cur.columns.tolist() == [0, 1, 2, 0, 1, 2]
    cur.levels[:] = torch.tensor([2, 2, 2, 0, 4, 2])
    ids = torch.arange(6)
    walked = torch.tensor([4.1, 3.9, 1.9, 0.0, 5.0, 2.1])  # promote beyond 4 m (half of 8 m)
    commanded = torch.tensor([20.0, 20.0, 4.0, 4.0, 20.0, 4.0])  # demote below half of these
    g = torch.Generator().manual_seed(5)
    cur.update(ids, walked, commanded, g)
    assert cur.levels[:4].tolist() == [3, 1, 1, 0] and cur.levels[5] == 2  # up, down, down, floor, stay
    assert 0 <= int(cur.levels[4]) < 5  # past the top: a random level
    cur.update(torch.tensor([0]), torch.tensor([0.0]), torch.tensor([0.0]), g)  # standing still: stays
    assert int(cur.levels[0]) == 3
    assert float(cur.mean_level()) == pytest.approx(cur.levels.float().mean().item())


def test_curriculum_thresholds_follow_the_config_and_off_keeps_levels() -> None:
    strict = _curriculum(promote_distance=0.9, demote_fraction=0.9, max_init_level=4)
    before = strict.levels.clone()
    g = torch.Generator().manual_seed(0)
    strict.update(torch.arange(6), torch.full((6,), 5.0), torch.full((6,), 5.0), g)  # 5 m: < 7.2 m, > 4.5 m
    assert torch.equal(strict.levels, before)
    off = _curriculum(enabled=False)
    spread = off.levels.clone()
    off.update(torch.arange(6), torch.full((6,), 100.0), torch.zeros(6), g)
    assert torch.equal(off.levels, spread)
    many = TerrainCurriculum(CurriculumCfg(enabled=False), 400, 5, 3, 8.0, torch.Generator().manual_seed(0))
    assert set(many.levels.tolist()) == set(range(5))  # off: every level from the start


def test_every_tile_type_is_registered() -> None:
    assert set(TerrainCfg().columns) == set(TILE_TYPES)
