"""Write a :class:`~rslkit.envs.terrain.generator.Terrain` into a MuJoCo model as a heightfield (``hfield``)."""

from __future__ import annotations

import mujoco

from rslkit.envs.terrain.generator import Terrain

HFIELD_NAME = "terrain"
BASE_DEPTH = 1.0
"""Depth (metres) of the solid box MuJoCo puts under the lowest point of the heightfield."""


def set_terrain(spec: mujoco.MjSpec, terrain: Terrain, geom: str) -> mujoco.MjsGeom:
    """Turn the world geom named ``geom`` (e.g. a robot model's floor plane) into ``terrain``'s heightfield.

    Keeping the geom (its name, contact settings, material) keeps everything that refers to it, such as contact
    sensors against the floor. MuJoCo stores heights normalised to ``[0, 1]`` times an elevation range; the geom is
    placed so that world heights equal ``terrain.heights``.

    Raises:
        ValueError: ``spec`` has no geom named ``geom``.
    """
    target = spec.geom(geom)
    if target is None:
        raise ValueError(f"The model has no geom '{geom}' to turn into the terrain.")
    heights = terrain.heights
    ny, nx = heights.shape
    low, high = float(heights.min()), float(heights.max())
    elevation = max(high - low, 1e-3)
    half_x = 0.5 * (nx - 1) * terrain.horizontal_scale
    half_y = 0.5 * (ny - 1) * terrain.horizontal_scale
    hfield = spec.add_hfield(name=HFIELD_NAME, nrow=ny, ncol=nx, size=[half_x, half_y, elevation, BASE_DEPTH])
    hfield.userdata = ((heights - low) / elevation).ravel().tolist()
    target.type = mujoco.mjtGeom.mjGEOM_HFIELD
    target.hfieldname = HFIELD_NAME
    target.pos = [terrain.origin[0] + half_x, terrain.origin[1] + half_y, low]
    return target
