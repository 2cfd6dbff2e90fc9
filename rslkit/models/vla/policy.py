"""VLA-style flow chunk policy: camera images + a language instruction + state -> action chunks by flow matching.

It plugs into the same flow machinery as the state-only :class:`~rslkit.models.flow.FlowPolicy`: the objectives
(:func:`~rslkit.models.flow.rectified_flow_loss`, :func:`~rslkit.models.flow.shortcut_loss`) call
``policy.conditioning(inputs)`` and ``policy.net(x_t, t, conditioning, d)``, the sampler is the same Euler ODE on
the same time grid. Only the conditioning differs: observation tokens ``[B, L, d]`` instead of a vector.

Inputs are a TensorDict (or dict) ``[B]`` of observation groups: the state (``cfg.state_group``, float ``[B, S]``),
the instruction embedding (``instruction``, float ``[B, E]``, a sentence encoder's raw output) and one uint8 image
group ``camera_<name>`` ``[B, H, W, 3]`` per camera. State and actions are min-max normalized to ``[-1, 1]`` with
dataset statistics; the instruction embedding is normalized per dimension over the training instructions (templated
instructions embed almost collinearly: the dimensions that tell them apart are rescaled); images are scaled to
``[0, 1]``. All statistics are buffers, saved with the weights and inside an exported graph.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDict
from torch import nn

from rslkit.data.demonstrations import ACTION_KEY, OBS_KEY
from rslkit.data.normalizer import MinMaxNormalizer
from rslkit.envs.camera_groups import camera_group
from rslkit.models.flow.objectives import uniform_time
from rslkit.models.flow.sampler import euler_sample
from rslkit.models.text_encoder import embedding_stats, normalize_embeddings
from rslkit.models.vla.action_expert import ActionExpert
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.tokens import ObservationTokenizer

INSTRUCTION_GROUP = "instruction"
"""Observation group of the instruction embedding."""


class VLAPolicy(nn.Module):
    """``pi(A_t | images, instruction, state)`` over action chunks ``[Ta, A]`` as a flow from ``N(0, I)``.

    Args:
        state_dim: size ``S`` of the state.
        action_dim: size ``A`` of one action.
        cfg: architecture (checked here).
    """

    def __init__(self, state_dim: int, action_dim: int, cfg: VLAPolicyCfg) -> None:
        super().__init__()
        cfg.check()
        self.cfg = cfg
        self.obs_dim, self.action_dim, self.horizon = state_dim, action_dim, cfg.horizon
        self.obs_normalizer = MinMaxNormalizer(state_dim)
        """State normalizer (the name the flow-policy code uses for its observation normalizer)."""
        self.action_normalizer = MinMaxNormalizer(action_dim)
        self.register_buffer("instruction_mean", torch.zeros(max(cfg.language_dim, 1)))
        self.register_buffer("instruction_std", torch.ones(max(cfg.language_dim, 1)))
        self.instruction_mean: torch.Tensor
        self.instruction_std: torch.Tensor
        self.tokenizer = ObservationTokenizer(state_dim, cfg)
        self.net = ActionExpert(
            action_dim,
            cfg.horizon,
            cfg.d_model,
            cfg.num_heads,
            cfg.num_layers,
            cfg.mlp_ratio,
            cfg.time_embed_dim,
            causal=cfg.causal_actions,
            step_conditioned=cfg.objective == "shortcut",
        )

    def sample_time(
        self, batch: int, generator: torch.Generator | None = None, device: torch.device | None = None
    ) -> torch.Tensor:
        """Training times of the flow loss ``[B]``: uniform on [0, 1]."""
        return uniform_time(batch, generator, device)

    @property
    def step_conditioned(self) -> bool:
        """Whether the expert takes the step size ``d`` (shortcut model)."""
        return self.net.step_conditioned

    @property
    def input_groups(self) -> list[str]:
        """The observation groups the policy reads."""
        groups = [self.cfg.state_group]
        if self.cfg.language_dim > 0:
            groups.append(INSTRUCTION_GROUP)
        return groups + [camera_group(c) for c in self.cfg.cameras]

    def set_normalization(self, stats: dict[str, dict[str, list]]) -> None:
        """Take min/max of ``observation.state`` and ``action`` from ``meta/stats.json`` content."""
        self.obs_normalizer.set_stats(torch.tensor(stats[OBS_KEY]["min"]), torch.tensor(stats[OBS_KEY]["max"]))
        self.action_normalizer.set_stats(torch.tensor(stats[ACTION_KEY]["min"]), torch.tensor(stats[ACTION_KEY]["max"]))

    def set_instruction_stats(self, embeddings: torch.Tensor) -> None:
        """The instruction normalisation (:func:`~rslkit.models.text_encoder.embedding_stats`) over the raw
        embeddings ``[G, E]`` of the training instructions."""
        if embeddings.ndim != 2 or embeddings.shape[1] != self.cfg.language_dim:
            raise ValueError(
                f"Instruction embeddings must be [G, {self.cfg.language_dim}] (policy.language_dim), got "
                f"{list(embeddings.shape)}."
            )
        mean, std = embedding_stats(embeddings)
        self.instruction_mean.copy_(mean)
        self.instruction_std.copy_(std)

    def normalize_instruction(self, embedding: torch.Tensor) -> torch.Tensor:
        """Raw instruction embeddings ``[B, E]`` -> normalized."""
        return normalize_embeddings(embedding, self.instruction_mean, self.instruction_std)

    def normalize_inputs(self, obs: Mapping[str, torch.Tensor] | TensorDict) -> TensorDict:
        """Check raw observation groups and return the network's inputs ``[B]``: ``state`` (normalized),
        ``instruction``, ``camera_<name>`` (float ``[B, 3, H, W]`` in ``[0, 1]``).

        Raises:
            ValueError: for a missing group, a wrong shape or image size, or a non-uint8 image, naming the fix.
        """
        c = self.cfg
        missing = [g for g in self.input_groups if g not in obs.keys()]
        if missing:
            raise ValueError(
                f"The VLA policy reads the observation groups {self.input_groups}; {missing} missing (have "
                f"{sorted(obs.keys())}). Cameras come from the task's --env.cameras, the instruction embedding from "
                "the task or dataset's language goal."
            )
        state = obs[c.state_group].float()
        if state.ndim != 2 or state.shape[1] != self.obs_dim:
            raise ValueError(f"State group {c.state_group!r} must be [B, {self.obs_dim}], got {list(state.shape)}.")
        b = state.shape[0]
        out = {"state": self.obs_normalizer(state)}
        if c.language_dim > 0:
            lang = obs[INSTRUCTION_GROUP].float()
            if lang.shape != (b, c.language_dim):
                raise ValueError(
                    f"The instruction embedding must be [B, {c.language_dim}] (policy.language_dim), got "
                    f"{list(lang.shape)}: embed instructions with the encoder the policy was trained with."
                )
            out[INSTRUCTION_GROUP] = self.normalize_instruction(lang)
        h, w = c.image_size
        for cam in c.cameras:
            img = obs[camera_group(cam)]
            if img.dtype != torch.uint8 or img.shape != (b, h, w, 3):
                raise ValueError(
                    f"Camera {cam!r} must be uint8 [B, {h}, {w}, 3] (policy.image_size), got {img.dtype} "
                    f"{list(img.shape)}: render or record the camera at {h}x{w}."
                )
            out[camera_group(cam)] = img.permute(0, 3, 1, 2).float() / 255.0
        return TensorDict(out, batch_size=[b], device=state.device)

    def conditioning(self, inputs: TensorDict, future_n: torch.Tensor | None = None) -> torch.Tensor:
        """Observation tokens ``[B, L, d]`` of normalized ``inputs`` (:meth:`normalize_inputs`).

        Raises:
            ValueError: when ``future_n`` is given (VLA policies have no future-state input yet).
        """
        if future_n is not None:
            raise ValueError("VLA policies have no future-state input; train without max_future_offset.")
        images = {cam: inputs[camera_group(cam)] for cam in self.cfg.cameras}
        return self.tokenizer(inputs["state"], inputs.get(INSTRUCTION_GROUP, None), images)

    def _step(self, t: torch.Tensor, num_steps: int | None) -> torch.Tensor | None:
        if not self.step_conditioned:
            return None
        return torch.full_like(t, 1.0 / (num_steps or self.cfg.num_inference_steps))

    def velocity(
        self, x: torch.Tensor, t: torch.Tensor, inputs: TensorDict, num_steps: int | None = None
    ) -> torch.Tensor:
        """``v(x [B, Ta, A], t [B], inputs)`` for a chain of ``num_steps`` (``d = 1/K`` for shortcut models)."""
        return self.net(x, t, self.conditioning(inputs), self._step(t, num_steps))

    def sample_normalized(
        self, inputs: TensorDict, x0: torch.Tensor | None = None, num_steps: int | None = None
    ) -> torch.Tensor:
        """Deterministic Euler ODE from ``x0 ~ N(0, I)`` (or the given ``[B, Ta, A]``): a normalized chunk. The
        observation tokens are computed once and reused by every step."""
        k = num_steps or self.cfg.num_inference_steps
        tokens = self.conditioning(inputs)
        if x0 is None:
            x0 = torch.randn(tokens.shape[0], self.horizon, self.action_dim, device=tokens.device)
        return euler_sample(lambda x, t: self.net(x, t, tokens, self._step(t, k)), x0, k)

    # ---------------------------------------------------------------- ReinFlow's noisy chain (ChainPolicy)
    @property
    def noise_feature_dim(self) -> int:
        """Size of what ReinFlow's noise net reads: the pooled observation tokens ``d_model``."""
        return self.cfg.d_model

    def chain_context(self, inputs: TensorDict) -> torch.Tensor:
        """The context of a noisy chain: the observation tokens ``[B, L, d]`` of normalized ``inputs``, computed
        once and shared by the chain's K steps (as in :meth:`sample_normalized`)."""
        return self.conditioning(inputs)

    def chain_velocity(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, num_steps: int) -> torch.Tensor:
        """``v(x [B, Ta, A], t [B], tokens [B, L, d])``: the action expert on precomputed observation tokens."""
        return self.net(x, t, context, self._step(t, num_steps))

    def noise_features(self, context: torch.Tensor) -> torch.Tensor:
        """Mean of the observation tokens ``[B, d]``, detached: the noise net sees what the expert attends to, but
        its objective (entropy, exploration) does not reshape the image and language encoders."""
        return context.mean(dim=1).detach()

    def act_chunk(
        self, obs: Mapping[str, torch.Tensor] | TensorDict, x0: torch.Tensor | None = None, num_steps: int | None = None
    ) -> torch.Tensor:
        """Env-unit action chunk ``[N, Ta, A]`` for raw observation groups ``obs``."""
        chunk = self.sample_normalized(self.normalize_inputs(obs), x0, num_steps)
        return self.action_normalizer.unnormalize(chunk.clamp(-1.0, 1.0))
