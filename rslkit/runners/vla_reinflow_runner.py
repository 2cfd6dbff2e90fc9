"""VLA ReinFlow runner: RL fine-tuning of a behaviour-cloned VLA policy in simulation (``--algo vla-reinflow``).

It starts from a vla-bc checkpoint (``--pretrained PATH`` or ``--checkpoint PATH``), takes its policy settings,
EMA weights, text encoder and instruction, and runs ReinFlow's loop (:class:`~rslkit.runners.reinflow_runner.
ChainRunnerBase`) with :class:`~rslkit.algorithms.reinflow_vla.VLAReinFlow`: the actor sees the cameras, the
instruction embedding and the proprioceptive state; the critic reads the simulator's privileged state group
(``critic_group``). Evaluations report success per instruction. The env must render the policy's cameras at its
image size (``--env.cameras``, ``--env.camera_width`` / ``--env.camera_height``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.algorithms.reinflow import make_chain
from rslkit.algorithms.reinflow_vla import VLAReinFlow
from rslkit.envs.camera_groups import camera_group
from rslkit.models.text_encoder import MINILM
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.policy import VLAPolicy
from rslkit.runners.checks import policy_obs_dim
from rslkit.runners.env_instructions import EnvInstructions
from rslkit.runners.reinflow_runner import ChainRunCfg, ChainRunnerBase, load_pretrained
from rslkit.runners.vla_bc_data import VLABCRunnerCfg
from rslkit.utils.config import from_dict
from rslkit.utils.validation import expect

TRAINABLE = ("all", "action_expert")
"""Values of :attr:`VLAReinFlowRunnerCfg.trainable`."""


@dataclass
class VLAReinFlowRunnerCfg(ChainRunCfg):
    """ReinFlow fine-tuning of a VLA policy. CLI: ``--agent.<field>`` (``train.py --pretrained PATH`` sets
    ``pretrained``, a vla-bc checkpoint)."""

    policy: VLAPolicyCfg = field(default_factory=lambda: VLAPolicyCfg(language_dim=384))
    """Filled from the pretrained checkpoint (kept so a checkpoint of this run rebuilds without it). The chain's
    ``K`` (``algorithm.num_inference_steps`` when set) becomes its ``num_inference_steps``: deployment runs the
    fine-tuned K."""
    critic_group: str = "policy"
    """Observation group of the critic: privileged simulator state the deployed policy never reads (asymmetric
    actor-critic; ``so101-pick-place``'s ``policy``: arm, cube and goal)."""
    text_encoder: str = MINILM
    """Sentence encoder of the instructions; filled from the pretrained checkpoint."""
    instruction: str = ""
    """The instruction of every env, for envs without ``instructions``; filled from the pretrained checkpoint when
    empty."""
    trainable: str = "all"
    """What the actor's updates change: ``all`` (the observation tokenizer too: image encoder, state and instruction
    projections) or ``action_expert`` (the tokenizer keeps its behaviour-cloned weights; the action expert and the
    noise net train, as pi_RL's Flow-Noise fine-tunes a VLA's action expert)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the run cannot start with."""
        super().check()
        expect(bool(self.critic_group), "critic_group", "must name an observation group (e.g. policy)")
        expect(self.trainable in TRAINABLE, "trainable", f"must be one of {TRAINABLE}, got {self.trainable!r}")


@dataclass
class VLAPretrained:
    """What a vla-bc checkpoint gives the fine-tuning run."""

    policy: VLAPolicyCfg
    text_encoder: str
    instruction: str
    weights: dict[str, torch.Tensor]
    """The EMA policy's state dict (the deployed vla-bc policy)."""


def load_vla_pretrained(path: str | Path, device: torch.device) -> VLAPretrained:
    """Policy settings, text encoder, instruction and EMA weights of a vla-bc checkpoint.

    Raises:
        ValueError: when the checkpoint was not written by vla-bc.
    """
    hint = "; a flow-bc policy is fine-tuned with --algo reinflow"
    agent, weights = load_pretrained(path, device, VLABCRunnerCfg, "vla-reinflow", hint)
    policy = from_dict(VLAPolicyCfg, agent["policy"])
    return VLAPretrained(policy, agent.get("text_encoder", MINILM), agent.get("instruction", ""), weights)


class VLAReinFlowRunner(ChainRunnerBase[VLAReinFlowRunnerCfg]):
    """Fine-tunes a VLA policy with ReinFlow and an asymmetric critic (same interface as the other runners).

    Args:
        env: the per-step environment, rendering the policy's cameras.
        cfg: run config.
        log_dir: run directory; None for no files.
        device: training device.
        dist_info: runs in one process.
        run_info: extra checkpoint entries (task name, env config).

    Raises:
        ValueError: a pretrained checkpoint that is not vla-bc's or does not fit the env, a camera the env does not
            render (or at another size), a missing state or critic group.
    """

    algorithm_name = "vla-reinflow"
    pretrained_algorithm = VLABCRunnerCfg.ALGORITHM

    instructions: EnvInstructions | None = None
    """The instruction source of a policy that reads language (None: it reads none)."""

    def _build(self, pretrained: str) -> None:
        """Policy (from the vla-bc checkpoint ``pretrained`` when given), chain, algorithm and loop state."""
        self._build_from(load_vla_pretrained(pretrained, self.device) if pretrained else None)

    def _build_from(self, pretrained: VLAPretrained | None) -> None:
        """:meth:`_build` with the checkpoint's contents."""
        c, env = self.cfg, self.env
        if pretrained is not None:
            c.policy, c.text_encoder = pretrained.policy, pretrained.text_encoder
            c.instruction = c.instruction or pretrained.instruction
        obs = env.get_observations().to(self.device)
        # image sizes are checked once the policy is the pretrained one (train.py --checkpoint rebuilds in load())
        self._check_env(obs, sizes=pretrained is not None)
        c.policy.num_inference_steps = c.algorithm.num_inference_steps or c.policy.num_inference_steps
        policy = VLAPolicy(policy_obs_dim(env, c.policy.state_group), env.num_actions, c.policy)
        if pretrained is not None:
            self._take_pretrained(policy, pretrained.weights)
        if c.trainable == "action_expert":
            policy.tokenizer.requires_grad_(False)
        self.instructions = self._instructions() if c.policy.language_dim > 0 else None
        chain = make_chain(policy, c.algorithm)
        alg = VLAReinFlow(chain, c.algorithm, c.num_steps_per_env, self._actor_obs(obs), c.critic_group, self.device)
        self._set_algorithm(alg, obs, initialized=pretrained is not None)

    def _instructions(self) -> EnvInstructions:
        """The instruction source of the policy's encoder (the current one when it fits: its cache is kept)."""
        c, old = self.cfg, self.instructions
        wanted = (c.text_encoder, c.policy.language_dim, c.instruction)
        if old is not None and (old.text_encoder, old.language_dim, old.instruction) == wanted:
            return old
        return EnvInstructions(self.env, c.text_encoder, c.policy.language_dim, self.device, c.instruction)

    def _check_env(self, obs: TensorDict, sizes: bool = True) -> None:
        """Raise ``ValueError`` for a camera the env does not render (at the policy's size, with ``sizes``), or a
        missing critic group."""
        c = self.cfg.policy
        h, w = c.image_size
        for cam in c.cameras:
            group = camera_group(cam)
            if group not in obs.keys():
                raise ValueError(
                    f"The VLA policy reads camera '{cam}', which the env does not render: pass --env.cameras "
                    f"{','.join(c.cameras)} (the task's vla-reinflow recipe sets it)."
                )
            got = tuple(obs[group].shape[1:3])
            if sizes and got != (h, w):
                raise ValueError(
                    f"Camera '{cam}' renders {got[0]}x{got[1]}, the policy takes {h}x{w}: pass --env.camera_height "
                    f"{h} --env.camera_width {w}."
                )
        if self.cfg.critic_group not in obs.keys():
            raise ValueError(
                f"The critic reads the observation group '{self.cfg.critic_group}', which the env lacks (have "
                f"{sorted(obs.keys())}): set --agent.critic_group."
            )

    def _start_learning(self) -> None:
        super()._start_learning()
        self._check_env(self._obs)

    @property
    def policy(self) -> VLAPolicy:
        """The VLA policy being fine-tuned (deployed with the deterministic ODE at the chain's K)."""
        policy = self.alg.chain.policy
        assert isinstance(policy, VLAPolicy)
        return policy

    def _actor_obs(self, obs: TensorDict) -> TensorDict:
        """``obs`` with the instruction embedding (for policies that read one)."""
        return self.instructions.add_to(obs) if self.instructions is not None else obs

    def _act_chunk(self, obs: TensorDict, num_steps: int) -> torch.Tensor:
        """Chunks from the env's observation groups and each env's instruction embedding."""
        return self.policy.act_chunk(self._actor_obs(obs), num_steps=num_steps)

    # ------------------------------------------------------------------ checkpoints
    def _load_pretrained(self, path: str | Path, data: dict[str, Any], weights_only: bool) -> dict[str, Any]:
        """With ``weights_only``, start from the vla-bc checkpoint ``data`` (``train.py --algo vla-reinflow
        --checkpoint RUN/model_N.pt``): the run is rebuilt around its policy.

        Raises:
            ValueError: without ``weights_only`` (a vla-bc checkpoint cannot be resumed as vla-reinflow).
        """
        if not weights_only:
            return super()._load_pretrained(path, data, weights_only)
        self.cfg.pretrained = self._pretrained_from = str(path)
        self._build_from(load_vla_pretrained(path, self.device))
        return data
