"""``vla-bc``: a :class:`~rslkit.models.vla.VLAPolicy` cloned from a LeRobotDataset with camera videos and
language tasks.

The env must provide the policy's state group and its ``camera_<name>`` groups (``--env.cameras``), and an
instruction per env: ``env.instructions`` (strings) with an observation group ``goal`` holding each env's index
into them (``so101-pick-place``), or one fixed ``agent.instruction`` for all envs. Instructions are embedded with
the sentence encoder ``agent.text_encoder`` (MiniLM from its PyPI wheel by default; never downloaded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from rslkit.algorithms.flow_bc import FlowBC
from rslkit.data.checks import check_matches_env
from rslkit.data.demonstrations import ENV_STATE_KEY, Demonstrations
from rslkit.data.lerobot_cameras import camera_name, dataset_cameras
from rslkit.data.lerobot_meta import read_info
from rslkit.data.lerobot_reader import read_lerobot_dataset
from rslkit.data.vla_dataset import VLAChunkDataset, random_shift
from rslkit.envs.camera_groups import camera_group
from rslkit.envs.columns import select_state_columns
from rslkit.envs.vec_env import VecEnv
from rslkit.models.smolvla.policy import SmolVLAPolicy
from rslkit.models.text_encoder import MINILM
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.policy import INSTRUCTION_GROUP, VLAPolicy
from rslkit.models.vla.state_probe import StateProbe
from rslkit.runners.bc_data import BCData, BCRunCfg
from rslkit.runners.bc_validation import ValBatch, evenly_spaced
from rslkit.runners.checks import policy_obs_dim
from rslkit.runners.env_instructions import EnvInstructions
from rslkit.utils.validation import expect


@dataclass
class VLABCRunnerCfg(BCRunCfg):
    """VLA behaviour cloning run. CLI: ``--agent.<field>`` (``train.py --dataset PATH`` sets ``dataset``, a
    LeRobotDataset v3.0 directory with the policy's cameras and a task per episode)."""

    ALGORITHM: ClassVar[str] = "vla-bc"
    policy: VLAPolicyCfg = field(default_factory=lambda: VLAPolicyCfg(language_dim=384))
    text_encoder: str = MINILM
    """Sentence encoder of the instructions (``minilm`` or a local ``transformers`` directory); its embedding size
    must be ``policy.language_dim``."""
    instruction: str = ""
    """The instruction of every env, for envs without ``instructions`` (empty: the env must provide them)."""
    augment_shift: int = 4
    """Random shifts of up to this many pixels per camera image in training (0: off)."""
    aux_state: str = ""
    """Env observation group recorded as the dataset's ``observation.environment_state`` (``python -m rslkit.record
    --env_state_group G``): BC then also regresses it from the observation tokens (a
    :class:`~rslkit.models.vla.state_probe.StateProbe`, weight ``algorithm.aux_state_coef``), so the image encoder
    learns where the objects are. A training aid: the policy's inputs and its export do not change. Empty: off."""
    aux_state_columns: str = ""
    """The columns of ``aux_state`` the probe regresses: indices, ``start:stop`` ranges and globs over the group's
    ``observation_names`` (``cube.*,cube_minus_grasp_point.*``); empty: all. Columns that the state input or a
    moving arm already give away (joint positions, the goal) dilute the signal for the image encoder."""

    def check(self) -> None:
        """:meth:`BCRunCfg.check`, the chunk execution against the policy's horizon, the augmentation and a
        language input."""
        super().check()
        self.check_execution(self.policy.horizon)
        shift = self.augment_shift
        expect(isinstance(shift, int) and shift >= 0, "augment_shift", f"must be an integer >= 0, got {shift}")
        expect(
            self.policy.language_dim > 0 or self.policy.backbone == "smolvla",  # SmolVLA reads token ids
            "policy.language_dim",
            "must be > 0: a VLA policy reads instructions",
        )

    def make_data(self, env: VecEnv, device: torch.device, seed: int) -> VLABCData:
        """A :class:`VLABCData` of this config."""
        return VLABCData(env, self, device, seed)


def make_vla_policy(env: VecEnv, cfg: VLABCRunnerCfg) -> VLAPolicy:
    """The policy a vla-bc run trains: sized by the env's (or the dataset spec's) state group and actions; a
    :class:`~rslkit.models.smolvla.policy.SmolVLAPolicy` for ``--agent.policy.backbone smolvla``.

    Raises:
        ValueError: SmolVLA with ``--agent.aux_state`` (it has no observation tokens to probe).
    """
    state_dim = policy_obs_dim(env, cfg.policy.state_group)
    if cfg.policy.backbone != "smolvla":
        return VLAPolicy(state_dim, env.num_actions, cfg.policy)
    if cfg.aux_state:
        raise ValueError("--agent.aux_state probes observation tokens, which SmolVLA has not: leave it empty.")
    return SmolVLAPolicy(state_dim, env.num_actions, cfg.policy)


def check_dataset_cameras(dataset: str | Path, cameras: tuple[str, ...]) -> None:
    """Refuse a dataset without one of the policy's cameras, naming the flag that chooses them.

    Raises:
        ValueError: a camera of ``cameras`` the dataset's ``meta/info.json`` does not declare.
    """
    available = dataset_cameras(read_info(Path(dataset))["features"])
    for cam in cameras:
        if camera_name(cam) not in available:
            raise ValueError(
                f"Dataset '{dataset}' has no camera '{cam}' that the policy reads (--agent.policy.cameras "
                f"{','.join(cameras)}); its cameras are {sorted(available) or 'none'}: set --agent.policy.cameras to "
                "some of them, or record the camera (python -m rslkit.record --camera NAME)."
            )


class TokenizedInstructions(EnvInstructions):
    """Each env's instruction as a :class:`~rslkit.models.smolvla.policy.SmolVLAPolicy` reads it: token ids and
    mask from the policy's own tokenizer (over-long instructions refused)."""

    def __init__(self, env: VecEnv, policy: SmolVLAPolicy, device: torch.device, instruction: str = "") -> None:
        super().__init__(env, "", 0, device, instruction)
        self._encode = policy.encode_instructions

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Token ids and masks ``[len(texts), 2L]`` (long)."""
        return self._encode(texts).to(self.device)


class VLABCData(BCData):
    """A VLA policy over the env's state group, cameras and instructions, and the frames, videos and tasks of a
    dataset; with ``aux_state``, a state probe trained beside it.

    On a fresh run the dataset's statistics become the policy's normalizers (state, action, instruction
    embeddings). Batches (rows and image shifts) come from the pair's own generator, seeded with the run's seed.

    Raises:
        ValueError: ``aux_state`` names no observation group of the env, or columns outside it.
    """

    def __init__(self, env: VecEnv, cfg: VLABCRunnerCfg, device: torch.device, seed: int) -> None:
        self.env, self.cfg, self.seed = env, cfg, seed
        policy = make_vla_policy(env, cfg)
        probe = None
        self.aux_columns = torch.zeros(0, dtype=torch.long)
        """Columns of the aux_state group the probe regresses (empty without a probe)."""
        if cfg.aux_state:
            groups = sorted(env.get_observations().keys())
            if cfg.aux_state not in groups:
                raise ValueError(
                    f"--agent.aux_state has no observation group '{cfg.aux_state}' in the env (it has {groups}): name "
                    "the group recorded as the dataset's observation.environment_state."
                )
            dim = policy_obs_dim(env, cfg.aux_state)
            names = (getattr(env, "observation_names", None) or {}).get(cfg.aux_state)
            self.aux_columns = torch.tensor(select_state_columns(cfg.aux_state_columns, dim, names))
            probe = StateProbe(policy.tokenizer.num_tokens, cfg.policy.d_model, len(self.aux_columns))
        self.alg: FlowBC[VLAPolicy] = FlowBC(policy, cfg.algorithm, device, probe)
        self.instructions = (
            TokenizedInstructions(env, policy, device, cfg.instruction)
            if isinstance(policy, SmolVLAPolicy)
            else EnvInstructions(env, cfg.text_encoder, cfg.policy.language_dim, device, cfg.instruction)
        )
        """Each env's instruction embedding (SmolVLA: token ids), the policy's ``instruction`` input."""
        self.dataset: VLAChunkDataset | None = None
        self.val_dataset: VLAChunkDataset | None = None
        self._task_embeddings: torch.Tensor | None = None
        self._generator = torch.Generator().manual_seed(seed)

    def load(self, fresh: bool) -> None:
        """Read ``cfg.dataset`` with the policy's cameras, check it against the env, set the normalizers (``fresh``).

        Raises:
            ValueError: no dataset configured, or one that does not match the env or lacks cameras or tasks.
        """
        if not self.cfg.dataset:
            raise ValueError("Behaviour cloning needs demonstrations: pass --dataset PATH (or --agent.dataset PATH).")
        cameras = list(self.cfg.policy.cameras)
        check_dataset_cameras(self.cfg.dataset, self.cfg.policy.cameras)
        demos = read_lerobot_dataset(self.cfg.dataset, cameras=cameras)
        policy = self.alg.policy
        check_matches_env(demos, policy.obs_dim, self.env.num_actions, "the env")
        size = tuple(self.cfg.policy.image_size)
        for cam in cameras:
            h, w = demos.images[cam].shape[1:3]
            if (h, w) != size:
                raise ValueError(
                    f"Camera {cam!r} of the dataset is {h}x{w}, the policy takes {size[0]}x{size[1]}: set "
                    f"--agent.policy.image_size {h},{w} (the recording's size), or re-record at {size[0]}x{size[1]}."
                )
        self._check_aux_state(demos)
        train, val = self.split(demos, self.cfg.val_fraction, self.seed)
        self.dataset = VLAChunkDataset(train, cameras, self.cfg.policy.horizon)
        self.val_dataset = None if val is None else VLAChunkDataset(val, cameras, self.cfg.policy.horizon)
        self._task_embeddings = self.instructions.embed(demos.tasks)
        if fresh and self.alg.probe is not None:
            stats = demos.stats[ENV_STATE_KEY]
            low, high = (torch.tensor(stats[k])[self.aux_columns] for k in ("min", "max"))
            self.alg.probe.normalizer.set_stats(low, high)
        if fresh:
            for p in (policy, self.alg.ema.model):
                p.set_normalization(demos.stats)
                if not isinstance(p, SmolVLAPolicy):  # token ids are not normalized
                    p.set_instruction_stats(self._task_embeddings)

    def _check_aux_state(self, demos: Demonstrations) -> None:
        if self.alg.probe is None:
            return
        if demos.env_state is None:
            raise ValueError(
                f"--agent.aux_state {self.cfg.aux_state} needs the dataset's {ENV_STATE_KEY}, which "
                f"{self.cfg.dataset} lacks: record it with `python -m rslkit.record ... --env_state_group "
                f"{self.cfg.aux_state}`, or turn the probe off with --agent.aux_state= (an empty value)."
            )
        expected = policy_obs_dim(self.env, self.cfg.aux_state)
        if demos.env_state.shape[1] != expected:
            raise ValueError(
                f"The dataset's {ENV_STATE_KEY} has {demos.env_state.shape[1]} columns, the env's group "
                f"{self.cfg.aux_state!r} {expected}: record the group named by --agent.aux_state."
            )

    def batch(self, batch_size: int) -> tuple[TensorDict, torch.Tensor, torch.Tensor | None]:
        """A training batch: raw observation groups ``[B]`` (shifted frames), action chunks ``[B, Ta, A]`` and, with
        ``aux_state``, the frames' privileged state ``[B, E]`` (else None)."""
        assert self.dataset is not None, "load() first"
        rows = torch.randint(len(self.dataset), (batch_size,), generator=self._generator)
        obs, actions = self._examples(self.dataset, rows, self.cfg.augment_shift)
        env_state = self.dataset.demos.env_state
        aux = None if self.alg.probe is None or env_state is None else env_state[rows][:, self.aux_columns]
        return obs, actions, aux

    def _examples(self, dataset: VLAChunkDataset, rows: torch.Tensor, shift: int) -> tuple[TensorDict, torch.Tensor]:
        """Raw observation groups ``[B]`` (frames shifted by up to ``shift`` pixels) and action chunks of ``rows``."""
        assert self._task_embeddings is not None, "load() first"
        device = self.alg.device
        state, frames, task, actions = dataset.get(rows)
        groups = {self.cfg.policy.state_group: state, INSTRUCTION_GROUP: self._task_embeddings[task.to(device)]}
        for cam, images in frames.items():
            groups[camera_group(cam)] = random_shift(images, shift, self._generator)
        return TensorDict(groups, batch_size=[len(rows)]).to(device), actions

    def validation_batches(self, batch_size: int) -> Iterator[ValBatch]:
        """Up to ``val_max_frames`` held-out frames, unshifted, with their tasks' instructions."""
        if self.val_dataset is None:
            return
        rows = evenly_spaced(len(self.val_dataset), self.cfg.val_max_frames)
        for batch in rows.split(batch_size):
            yield self._examples(self.val_dataset, batch, 0)

    def update(self, batch_size: int) -> dict[str, float]:
        """One step on a :meth:`batch`."""
        obs, actions, aux = self.batch(batch_size)
        return self.alg.update(obs, actions, aux_state=aux)

    def chunk_fn(self, policy: torch.nn.Module) -> Callable[[TensorDict], torch.Tensor]:
        """Chunks of ``policy`` from the env's observation groups and each env's instruction."""
        assert isinstance(policy, VLAPolicy)
        return lambda obs: policy.act_chunk(self.instructions.add_to(obs))

    def state_dict(self) -> dict[str, Any]:
        """The sampling generator (``sampling_generator``)."""
        return {"sampling_generator": self._generator.get_state()}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        """Restore the sampling generator (checkpoints without one keep the seeded generator)."""
        if "sampling_generator" in data:
            self._generator.set_state(data["sampling_generator"])
