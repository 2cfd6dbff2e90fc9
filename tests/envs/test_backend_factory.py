"""make_backend: names, configs, the error when MuJoCo Warp is missing; --sim on the command line."""

from __future__ import annotations

import sys

import pytest

from rslkit.cli import train
from rslkit.envs.mujoco import ModelNotFoundError, MujocoBackend, MujocoBackendCfg, load_so101, make_backend
from rslkit.envs.mujoco.warp_backend import WarpBackendCfg, import_warp
from rslkit.envs.tasks.pendulum import PendulumCfg
from rslkit.envs.tasks.so101_reach import SO101ReachCfg
from rslkit.recipes.run import apply_sim

try:
    MODEL = load_so101()
except ModelNotFoundError as err:
    pytest.skip(f"SO-101 model missing ({err})", allow_module_level=True)


def test_mujoco_is_the_default() -> None:
    backend = make_backend(MODEL, 2, MujocoBackendCfg(sim_threads=1, decimation=3))
    assert isinstance(backend, MujocoBackend) and backend.cfg.decimation == 3


def test_unknown_backend_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"Unknown physics backend 'wrap'.*mujoco, warp.*Did you mean 'warp'"):
        make_backend(MODEL, 2, sim="wrap")


def test_missing_mujoco_warp_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # import of a None entry raises ImportError
    with pytest.raises(ImportError, match=r"pip install -e '\.\[warp\]'"):
        import_warp()
    with pytest.raises(ImportError, match=r"pip install -e '\.\[warp\]'"):
        make_backend(MODEL, 2, MujocoBackendCfg(decimation=2), sim="warp")


def test_warp_cfg_keeps_the_c_settings() -> None:
    cfg = WarpBackendCfg(sim_threads=3, decimation=4)
    assert isinstance(cfg, MujocoBackendCfg) and cfg.nconmax is None and cfg.cuda_graph


def test_sim_flag_sets_the_env_cfg_or_refuses() -> None:
    cfg = SO101ReachCfg()
    apply_sim(cfg, None, "so101-reach")
    assert cfg.sim == "mujoco"
    apply_sim(cfg, "warp", "so101-reach")
    assert cfg.sim == "warp"
    with pytest.raises(ValueError, match="must be one of mujoco, warp"):
        apply_sim(cfg, "physx", "so101-reach")
    with pytest.raises(ValueError, match=r"task 'pendulum' \(PendulumCfg\) simulates its own physics"):
        apply_sim(PendulumCfg(), "warp", "pendulum")


def test_train_cli_rejects_sim_for_a_task_without_backend(tmp_path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        train.main(["--task", "pendulum", "--sim", "warp", "--logdir", str(tmp_path)])
    assert "--sim applies to MuJoCo tasks" in capsys.readouterr().err
