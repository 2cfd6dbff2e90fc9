"""Architecture of a VLA-style flow policy: which inputs it reads and the size of its transformer action expert."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rslkit.models.smolvla.settings import SmolVLACfg
from rslkit.utils.validation import expect, finite


@dataclass
class VLAPolicyCfg:
    """Camera images + a language instruction + proprioceptive state -> action chunks by flow matching.

    CLI: ``--agent.policy.<field>``. Observation tokens: one for the state, one for the instruction (when
    ``language_dim > 0``) and ``token_grid**2`` per camera; the action expert attends to them from the noisy action
    tokens (one per chunk step). The cameras are encoded by a small CNN trained from scratch (``backbone="cnn"``)
    or by a pretrained ``transformers`` vision tower (``backbone="hf-vision"``, :mod:`rslkit.models.vla.hf_backbone`).
    ``backbone="hf-vlm"`` runs a SmolVLM's first text decoder layers over ``[camera tokens, instruction, state]``
    and the expert attends to their output (:mod:`rslkit.models.vla.hf_vlm`). ``backbone="smolvla"`` is LeRobot's
    SmolVLA, loaded from a LeRobot checkpoint or built from scratch (:mod:`rslkit.models.smolvla`, ``smolvla.*``).
    """

    cameras: tuple[str, ...] = ()
    """Camera names; each is read from the observation group ``camera_<name>`` (uint8 ``[B, H, W, 3]``)."""
    image_size: tuple[int, int] = (64, 64)
    """``(H, W)`` of every camera image; other sizes are refused (render or record at this size)."""
    state_group: str = "policy"
    """Observation group of the proprioceptive state (``observation.state`` in datasets)."""
    language_dim: int = 0
    """Size of the instruction embedding (the group ``instruction``, float ``[B, E]``; 384 for MiniLM); 0: no
    language input."""
    horizon: int = 16
    """Action chunk length ``Ta`` (one action token each)."""
    num_inference_steps: int = 4
    """Euler steps ``K`` of the sampler (and of a ReinFlow chain)."""
    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 4
    """Blocks of the action expert: self-attention over action tokens, cross-attention to observation tokens, MLP."""
    mlp_ratio: int = 4
    cnn_channels: tuple[int, ...] = (32, 64, 128)
    """Stride-2 3x3 convolutions of the image encoder (from scratch); its feature map is pooled to ``token_grid``."""
    token_grid: int = 4
    """Each camera gives ``token_grid x token_grid`` tokens (SmolVLA: 64 per frame; 16 keeps CPU training fast)."""
    image_tokens: Literal["grid", "keypoints"] = "grid"
    """``cnn`` backbone: ``grid`` average-pools the feature map to ``token_grid x token_grid`` tokens; ``keypoints``
    keeps a finer map (the last convolution has stride 1) and gives ``num_keypoints`` tokens, each the expected
    image position and the attended features of one learned spatial-softmax map (Levine et al. 2016, robomimic's
    and Diffusion Policy's image encoders): positions finer than a grid cell, e.g. of a few-pixel cube."""
    num_keypoints: int = 32
    """``image_tokens="keypoints"``: tokens (spatial-softmax maps) per camera."""
    time_embed_dim: int = 64
    causal_actions: bool = False
    """Causal self-attention over the action tokens (SmolVLA's expert): token ``i`` sees tokens ``<= i`` only."""
    objective: Literal["rectified_flow", "shortcut"] = "rectified_flow"
    """``shortcut`` conditions the expert on the step size ``d`` (Frans et al. 2024), as for state-only flows."""
    backbone: Literal["cnn", "hf-vision", "hf-vlm", "smolvla"] = "cnn"
    """Image encoder: ``cnn`` (``cnn_channels``, one per camera, from scratch), ``hf-vision`` (the pretrained
    vision tower at ``backbone_path``, shared by all cameras: SigLIP, or SmolVLM / Idefics3's vision model and
    pixel-shuffle connector) or ``hf-vlm`` (a SmolVLM / Idefics3 checkpoint's vision model, connector and first
    ``vlm_layers`` text decoder layers over the camera, instruction and state tokens: SmolVLA's prefix) or
    ``smolvla`` (the whole SmolVLA: its VLM from ``backbone_path``, its settings under ``smolvla``)."""
    backbone_path: str = ""
    """``hf-vision`` / ``hf-vlm`` / ``smolvla`` (its SmolVLM2 config and tokenizer): a local ``transformers`` model
    directory, or a hub name already in the local cache
    (never downloaded)."""
    backbone_layers: int = 0
    """``hf-vision`` / ``hf-vlm``: keep only the first N layers of the vision encoder (cheaper, earlier features);
    0: all. SmolVLA cuts its VLM's text decoder instead (``vlm_layers``)."""
    vlm_layers: int = 0
    """``hf-vlm``: keep the first N layers of the VLM's text decoder (SmolVLA: half of them, 16 of SmolVLM2-500M's
    32); 0: all."""
    backbone_trainable: str = "frozen"
    """``frozen`` (the pretrained weights never change), ``last:N`` (``hf-vision``: the last N kept layers, the
    final norm and the connector train; ``hf-vlm``: the last N kept decoder layers and the decoder's final norm),
    ``lora`` (low-rank adapters on ``lora_targets``; needs ``peft``) or ``full``. ``hf-vlm``: over the whole
    pretrained part (vision model, connector, kept decoder layers)."""
    backbone_reduce: Literal["pool", "shuffle"] = "pool"
    """``hf-vision``: from the tower's patch grid to ``token_grid``: average pooling or pixel shuffle (stacking each
    cell's patches into one token, SmolVLA's connector). ``hf-vlm`` pools (its decoder takes text-width tokens)."""
    lora_rank: int = 8
    lora_alpha: int = 16
    """LoRA scales its update by ``lora_alpha / lora_rank``."""
    lora_dropout: float = 0.0
    smolvla: SmolVLACfg = field(default_factory=SmolVLACfg)
    """``backbone="smolvla"``: the LeRobot checkpoint, freeze options and from-scratch architecture."""
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "out_proj")
    """Names of the ``nn.Linear`` modules of the backbone that get LoRA adapters: SigLIP's attention; with
    ``hf-vlm`` also the decoder's ``q_proj, k_proj, v_proj`` (add ``o_proj``, Llama's output projection, for all of
    its attention)."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for an architecture that cannot be built."""
        for name in ("horizon", "num_inference_steps", "d_model", "num_heads", "num_layers", "mlp_ratio", "token_grid"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        expect(
            self.d_model % self.num_heads == 0,
            "d_model",
            f"must be divisible by num_heads ({self.num_heads}), got {self.d_model}",
        )
        emb = self.time_embed_dim
        expect(
            isinstance(emb, int) and emb >= 2 and emb % 2 == 0, "time_embed_dim", f"must be even and >= 2, got {emb}"
        )
        expect(
            isinstance(self.language_dim, int) and self.language_dim >= 0,
            "language_dim",
            f"must be an integer >= 0 (0: no language), got {self.language_dim}",
        )
        size = tuple(self.image_size)
        expect(
            len(size) == 2 and all(isinstance(s, int) and s >= 8 for s in size),
            "image_size",
            f"must be (H, W) with both >= 8, got {self.image_size}",
        )
        expect(
            len(self.cnn_channels) >= 1 and all(isinstance(c, int) and c >= 1 for c in self.cnn_channels),
            "cnn_channels",
            f"must be one or more integers >= 1, got {self.cnn_channels}",
        )
        self._check_backbone()
        cnn = self.backbone == "cnn"
        expect(
            self.image_tokens in ("grid", "keypoints"),
            "image_tokens",
            f"must be 'grid' or 'keypoints', got {self.image_tokens!r}",
        )
        if self.image_tokens == "keypoints":
            expect(
                cnn,
                "image_tokens",
                "'keypoints' needs backbone 'cnn': pretrained towers give grid tokens, set "
                "--agent.policy.image_tokens grid",
            )
            k = self.num_keypoints
            expect(isinstance(k, int) and k >= 1, "num_keypoints", f"must be an integer >= 1, got {k}")
        pooled = cnn and self.image_tokens == "grid"  # keypoints need no grid that divides the feature map
        if pooled and len(size) == 2 and self.cnn_channels and isinstance(self.token_grid, int) and self.token_grid:
            grid = [-(-s // 2 ** len(self.cnn_channels)) for s in size]  # stride-2 convolutions, padding 1
            expect(
                all(g % self.token_grid == 0 for g in grid),
                "token_grid",
                f"must divide the CNN's {grid[0]}x{grid[1]} feature map ({size[0]}x{size[1]} images after "
                f"{len(self.cnn_channels)} stride-2 convolutions), got {self.token_grid}: change token_grid, "
                "cnn_channels or image_size (pooling to a grid that does not divide it has no ONNX export)",
            )
        expect(len(set(self.cameras)) == len(self.cameras), "cameras", f"names a camera twice: {self.cameras}")
        expect(bool(self.state_group), "state_group", "must name an observation group (e.g. policy)")
        expect(
            self.objective in ("rectified_flow", "shortcut"),
            "objective",
            f"must be 'rectified_flow' or 'shortcut', got {self.objective!r}",
        )

    def trainable_layers(self) -> int | None:
        """N of ``backbone_trainable = "last:N"``; None for the other modes.

        Raises:
            ConfigError: ``backbone_trainable`` is not one of the modes.
        """
        mode = self.backbone_trainable
        if mode in ("frozen", "lora", "full"):
            return None
        head, _, count = str(mode).partition(":")
        expect(
            head == "last" and count.isdigit() and int(count) >= 1,
            "backbone_trainable",
            f"must be 'frozen', 'last:N' (N >= 1), 'lora' or 'full', got {mode!r}",
        )
        return int(count)

    def _check_backbone(self) -> None:
        expect(
            self.backbone in ("cnn", "hf-vision", "hf-vlm", "smolvla"),
            "backbone",
            f"must be 'cnn', 'hf-vision', 'hf-vlm' or 'smolvla', got {self.backbone!r}",
        )
        self.trainable_layers()
        self._check_smolvla()
        expect(
            isinstance(self.vlm_layers, int) and self.vlm_layers >= 0,
            "vlm_layers",
            f"must be an integer >= 0 (0: all decoder layers), got {self.vlm_layers}",
        )
        if self.backbone == "hf-vlm":
            self._check_vlm()
        elif self.backbone != "smolvla":
            expect(
                self.vlm_layers == 0,
                "vlm_layers",
                "applies to backbone 'hf-vlm' only: leave it 0, or set --agent.policy.backbone hf-vlm",
            )
        expect(
            isinstance(self.backbone_layers, int) and self.backbone_layers >= 0,
            "backbone_layers",
            f"must be an integer >= 0 (0: all layers), got {self.backbone_layers}",
        )
        expect(
            self.backbone_reduce in ("pool", "shuffle"),
            "backbone_reduce",
            f"must be 'pool' or 'shuffle', got {self.backbone_reduce!r}",
        )
        expect(
            isinstance(self.lora_rank, int) and self.lora_rank >= 1, "lora_rank", f"must be >= 1, got {self.lora_rank}"
        )
        alpha = self.lora_alpha
        expect(isinstance(alpha, int) and alpha >= 1, "lora_alpha", f"must be an integer >= 1, got {alpha}")
        drop = self.lora_dropout
        expect(finite(drop) and 0 <= drop < 1, "lora_dropout", f"must be in [0, 1), got {drop}")
        expect(len(self.lora_targets) >= 1, "lora_targets", "must name at least one module (e.g. q_proj,v_proj)")
        if self.backbone != "cnn":
            expect(
                bool(self.backbone_path),
                "backbone_path",
                f"must name a local transformers model directory (or a cached hub name) for backbone {self.backbone!r}",
            )

    def _check_smolvla(self) -> None:
        if self.backbone != "smolvla":
            expect(
                not self.smolvla.pretrained,
                "smolvla.pretrained",
                "loads a LeRobot SmolVLA checkpoint: set --agent.policy.backbone smolvla too",
            )
            return
        expect(
            self.backbone_trainable in ("frozen", "lora"),
            "backbone_trainable",
            "must be 'frozen' (LeRobot's freeze options --agent.policy.smolvla.* decide) or 'lora' with backbone "
            f"'smolvla', got {self.backbone_trainable!r}",
        )
        expect(len(self.cameras) >= 1, "cameras", "must name at least one camera with backbone 'smolvla'")
        expect(
            self.objective == "rectified_flow",
            "objective",
            "must be 'rectified_flow' with backbone 'smolvla' (it has no shortcut step input)",
        )

    def _check_vlm(self) -> None:
        expect(
            self.language_dim > 0,
            "language_dim",
            "must be > 0 with backbone 'hf-vlm': its decoder reads one instruction token (384 for MiniLM; "
            "--agent.policy.language_dim); without language use backbone 'hf-vision'",
        )
        expect(
            len(self.cameras) >= 1,
            "cameras",
            "must name at least one camera with backbone 'hf-vlm' (its decoder runs over the camera tokens)",
        )
        expect(
            self.backbone_reduce == "pool",
            "backbone_reduce",
            "must be 'pool' with backbone 'hf-vlm': its decoder takes text-width visual tokens, which pixel shuffle "
            "would widen (set token_grid to the connector's grid for no reduction)",
        )
