"""MuJoCo Warp backend on the CPU: parity with C MuJoCo, interface, resets, bad input, state exchange, --sim warp.

Cost (with test_backend_factory.py, measured on 2 shared cores): the first run on a machine compiles MuJoCo Warp's
kernels for SO-101 and Go2 (~65 s of CPU); later runs load them from Warp's kernel cache (``~/.cache/warp`` or
``$WARP_CACHE_PATH``) and take ~16 s of CPU. The SO-101 tests share one model so that its kernels compile once.
"""

from __future__ import annotations

import importlib.util
import os

import mujoco
import pytest
import torch

from rslkit.envs.mujoco import ModelNotFoundError, MujocoBackend, MujocoBackendCfg
from rslkit.envs.mujoco.models import so101_spec

try:
    _SPEC = so101_spec()
except ModelNotFoundError as err:  # only the model files may be missing; anything else must fail loudly
    pytest.skip(f"SO-101 model missing ({err})", allow_module_level=True)
if importlib.util.find_spec("mujoco_warp") is None and not os.environ.get("CI"):  # CI installs it: fail there
    pytest.skip("MuJoCo Warp not installed (pip install -e '.[warp]')", allow_module_level=True)

from rslkit.envs.mujoco.warp_backend import WarpBackend, WarpBackendCfg  # noqa: E402

# CI runs these on the CPU; on a GPU machine run them again with RSLKIT_WARP_TEST_DEVICE=cuda.
DEVICE = os.environ.get("RSLKIT_WARP_TEST_DEVICE", "cpu")

# SO-101 plus an acceleration-stage sensor (the shoulder actuator's force), whose value after a step must follow C
# MuJoCo's rule: the last substep's value, not zero.
_SPEC.add_sensor(
    name="pan_force",
    type=mujoco.mjtSensor.mjSENS_ACTUATORFRC,
    objtype=mujoco.mjtObj.mjOBJ_ACTUATOR,
    objname="shoulder_pan",
)
MODEL = _SPEC.compile()
DECIMATION = 10

# Parity tolerance after a few control steps from the same state with the same controls. Warp computes in float32
# (eps 1.2e-7), C MuJoCo in float64: after 10 SO-101 control steps (100 substeps of 2 ms, joints pushed into their
# limits) the measured gaps are 5e-7 rad (qpos) and 5e-6 rad/s (qvel, which also carries the constraint solver's
# float32 tolerance); on Go2 with floor contacts 4e-7 m and 2e-5 rad/s. The bounds are ~20x those: far below
# anything a task sees (1e-5 rad moves the SO-101 gripper by ~4 um), far above round-off.
ATOL = {"qpos": 1e-5, "qvel": 5e-4, "site_xpos": 1e-5, "sensordata": 5e-4}


def _random_ctrl(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    low = torch.as_tensor(MODEL.actuator_ctrlrange[:, 0])
    high = torch.as_tensor(MODEL.actuator_ctrlrange[:, 1])
    return low + (high - low) * torch.rand(n, MODEL.nu, generator=g, dtype=torch.float64)


def _pair(n: int) -> tuple[MujocoBackend, WarpBackend]:
    """A C backend and a Warp backend, both at the same random joint state."""
    c = MujocoBackend(MODEL, n, MujocoBackendCfg(sim_threads=1, decimation=DECIMATION))
    start = _random_ctrl(n, 0)
    c.set_joint_state(torch.arange(n), start, ctrl=start)
    w = WarpBackend(MODEL, n, WarpBackendCfg(decimation=DECIMATION), device=DEVICE)
    w.set_state(c.get_state())
    return c, w


def _fields(b) -> dict[str, torch.Tensor]:
    return {
        "qpos": b.qpos.cpu().double(),
        "qvel": b.qvel.cpu().double(),
        "site_xpos": b.site_xpos().cpu().double(),
        "sensordata": b.sensordata().cpu().double(),
    }


@pytest.mark.slow
def test_trajectory_matches_c_mujoco() -> None:
    c, w = _pair(4)
    for name, value in _fields(w).items():  # same start, derived fields included
        torch.testing.assert_close(value, _fields(c)[name], rtol=0, atol=1e-6, msg=name)
    force = w.sensor_slice("pan_force")
    for seed in range(1, 11):
        ctrl = _random_ctrl(4, seed)  # full control range: drives joints into their limits (constraint rows)
        c.step(ctrl)
        w.step(ctrl)
        for name, value in _fields(w).items():
            torch.testing.assert_close(value, _fields(c)[name], rtol=0, atol=ATOL[name], msg=f"{name}, step {seed}")
    assert bool((w.sensordata()[:, force].abs() > 0.01).all())  # acceleration-stage sensor kept, as in C
    assert w.qpos.dtype == torch.float32 and w.qpos.device.type == torch.device(DEVICE).type
    assert w.xpos().shape == (4, MODEL.nbody, 3) and w.site_xpos().shape == (4, MODEL.nsite, 3)


def _go2_pair(n: int):
    """Go2 standing 0.30 m above the floor in a C and a Warp backend, with the contact solver run to convergence."""
    try:
        from rslkit.envs.mujoco.go2 import Go2ModelCfg, load_go2
        from rslkit.envs.tasks.go2_flat import HOME
    except ImportError as err:
        pytest.skip(f"Go2 model code missing ({err})")
    try:
        model = load_go2(Go2ModelCfg(solver_iterations=100))
    except ModelNotFoundError as err:
        pytest.skip(f"Go2 model missing ({err})")
    model.opt.tolerance = model.opt.ls_tolerance = 1e-10
    home = torch.tensor(HOME, dtype=torch.float64)
    c = MujocoBackend(model, n, MujocoBackendCfg(sim_threads=1, decimation=4))
    q = torch.as_tensor(model.qpos0, dtype=torch.float64).repeat(n, 1)
    q[:, 2], q[:, 7:] = 0.30, home
    c.set_joint_state(torch.arange(n), q, ctrl=q[:, 7:])
    w = WarpBackend(model, n, WarpBackendCfg(decimation=4), device=DEVICE)
    w.set_state(c.get_state())
    return model, c, w, home


def _step_both(c: MujocoBackend, w: WarpBackend, home: torch.Tensor, steps: int) -> None:
    g = torch.Generator().manual_seed(0)
    for step in range(steps):
        ctrl = home + 0.125 * torch.randn(c.num_envs, c.nu, generator=g, dtype=torch.float64)
        c.step(ctrl)
        w.step(ctrl)
        for name, value in _fields(w).items():
            torch.testing.assert_close(value, _fields(c)[name], rtol=0, atol=ATOL[name], msg=f"{name}, step {step}")


@pytest.mark.slow
def test_go2_contacts_match_c_mujoco() -> None:
    """Go2 dropped on the floor (foot contacts, implicitfast, contact and torque sensors) from the same state.

    With the task's 8 Newton iterations both solvers stop before convergence along different paths and joint
    velocities differ by up to ~3e-2 rad/s after the first contact step; solved to convergence (100 iterations,
    tolerance 1e-10) the backends agree to float32 round-off (measured 4e-7 m, 2e-5 rad/s after 5 steps), which is
    what this test holds them to, with ~20x margin.
    """
    _, c, w, home = _go2_pair(4)
    _step_both(c, w, home, 5)
    feet = torch.cat([c.sensordata()[:, c.sensor_slice(f"{leg}_foot_contact")] for leg in ("FL", "FR", "RL", "RR")], 1)
    assert bool((feet > 0.5).any())  # the feet did touch the floor
    assert bool((c.qpos[:, 2] < 0.28).all())  # and the trunk sank from 0.30 m onto its legs


@pytest.mark.slow
def test_per_env_friction_and_mass_match_c_mujoco() -> None:
    """Domain randomization (go2-flat's): per-env foot friction and trunk mass, then set_const, on both backends."""
    model, c, w, home = _go2_pair(4)
    trunk = model.body("base").id
    feet = [model.geom(leg).id for leg in ("FL", "FR", "RL", "RR")]
    friction = torch.tensor([0.3, 0.6, 0.9, 1.2], dtype=torch.float64)
    mass = float(model.body_mass[trunk]) + torch.tensor([-1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    c_friction, c_mass = c.batch.expand("geom_friction"), c.batch.expand("body_mass")
    w_friction, w_mass = w.expand_model_field("geom_friction"), w.expand_model_field("body_mass")
    assert w_friction.shape == (4, model.ngeom, 3) and w_mass.shape == (4, model.nbody)
    for geom in feet:
        c_friction[:, geom, 0] = friction.numpy()
        w_friction[:, geom, 0] = friction
    c_mass[:, trunk] = mass.numpy()
    w_mass[:, trunk] = mass
    c.batch.set_const()
    w.set_const()
    _step_both(c, w, home, 5)
    assert float(c.qpos[:, 2].max() - c.qpos[:, 2].min()) > 1e-4  # the envs did come apart
    with pytest.raises(ValueError, match="cannot give model field 'nbody'"):
        w.expand_model_field("nbody")


@pytest.mark.slow
def test_contact_overflow_is_named_and_put_back() -> None:
    """Too little contact capacity (nconmax) drops contacts: the step raises and the envs keep their state."""
    model, c, _, home = _go2_pair(2)
    w = WarpBackend(model, 2, WarpBackendCfg(decimation=4, nconmax=1), device=DEVICE)  # 4 feet need 4 per env
    w.set_state(c.get_state())
    qpos = w.qpos.clone()
    with pytest.raises(RuntimeError, match=r"capacity in env indices \[0, 1\].*nconmax"):
        for _ in range(10):
            qpos = w.qpos.clone()
            w.step(home.repeat(2, 1))
    assert torch.equal(w.qpos, qpos)


def test_state_moves_between_backends() -> None:
    c, w = _pair(3)
    c.step(_random_ctrl(3, 1))
    w.set_state(c.get_state())  # C -> Warp: the same mjSTATE_INTEGRATION layout, rounded to float32
    assert torch.equal(w.get_state().cpu(), c.get_state().float())
    w.step(_random_ctrl(3, 2))
    c2 = MujocoBackend(MODEL, 3, MujocoBackendCfg(sim_threads=1, decimation=DECIMATION))
    c2.set_state(w.get_state())  # Warp -> C
    assert torch.equal(c2.get_state(), w.get_state().cpu().double())
    torch.testing.assert_close(c2.site_xpos(), w.site_xpos().cpu().double(), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="same model and num_envs"):
        w.set_state(torch.zeros(2, c.state.shape[1]))


def test_state_view_writes_take_effect_at_the_next_call() -> None:
    """A task's load_state_dict copies into ``backend.state`` and calls ``forward`` (the C backend's pattern)."""
    c, w = _pair(2)
    saved = w.state.clone()
    w.step(_random_ctrl(2, 1))
    assert not torch.equal(w.state, saved)
    w.state.copy_(saved)
    w.forward()
    assert torch.equal(w.get_state(), saved)
    torch.testing.assert_close(w.site_xpos().cpu().double(), c.site_xpos(), rtol=0, atol=1e-6)


def test_reset_and_set_joint_state_touch_only_given_envs() -> None:
    w = WarpBackend(MODEL, 4, WarpBackendCfg(decimation=DECIMATION), device=DEVICE)
    w.step(_random_ctrl(4, 0))
    before = w.get_state()
    q = torch.full((2, MODEL.nq), 0.1, dtype=torch.float64)
    w.set_joint_state(torch.tensor([1, 3]), q, ctrl=q[:, : MODEL.nu])
    assert torch.equal(w.state[[0, 2]], before[[0, 2]])
    assert torch.equal(w.qpos[[1, 3]].cpu(), q.float()) and bool((w.qvel[[1, 3]] == 0).all())
    w.reset(torch.tensor([0]))
    torch.testing.assert_close(w.qpos[0].cpu(), torch.as_tensor(MODEL.qpos0, dtype=torch.float32))
    assert torch.equal(w.state[2], before[2])
    ref = MujocoBackend(MODEL, 1, MujocoBackendCfg(sim_threads=1))
    ref.set_joint_state(torch.tensor([0]), q[:1], ctrl=q[:1, : MODEL.nu])
    torch.testing.assert_close(w.site_xpos()[1].cpu().double(), ref.site_xpos()[0], rtol=0, atol=1e-6)


def test_bad_controls_raise_and_leave_state_intact() -> None:
    w = WarpBackend(MODEL, 6, WarpBackendCfg(decimation=DECIMATION), device=DEVICE)
    w.step(_random_ctrl(6, 0))
    before = w.get_state()
    ctrl = _random_ctrl(6, 1)
    ctrl[2, 0] = float("nan")
    ctrl[4, 3] = float("inf")
    with pytest.raises(ValueError, match=r"Non-finite controls for env indices \[2, 4\]"):
        w.step(ctrl)
    assert torch.equal(w.state, before)
    with pytest.raises(ValueError, match="shape"):
        w.step(torch.zeros(6, MODEL.nu + 1))
    ctrl[2, 0] = ctrl[4, 3] = 0.0
    w.step(ctrl)  # still usable
    assert not torch.equal(w.state, before)


def test_diverging_env_is_named_and_put_back() -> None:
    w = WarpBackend(MODEL, 4, WarpBackendCfg(decimation=DECIMATION), device=DEVICE)
    w.step(_random_ctrl(4, 0))
    w.qvel[1] = 3e38  # float32 overflows to inf within the step
    qpos, qvel = w.qpos.clone(), w.qvel.clone()
    ctrl = _random_ctrl(4, 1)
    with pytest.raises(RuntimeError, match=r"non-finite state in env indices \[1\]"):
        w.step(ctrl)
    assert torch.equal(w.qpos[1], qpos[1]) and torch.equal(w.qvel[1], qvel[1])  # put back (with the new ctrl)
    assert torch.equal(w.ctrl.cpu(), ctrl.float())
    assert not torch.equal(w.qpos[[0, 2, 3]], qpos[[0, 2, 3]])  # the others advanced
    w.reset(torch.tensor([1]))
    w.step(_random_ctrl(4, 2))
    assert bool(torch.isfinite(w.state).all())


def test_bad_config_and_device() -> None:
    with pytest.raises(ValueError, match="decimation"):
        WarpBackend(MODEL, 2, WarpBackendCfg(decimation=0))
    with pytest.raises(ValueError, match="num_envs"):
        WarpBackend(MODEL, 0)
    with pytest.raises(ValueError, match="'cpu' or 'cuda"):
        WarpBackend(MODEL, 2, device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            WarpBackend(MODEL, 2, device="cuda")


def test_so101_reach_on_warp_follows_mujoco() -> None:
    """The task switches backend with its ``sim`` field and sees the same observations within float32 round-off."""
    from rslkit.envs.tasks.so101_reach import SO101ReachCfg, SO101ReachTask

    envs = {
        "mujoco": SO101ReachTask(SO101ReachCfg(num_envs=4, sim_threads=1)),
        "warp": SO101ReachTask(SO101ReachCfg(num_envs=4, sim="warp"), device=DEVICE),
    }
    assert isinstance(envs["warp"].backend, WarpBackend) and isinstance(envs["mujoco"].backend, MujocoBackend)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        actions = torch.rand(4, 5, generator=g) * 2 - 1
        (obs_c, rew_c, *_), (obs_w, rew_w, *_) = (envs[s].step(actions.to(envs[s].device)) for s in envs)
        torch.testing.assert_close(obs_w["policy"].cpu(), obs_c["policy"], rtol=0, atol=1e-4)
        torch.testing.assert_close(rew_w.cpu(), rew_c, rtol=0, atol=1e-3)
    state = envs["warp"].state_dict()  # checkpoints carry the physics across backends
    envs["mujoco"].load_state_dict(state)
    torch.testing.assert_close(envs["mujoco"].ee_pos, envs["warp"].ee_pos.cpu(), rtol=0, atol=1e-6)


@pytest.mark.slow
def test_so101_lift_on_warp_follows_mujoco() -> None:
    """The lift scene (cube, jaw contacts) on both backends: same observations within contact-solver round-off."""
    from rslkit.envs.tasks.so101_lift import SO101LiftCfg, SO101LiftTask

    envs = {
        "mujoco": SO101LiftTask(SO101LiftCfg(num_envs=2, sim_threads=1)),
        "warp": SO101LiftTask(SO101LiftCfg(num_envs=2, sim="warp"), device=DEVICE),
    }
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        actions = torch.rand(2, envs["mujoco"].num_actions, generator=g) * 2 - 1
        (obs_c, *_), (obs_w, *_) = (envs[s].step(actions.to(envs[s].device)) for s in envs)
        torch.testing.assert_close(obs_w["policy"].cpu(), obs_c["policy"], rtol=0, atol=1e-3)


@pytest.mark.slow
def test_train_and_play_cli_sim_flag(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rslkit.cli import play, train

    steps: list[int] = []
    warp_step = WarpBackend.step
    monkeypatch.setattr(WarpBackend, "step", lambda self, ctrl: (steps.append(1), warp_step(self, ctrl))[1])

    args = ["--task", "so101-reach", "--sim", "warp", "--device", DEVICE, "--num_envs", "4", "--max_iterations", "1"]
    runner = train.main([*args, "--agent.num_steps_per_env", "4", "--logdir", str(tmp_path)])
    assert isinstance(runner.env.backend, WarpBackend)
    ckpt = max(tmp_path.rglob("model_*.pt"))
    trained = len(steps)
    play_args = ["--task", "so101-reach", "--checkpoint", str(ckpt), "--episodes", "2", "--device", DEVICE]
    stats = play.main([*play_args, "--sim", "warp"])
    assert stats["episodes"] == 2 and 0.0 <= stats["success_rate"] <= 1.0
    assert trained >= 4 and len(steps) > trained  # both commands stepped MuJoCo Warp


def test_go2_flat_on_warp_follows_mujoco() -> None:
    """go2-flat with its domain randomization (per-env friction and mass) on both backends, same seed."""
    try:
        from rslkit.envs.tasks.go2_flat import Go2FlatCfg, Go2FlatTask
    except ImportError as err:
        pytest.skip(f"go2-flat missing ({err})")
    try:
        envs = {
            "mujoco": Go2FlatTask(Go2FlatCfg(num_envs=4, sim_threads=1)),
            "warp": Go2FlatTask(Go2FlatCfg(num_envs=4, sim="warp"), device=DEVICE),
        }
    except ModelNotFoundError as err:
        pytest.skip(f"Go2 model missing ({err})")
    torch.testing.assert_close(envs["warp"].friction.cpu(), envs["mujoco"].friction)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        actions = 0.5 * torch.randn(4, 12, generator=g)
        (obs_c, rew_c, *_), (obs_w, rew_w, *_) = (envs[s].step(actions.to(envs[s].device)) for s in envs)
        torch.testing.assert_close(obs_w["policy"].cpu(), obs_c["policy"], rtol=0, atol=1e-4)
        torch.testing.assert_close(rew_w.cpu(), rew_c, rtol=0, atol=1e-4)
