"""VLA behaviour cloning end to end: scripted demos with a camera and two instructions -> LeRobotDataset (video,
tasks) -> PretrainRunner -> success per instruction in the env, checkpoint resume and ONNX export."""

import pytest
import torch

from rslkit.data import record_episodes, write_lerobot_dataset
from rslkit.deploy.export import export_policy
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.models.vla import VLAPolicyCfg
from rslkit.runners.pretrain_runner import PretrainRunner
from rslkit.runners.vla_bc_data import VLABCRunnerCfg
from rslkit.utils.validation import ConfigError
from tests.runners.instructed_point import INSTRUCTIONS, InstructedPointEnv, expert


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    env = InstructedPointEnv(num_envs=16, seed=0)
    episodes = record_episodes(
        env, expert, 48, task=lambda obs: [INSTRUCTIONS[int(g)] for g in obs["goal"]], cameras=["front"]
    )
    root = write_lerobot_dataset(tmp_path_factory.mktemp("vla") / "demos", episodes, fps=10)
    return root


@pytest.fixture(scope="module")
def dataset_with_state(tmp_path_factory):
    """The same demonstrations with the point's position also stored as observation.environment_state."""
    env = InstructedPointEnv(num_envs=16, seed=0)
    episodes = record_episodes(env, expert, 48, task=lambda obs: [INSTRUCTIONS[int(g)] for g in obs["goal"]],
                               cameras=["front"], env_state_group="policy")  # fmt: skip
    return write_lerobot_dataset(tmp_path_factory.mktemp("vla") / "demos", episodes, fps=10)


def _cfg(dataset, **kw) -> VLABCRunnerCfg:
    policy = VLAPolicyCfg(cameras=("front",), image_size=(16, 16), language_dim=384, horizon=4, d_model=32,
                          num_heads=4, num_layers=2, cnn_channels=(8, 16), token_grid=2, time_embed_dim=16)  # fmt: skip
    settings = dict(logger=(), augment_shift=1, max_iterations=12, updates_per_iteration=25, eval_interval=0)
    cfg = VLABCRunnerCfg(dataset=str(dataset), policy=policy, **{**settings, **kw})
    cfg.algorithm.batch_size, cfg.algorithm.learning_rate = 64, 2e-3
    return cfg


def test_vla_runner_learns_both_instructions_and_resumes(dataset, tmp_path):
    torch.manual_seed(0)
    env = InstructedPointEnv(num_envs=32, seed=1)
    runner = PretrainRunner(env, _cfg(dataset), tmp_path / "run", run_info={"seed": 0})
    metrics = runner.learn()
    # the expert always succeeds; the clone must follow both instructions, with margin for any CPU
    assert metrics["Eval/success/0"] >= 0.6 and metrics["Eval/success/1"] >= 0.6, metrics
    # receding horizon: replanning after 2 of the 4 actions of each chunk follows the instructions as well
    runner.cfg.execute_steps = 2
    replanned = runner.evaluate()
    assert replanned["Eval/success/0"] >= 0.6 and replanned["Eval/success/1"] >= 0.6, replanned
    runner.cfg.execute_steps = 0
    ckpt = tmp_path / "run" / "model_12.pt"
    assert ckpt.exists()
    resumed = PretrainRunner(InstructedPointEnv(num_envs=32, seed=1), _cfg(dataset), None, run_info={"seed": 0})
    resumed.load(ckpt)
    assert resumed.iteration == 12
    for a, b in zip(runner.policy.state_dict().values(), resumed.policy.state_dict().values()):
        torch.testing.assert_close(a, b)
    # the deployed policy exports with the instruction statistics inside the graph
    export_policy(runner.policy, tmp_path / "vla.onnx", "vla-bc")
    obs = env.get_observations()
    with_text = runner.data.instructions.add_to(obs)
    noise = torch.randn(32, 4, 2)
    onnx_in = {"policy": obs["policy"].numpy(), "instruction": with_text["instruction"].numpy(),
               "camera_front": obs["camera_front"].numpy()}  # fmt: skip
    got = OnnxPolicy(tmp_path / "vla.onnx")(onnx_in, noise.numpy())
    with torch.no_grad():
        expected = runner.policy.act_chunk(with_text, noise)
    assert abs(got - expected.numpy()).max() < 1e-4


def test_vla_runner_refuses_what_it_cannot_train_on(dataset, tmp_path):
    env = InstructedPointEnv(num_envs=4)
    with pytest.raises(ConfigError, match="execute_steps.*policy.horizon=4"):
        PretrainRunner(env, _cfg(dataset, execute_steps=5), None)
    runner = PretrainRunner(env, _cfg(dataset, max_iterations=1), None)
    runner.cfg.policy.cameras = ("wrist",)
    with pytest.raises(ValueError, match="has no camera 'wrist'"):
        runner.load_dataset()
    runner = PretrainRunner(env, _cfg(dataset, max_iterations=1), None)
    runner.cfg.policy.image_size = (32, 32)
    with pytest.raises(ValueError, match="image_size 16,16"):
        runner.load_dataset()
    obs = env.get_observations().exclude("goal")
    with pytest.raises(ValueError, match="--agent.instruction"):
        runner.data.instructions(obs)
    runner.data.instructions.instruction = INSTRUCTIONS[0]  # what --agent.instruction sets
    assert runner.data.instructions(obs).shape == (4, 384)


def test_vla_runner_trains_a_state_probe_beside_the_policy_and_resumes_it(dataset, dataset_with_state, tmp_path):
    torch.manual_seed(0)
    env = InstructedPointEnv(num_envs=8, seed=1)
    runner = PretrainRunner(env, _cfg(dataset_with_state, aux_state="policy", max_iterations=4), tmp_path / "run")
    runner.load_dataset()
    probe = runner.alg.probe
    assert probe is not None and probe.state_dim == 2
    obs, _, aux = runner.data.batch(256)
    assert aux is not None and aux.shape == (256, 2)

    def probe_loss() -> float:
        with torch.no_grad():
            return float(probe.loss(runner.alg.policy.conditioning(runner.alg.policy.normalize_inputs(obs)), aux))

    before = probe_loss()
    metrics = runner.learn()
    assert "Loss/aux_state" in metrics and probe_loss() < 0.2 * before, (before, probe_loss())
    resumed = PretrainRunner(env, _cfg(dataset_with_state, aux_state="policy", max_iterations=4), None)
    resumed.load(tmp_path / "run" / "model_4.pt")
    assert resumed.alg.probe is not None
    for a, b in zip(probe.state_dict().values(), resumed.alg.probe.state_dict().values()):
        torch.testing.assert_close(a, b)
    # the deployed policy is a plain VLA policy: a run without the probe takes its weights
    plain = PretrainRunner(env, _cfg(dataset_with_state, max_iterations=4), None)
    plain.load(tmp_path / "run" / "model_4.pt", weights_only=True)
    # a dataset without the state, or a group of another size, is refused with what to record
    missing = PretrainRunner(env, _cfg(dataset, aux_state="policy", max_iterations=1), None)
    with pytest.raises(ValueError, match="--env_state_group policy"):
        missing.load_dataset()
    with pytest.raises(ValueError, match="aux_state has no observation group 'nope'"):
        PretrainRunner(env, _cfg(dataset_with_state, aux_state="nope", max_iterations=1), None)


def test_the_state_probe_regresses_the_columns_it_is_given(dataset_with_state):
    env = InstructedPointEnv(num_envs=4, seed=1)
    runner = PretrainRunner(env, _cfg(dataset_with_state, aux_state="policy", aux_state_columns="1"), None)
    runner.load_dataset()
    assert runner.alg.probe is not None and runner.alg.probe.state_dim == 1
    obs, _, aux = runner.data.batch(8)
    assert aux is not None
    torch.testing.assert_close(aux[:, 0], obs["policy"][:, 1])  # the recorded state is the point's position
    with pytest.raises(ValueError, match="outside the state's 2 columns"):
        PretrainRunner(env, _cfg(dataset_with_state, aux_state="policy", aux_state_columns="0:5"), None)
