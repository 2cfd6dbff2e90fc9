"""rslkit's SmolVLA (LeRobot's ``SmolVLAPolicy``) as a VLA policy: loaded from a LeRobot checkpoint directory or built
from scratch, trained by the same behaviour cloning and sampled by the same Euler sampler as
:class:`~rslkit.models.vla.VLAPolicy`, saved back in LeRobot's format.

It is a :class:`~rslkit.models.vla.VLAPolicy` by interface: ``normalize_inputs`` -> ``conditioning`` (here the VLM's
:class:`~rslkit.models.smolvla.vlm_with_expert.PrefixCache` instead of observation tokens) -> ``net(x_t, t, cond)``
(the action expert's velocity in rslkit's time convention, :mod:`rslkit.models.smolvla.flow`), so
:class:`~rslkit.algorithms.flow_bc.FlowBC`'s rectified-flow loss and :func:`~rslkit.models.flow.sampler.euler_sample`
run it unchanged. Its flow lives in the model's padded action space ``[Ta, max_action_dim]``: the action normalizer
pads (LeRobot's loss covers the padded dims too) and :meth:`SmolVLAPolicy.act_chunk` crops.

Inputs (a TensorDict ``[B]`` of observation groups): the state group (float ``[B, S]``), ``instruction`` (token ids
and mask from :meth:`SmolVLAPolicy.encode_instructions`, long ``[B, 2L]``) and ``camera_<name>`` per dataset camera
(uint8 ``[B, H, W, 3]``), fed to the checkpoint camera that ``--agent.policy.smolvla.camera_map`` names.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
from tensordict import TensorDict
from torch import nn

from rslkit.data.demonstrations import ACTION_KEY, OBS_KEY
from rslkit.envs.camera_groups import camera_group
from rslkit.models.flow.sampler import euler_sample
from rslkit.models.smolvla.checkpoint import load_weights, save_checkpoint
from rslkit.models.smolvla.flow import SmolVLAFlow, sample_time
from rslkit.models.smolvla.inputs import prepare_images, tokenize
from rslkit.models.smolvla.lerobot_config import LeRobotSmolVLAConfig, read_lerobot_config, scratch_config
from rslkit.models.smolvla.normalization import MeanStdNormalizer
from rslkit.models.smolvla.processor_files import read_stats, stats_of
from rslkit.models.smolvla.tuning import add_lora, freeze, frozen_modules
from rslkit.models.smolvla.vlm import load_tokenizer, vision_image_size, vlm_directory
from rslkit.models.smolvla.vlm_with_expert import PrefixCache
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.policy import INSTRUCTION_GROUP, VLAPolicy


class SmolVLAPolicy(VLAPolicy):
    """SmolVLA over a state of size ``state_dim`` and actions of size ``action_dim`` (module doc).

    Args:
        state_dim: the robot's state size ``S`` (<= the checkpoint's ``max_state_dim``).
        action_dim: the robot's action size ``A`` (<= ``max_action_dim``).
        cfg: the VLA config (``backbone="smolvla"``, ``backbone_path`` the SmolVLM directory, ``smolvla.*``).

    Raises:
        FileNotFoundError: a checkpoint or VLM directory that is not there or lacks its files.
        ValueError: a checkpoint that does not fit the robot or the run's settings (each message names the flag).
    """

    net: SmolVLAFlow  # type: ignore[assignment]  # the velocity net of this policy: LeRobot's flow model
    obs_normalizer: MeanStdNormalizer  # type: ignore[assignment]  # MEAN_STD with padding, not min-max
    action_normalizer: MeanStdNormalizer  # type: ignore[assignment]

    def __init__(self, state_dim: int, action_dim: int, cfg: VLAPolicyCfg) -> None:
        nn.Module.__init__(self)  # VLAPolicy's own CNN tokenizer and expert are not built: SmolVLA replaces both
        cfg.check()
        if cfg.backbone != "smolvla":
            raise ValueError(f"SmolVLAPolicy needs --agent.policy.backbone smolvla, got {cfg.backbone!r}.")
        settings = cfg.smolvla
        self.cfg = cfg
        vlm_dir = vlm_directory(cfg.backbone_path)
        self.lerobot = self._lerobot_config(state_dim, action_dim, cfg, vlm_dir)
        self.obs_dim, self.raw_action_dim, self.horizon = state_dim, action_dim, cfg.horizon
        self.action_dim = self.lerobot.max_action_dim
        """Size of the flow's actions: the model's padded action space (``max_action_dim``)."""
        self.cameras = self._map_cameras(cfg)
        """``{dataset camera: checkpoint camera}``."""
        self.net = SmolVLAFlow(self.lerobot, vlm_dir)
        self.obs_normalizer = MeanStdNormalizer(state_dim, self.lerobot.max_state_dim)
        self.action_normalizer = MeanStdNormalizer(action_dim, self.lerobot.max_action_dim)
        self.text_tokenizer = load_tokenizer(vlm_dir)
        self.tokenizer_name = str(self.lerobot.raw.get("vlm_model_name", cfg.backbone_path))
        if settings.pretrained:
            directory = Path(settings.pretrained).expanduser()
            load_weights(self.net, directory, vlm_dir)
            self._load_stats(directory)
        if cfg.backbone_trainable == "lora":
            add_lora(self.net, cfg)
        else:
            freeze(self.net, settings)
        self.net.vlm_with_expert.gradient_checkpointing = settings.gradient_checkpointing

    @staticmethod
    def _lerobot_config(state_dim: int, action_dim: int, cfg: VLAPolicyCfg, vlm_dir: Path) -> LeRobotSmolVLAConfig:
        settings = cfg.smolvla
        if not settings.pretrained:
            cameras = tuple(settings.camera_names(cfg.cameras).values())
            return scratch_config(settings, state_dim, action_dim, cameras, cfg.horizon, cfg.num_inference_steps,
                                  vision_image_size(vlm_dir), cfg.vlm_layers)  # fmt: skip
        lr = read_lerobot_config(settings.pretrained)
        source = settings.pretrained
        for name, ours, theirs in (("horizon", cfg.horizon, lr.chunk_size),
                                   ("num_inference_steps", cfg.num_inference_steps, lr.num_steps)):  # fmt: skip
            if ours != theirs:
                raise ValueError(
                    f"--agent.policy.{name} is {ours} but the checkpoint {source} has {theirs}: set "
                    f"--agent.policy.{name} {theirs}."
                )
        if cfg.vlm_layers not in (0, lr.num_vlm_layers):
            raise ValueError(
                f"--agent.policy.vlm_layers is {cfg.vlm_layers} but the checkpoint {source} keeps "
                f"{lr.num_vlm_layers} VLM layers: leave it 0."
            )
        if state_dim > lr.max_state_dim or action_dim > lr.max_action_dim:
            raise ValueError(
                f"The robot's state ({state_dim}) / action ({action_dim}) exceed the checkpoint's max_state_dim "
                f"({lr.max_state_dim}) / max_action_dim ({lr.max_action_dim}): it cannot drive this robot."
            )
        return dataclasses.replace(lr, state_dim=state_dim, action_dim=action_dim)

    def _map_cameras(self, cfg: VLAPolicyCfg) -> dict[str, str]:
        mapping = cfg.smolvla.camera_names(cfg.cameras)
        unknown = [p.partition("=")[0] for p in cfg.smolvla.camera_map if p.partition("=")[0] not in cfg.cameras]
        if unknown:
            raise ValueError(
                f"--agent.policy.smolvla.camera_map maps {unknown}, which are not among --agent.policy.cameras "
                f"{list(cfg.cameras)}."
            )
        known = self.lerobot.cameras
        for source, target in mapping.items():
            if target not in known:
                raise ValueError(
                    f"The dataset camera {source!r} feeds the checkpoint camera {target!r}, which the checkpoint does "
                    f"not have (it has {list(known)}): map it with --agent.policy.smolvla.camera_map "
                    f"{source}=<one of {','.join(known)}>."
                )
        targets = list(mapping.values())
        if len(set(targets)) != len(targets):
            raise ValueError(f"--agent.policy.smolvla.camera_map feeds one checkpoint camera twice: {mapping}.")
        unfed = [c for c in known if c not in targets]
        if unfed:
            warnings.warn(
                f"SmolVLA: the checkpoint cameras {unfed} get no images (left out of the prefix, as LeRobot does; "
                f"{self.lerobot.empty_cameras} empty camera(s) as configured).",
                stacklevel=3,
            )
        return mapping

    def _load_stats(self, directory: Path) -> None:
        stats = read_stats(directory)
        if stats is None:
            return
        for normalizer, key in ((self.obs_normalizer, OBS_KEY), (self.action_normalizer, ACTION_KEY)):
            mean, std = stats.get(f"{key}.mean"), stats.get(f"{key}.std")
            if mean is not None and std is not None and mean.shape == (normalizer.dim,):
                normalizer.set_stats(mean, std)
            else:
                warnings.warn(
                    f"SmolVLA: the checkpoint's {key} statistics do not fit this robot ({normalizer.dim} values): "
                    "mean 0, std 1 until a run sets them from its dataset (vla-bc does on a fresh run).",
                    stacklevel=3,
                )

    # ---------------------------------------------------------------- VLAPolicy's interface
    @property
    def step_conditioned(self) -> bool:
        """False: SmolVLA has no shortcut-model step input."""
        return False

    @property
    def input_groups(self) -> list[str]:
        """The state group, ``instruction`` (token ids) and one ``camera_<name>`` per dataset camera."""
        return [self.cfg.state_group, INSTRUCTION_GROUP] + [camera_group(c) for c in self.cameras]

    def set_normalization(self, stats: dict[str, dict[str, list]]) -> None:
        """Take mean/std of ``observation.state`` and ``action`` from ``meta/stats.json`` content (MEAN_STD)."""
        for normalizer, key in ((self.obs_normalizer, OBS_KEY), (self.action_normalizer, ACTION_KEY)):
            normalizer.set_stats(torch.tensor(stats[key]["mean"]), torch.tensor(stats[key]["std"]))

    def set_instruction_stats(self, embeddings: torch.Tensor) -> None:
        """Refused: SmolVLA reads token ids (:meth:`encode_instructions`), which are not normalized.

        Raises:
            TypeError: always.
        """
        raise TypeError(
            "SmolVLA reads instruction token ids, not sentence embeddings: it has no instruction statistics."
        )

    def encode_instructions(self, texts: Sequence[str]) -> torch.Tensor:
        """Instructions -> the ``instruction`` input: token ids and attention mask side by side, long ``[G, 2L]``
        (``L = tokenizer_max_length``; :func:`~rslkit.models.smolvla.inputs.tokenize`, over-long ones refused)."""
        ids, mask = tokenize(texts, self.text_tokenizer, self.lerobot.tokenizer_max_length)
        return torch.cat([ids, mask.long()], dim=1)

    def normalize_inputs(self, obs: Mapping[str, torch.Tensor] | TensorDict) -> TensorDict:
        """Check raw observation groups and return the model's inputs ``[B]``: ``state`` (normalized, padded),
        ``instruction`` (long ``[B, 2L]``) and per checkpoint camera ``camera_<name>`` (float ``[B, 3, H, W]`` in
        [0, 1]).

        Raises:
            ValueError: a missing group or one of the wrong shape or type, naming the fix.
        """
        missing = [g for g in self.input_groups if g not in obs.keys()]
        if missing:
            raise ValueError(
                f"SmolVLA reads the observation groups {self.input_groups}; {missing} missing (have "
                f"{sorted(obs.keys())}). Cameras come from --env.cameras / the dataset, the instruction from the "
                "task or dataset's language goal."
            )
        state = obs[self.cfg.state_group].float()
        if state.ndim != 2 or state.shape[1] != self.obs_dim:
            raise ValueError(
                f"State group {self.cfg.state_group!r} must be [B, {self.obs_dim}], got {list(state.shape)}."
            )
        b, length = state.shape[0], 2 * self.lerobot.tokenizer_max_length
        tokens = obs[INSTRUCTION_GROUP]
        if tokens.dtype != torch.long or tuple(tokens.shape) != (b, length):
            raise ValueError(
                f"SmolVLA's instruction input must be token ids long [B, {length}] (encode_instructions), got "
                f"{tokens.dtype} {list(tokens.shape)}."
            )
        out = {"state": self.obs_normalizer(state), INSTRUCTION_GROUP: tokens}
        for source, target in self.cameras.items():
            img = obs[camera_group(source)]
            if img.dtype != torch.uint8 or img.ndim != 4 or img.shape[0] != b or img.shape[-1] != 3:
                raise ValueError(f"Camera {source!r} must be uint8 [B, H, W, 3], got {img.dtype} {list(img.shape)}.")
            out[camera_group(target)] = img.permute(0, 3, 1, 2).float() / 255.0
        return TensorDict(out, batch_size=[b], device=state.device)

    def _autocast(self, device: torch.device) -> AbstractContextManager:
        if not self.cfg.smolvla.bf16:
            return nullcontext()
        if device.type != "cuda":
            raise ValueError(
                f"--agent.policy.smolvla.bf16 is bfloat16 autocast on CUDA; this policy runs on {device.type}: "
                "leave it off (float32) or train on a CUDA device."
            )
        return torch.autocast("cuda", dtype=torch.bfloat16)

    def conditioning(self, inputs: TensorDict, future_n: torch.Tensor | None = None) -> PrefixCache:  # type: ignore[override]
        """The VLM's prefix keys/values of normalized ``inputs`` (:meth:`normalize_inputs`).

        Raises:
            ValueError: ``future_n`` given (no future-state input), or bf16 off CUDA.
        """
        if future_n is not None:
            raise ValueError("SmolVLA has no future-state input; train without max_future_offset.")
        lr = self.lerobot
        images = {t: inputs[camera_group(t)] for t in lr.cameras if camera_group(t) in inputs.keys()}
        pixels, masks = prepare_images(images, lr.cameras, lr.resize_imgs_with_padding, lr.empty_cameras)
        tokens = inputs[INSTRUCTION_GROUP]
        length = lr.tokenizer_max_length
        with self._autocast(tokens.device):
            return self.net.prefix_cache(pixels, masks, tokens[:, :length], tokens[:, length:].bool(), inputs["state"])

    def velocity(
        self, x: torch.Tensor, t: torch.Tensor, inputs: TensorDict, num_steps: int | None = None
    ) -> torch.Tensor:
        """``v(x [B, Ta, max_action_dim], t [B], inputs)`` in rslkit's time convention."""
        cache = self.conditioning(inputs)
        with self._autocast(x.device):
            return self.net(x, t, cache)

    def sample_normalized(
        self, inputs: TensorDict, x0: torch.Tensor | None = None, num_steps: int | None = None
    ) -> torch.Tensor:
        """Euler ODE from ``x0 ~ N(0, I)`` ``[B, Ta, max_action_dim]``: a normalized, padded chunk. With
        ``smolvla.use_cache`` the prefix is computed once for all steps, else again at every step."""
        k = num_steps or self.cfg.num_inference_steps
        if x0 is None:
            b = int(inputs.batch_size[0])
            x0 = torch.randn(b, self.horizon, self.action_dim, device=inputs["state"].device)
        if self.cfg.smolvla.use_cache:
            cache = self.conditioning(inputs)
            return euler_sample(lambda x, t: self._velocity(x, t, cache), x0, k)
        return euler_sample(lambda x, t: self._velocity(x, t, self.conditioning(inputs)), x0, k)

    def _velocity(self, x: torch.Tensor, t: torch.Tensor, cache: PrefixCache) -> torch.Tensor:
        with self._autocast(x.device):
            return self.net(x, t, cache)

    @property
    def noise_feature_dim(self) -> int:
        """Size of what ReinFlow's noise net reads: the VLM's text width."""
        return self.net.vlm_with_expert.width

    def noise_features(self, context: PrefixCache) -> torch.Tensor:  # type: ignore[override]
        """Mean of the prefix's final hidden states over its real tokens ``[B, W]``, detached."""
        return context.features().detach()

    def act_chunk(
        self, obs: Mapping[str, torch.Tensor] | TensorDict, x0: torch.Tensor | None = None, num_steps: int | None = None
    ) -> torch.Tensor:
        """Env-unit action chunk ``[N, Ta, A]`` for raw observation groups ``obs`` (unnormalized, not clamped:
        MEAN_STD has no bounded range)."""
        return self.action_normalizer.unnormalize(self.sample_normalized(self.normalize_inputs(obs), x0, num_steps))

    # ---------------------------------------------------------------- SmolVLA's own
    def lerobot_loss(
        self,
        inputs: TensorDict,
        actions: torch.Tensor,
        noise: torch.Tensor | None = None,
        tau: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """LeRobot's training loss of raw ``actions [B, Ta, A]`` (mean over the padded chunk), with LeRobot's noise
        and ``tau ~ Beta(1.5, 1)`` time when not given."""
        x1 = self.action_normalizer(actions)
        noise = torch.randn_like(x1) if noise is None else noise
        tau = sample_time(x1.shape[0], device=x1.device) if tau is None else tau
        cache = self.conditioning(inputs)
        with self._autocast(x1.device):
            return self.net.lerobot_losses(cache, x1, noise, tau).mean()

    def sample_time(self, batch: int, generator: torch.Generator | None = None, device: torch.device | None = None
                    ) -> torch.Tensor:  # fmt: skip
        """rslkit flow times ``t = 1 - tau`` ``[B]`` for LeRobot's ``tau ~ Beta(1.5, 1) * 0.999 + 0.001``."""
        return 1.0 - sample_time(batch, generator, device)

    def train(self, mode: bool = True) -> SmolVLAPolicy:
        """Train mode for what trains; frozen parts of the VLM stay in eval mode (as LeRobot keeps them)."""
        super().train(mode)
        if mode and self.cfg.backbone_trainable != "lora":
            for module in frozen_modules(self.net, self.cfg.smolvla):
                module.eval()
        return self

    def save_lerobot(self, directory: str | Path) -> Path:
        """Write a LeRobot SmolVLA checkpoint directory (``config.json``, ``model.safetensors`` with LoRA merged,
        the pre/post-processor files with this policy's statistics) that LeRobot's ``from_pretrained`` loads."""
        s = self.cfg.smolvla
        raw = dict(self.lerobot.raw)
        raw.update(
            type="smolvla", vlm_model_name=self.tokenizer_name, freeze_vision_encoder=s.freeze_vision_encoder,
            train_expert_only=s.train_expert_only, train_state_proj=s.train_state_proj, use_cache=s.use_cache,
        )  # fmt: skip
        cfg = dataclasses.replace(self.lerobot, raw=raw)
        stats = stats_of(self.obs_normalizer.mean, self.obs_normalizer.std, self.action_normalizer.mean,
                         self.action_normalizer.std)  # fmt: skip
        return save_checkpoint(directory, self.net, cfg, self.tokenizer_name, stats)
