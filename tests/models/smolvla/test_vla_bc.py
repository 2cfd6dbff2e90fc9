"""SmolVLA through rslkit's one VLA training path (vla-bc: PretrainRunner + FlowBC + the Euler sampler): a tiny
SmolVLA-architecture policy from scratch and the LeRobot fixture checkpoint fine-tuned on recorded demonstrations
with a camera and two instructions; the flow loss falls, evaluation runs, the result saves in LeRobot's format."""

import pytest
import torch

from rslkit.cli import train
from rslkit.data import record_episodes, write_lerobot_dataset
from rslkit.models.smolvla.policy import SmolVLAPolicy
from rslkit.models.smolvla.settings import SmolVLACfg
from rslkit.models.vla import VLAPolicyCfg
from rslkit.runners.pretrain_runner import PretrainRunner
from rslkit.runners.vla_bc_data import VLABCRunnerCfg
from tests.models.smolvla.fixture_policy import FIXTURES, VLM
from tests.runners.instructed_point import INSTRUCTIONS, InstructedPointEnv, expert


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    env = InstructedPointEnv(num_envs=8, seed=0)
    episodes = record_episodes(env, expert, 8, task=lambda obs: [INSTRUCTIONS[int(g)] for g in obs["goal"]],
                               cameras=["front"])  # fmt: skip
    return write_lerobot_dataset(tmp_path_factory.mktemp("smolvla") / "demos", episodes, fps=10)


def _cfg(dataset, policy: VLAPolicyCfg, iterations: int) -> VLABCRunnerCfg:
    cfg = VLABCRunnerCfg(dataset=str(dataset), policy=policy, logger=(), augment_shift=0, max_iterations=iterations,
                         updates_per_iteration=10, eval_interval=0)  # fmt: skip
    cfg.algorithm.batch_size, cfg.algorithm.learning_rate = 16, 3e-3
    return cfg


def _scratch() -> VLAPolicyCfg:
    settings = SmolVLACfg(max_state_dim=4, max_action_dim=4, tokenizer_max_length=10, expert_width_multiplier=0.5,
                          train_expert_only=False, freeze_vision_encoder=False)  # fmt: skip
    return VLAPolicyCfg(backbone="smolvla", backbone_path=str(VLM), cameras=("front",), image_size=(16, 16),
                        horizon=4, num_inference_steps=3, vlm_layers=2, smolvla=settings)  # fmt: skip


@pytest.mark.slow
def test_a_smolvla_from_scratch_trains_and_evaluates_through_vla_bc(dataset, tmp_path):
    torch.manual_seed(0)
    runner = PretrainRunner(InstructedPointEnv(num_envs=8, seed=1), _cfg(dataset, _scratch(), 6), tmp_path / "run",
                            run_info={"seed": 0})  # fmt: skip
    assert isinstance(runner.policy, SmolVLAPolicy)
    runner.data.load(fresh=True)
    obs, actions, _ = runner.data.batch(32)
    noise, tau = torch.randn(32, 4, 4), torch.rand(32)

    def loss() -> float:
        with torch.no_grad():
            return float(runner.policy.lerobot_loss(runner.policy.normalize_inputs(obs), actions, noise, tau))

    def chunk_error() -> float:  # sampled chunks against the demonstrated ones, fixed initial noise
        with torch.no_grad():
            return float((runner.policy.act_chunk(obs, x0=noise) - actions).abs().mean())

    first, first_error = loss(), chunk_error()
    metrics = runner.learn()
    assert loss() < 0.7 * first, (first, loss())
    assert chunk_error() < 0.85 * first_error, (first_error, chunk_error())  # 0.40 -> 0.26 here
    assert 0.0 <= metrics["Eval/success/0"] <= 1.0 and 0.0 <= metrics["Eval/success/1"] <= 1.0
    saved = runner.policy.save_lerobot(tmp_path / "lerobot")
    assert (saved / "model.safetensors").is_file() and (saved / "policy_preprocessor.json").is_file()


def test_the_lerobot_fixture_checkpoint_fine_tunes_through_vla_bc(dataset, tmp_path):
    """--agent.policy.backbone smolvla --agent.policy.smolvla.pretrained DIR --agent.policy.backbone_path VLM:
    the 2-d robot drives the checkpoint's 6-d state/action (padded to 8), its camera 'front' feeds 'top'."""
    torch.manual_seed(0)
    settings = SmolVLACfg(pretrained=str(FIXTURES / "interleaved_1cam"), camera_map=("front=top",))
    policy = VLAPolicyCfg(backbone="smolvla", backbone_path=str(VLM), cameras=("front",), image_size=(16, 16),
                          horizon=5, num_inference_steps=3, smolvla=settings)  # fmt: skip
    with pytest.warns(UserWarning, match="statistics do not fit this robot"):
        env = InstructedPointEnv(num_envs=4, seed=1)
        runner = PretrainRunner(env, _cfg(dataset, policy, 1), None, run_info={"seed": 0})
    vlm_before = runner.policy.net.vlm_with_expert.vlm.model.text_model.layers[0].self_attn.q_proj.weight.clone()
    runner.learn()
    assert torch.equal(runner.policy.net.vlm_with_expert.vlm.model.text_model.layers[0].self_attn.q_proj.weight,
                       vlm_before)  # fmt: skip
    stats = runner.data.dataset.demos.stats
    assert torch.allclose(runner.policy.action_normalizer.mean, torch.tensor(stats["action"]["mean"]).float())
    chunk = runner.data.chunk_fn(runner.policy)(runner.env.get_observations())
    assert chunk.shape == (4, 5, 2) and torch.isfinite(chunk).all()


def test_train_py_fine_tunes_a_smolvla_from_a_dataset_alone_and_resumes(dataset, tmp_path):
    """``train.py --algo vla-bc --dataset D --agent.policy.backbone smolvla ...`` (no simulator), then --resume."""
    flags = ["--agent.logger=", "--agent.updates_per_iteration", "3", "--agent.algorithm.batch_size", "8",
             "--agent.policy.backbone", "smolvla", "--agent.policy.backbone_path", str(VLM),
             "--agent.policy.smolvla.pretrained", str(FIXTURES / "interleaved_1cam"),
             "--agent.policy.smolvla.camera_map", "front=top", "--agent.policy.cameras", "front",
             "--agent.policy.image_size", "16,16", "--agent.policy.horizon", "5",
             "--agent.policy.num_inference_steps", "3"]  # fmt: skip
    with pytest.warns(UserWarning, match="statistics do not fit this robot"):
        runner = train.main(["--algo", "vla-bc", "--dataset", str(dataset), "--logdir", str(tmp_path),
                             "--max_iterations", "2", *flags])  # fmt: skip
    assert isinstance(runner.policy, SmolVLAPolicy) and runner.iteration == 2
    ckpt = str(runner.log_dir / "model_2.pt")
    with pytest.warns(UserWarning, match="statistics do not fit this robot"):
        resumed = train.main(["--algo", "vla-bc", "--resume", "--checkpoint", ckpt, "--max_iterations", "3"])
    assert resumed.iteration == 3 and isinstance(resumed.policy, SmolVLAPolicy)
