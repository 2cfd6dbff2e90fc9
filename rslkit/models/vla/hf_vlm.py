"""A pretrained VLM's first text decoder layers over the camera, instruction and state tokens (SmolVLA's prefix).

For a ``smolvlm`` / ``idefics3`` checkpoint (SmolVLM2, SmolVLM, Idefics3), ``backbone="hf-vlm"`` keeps what
``hf-vision`` keeps (the vision model and the pixel-shuffle connector, :class:`~rslkit.models.vla.hf_backbone.
VisionTower`) and also the first ``vlm_layers`` layers of the text decoder and its final norm. The prefix it runs them
over, ``L = cameras * token_grid**2 + 2`` tokens of the text width ``D``::

    [visual tokens of camera 1 (G*G), camera 2 ..., instruction, state]

- visual tokens: the connector's output (already ``D`` wide), average-pooled to ``token_grid`` per side;
- instruction: ``Linear(E -> D)`` of the normalized sentence embedding (the instruction stays a MiniLM embedding
  everywhere: datasets, runners, exports; the VLM's token embeddings are not used);
- state: ``Linear(S -> D), GELU, Linear(D -> D)`` of the normalized state.

The decoder layers run with the text model's own rotary position embeddings at positions ``0..L-1`` and full
(bidirectional) attention over the prefix, as SmolVLA and pi0 attend within their prefix: an explicit all-zero
additive mask (a missing mask would make the Llama attention causal). Their output after the final norm is
projected to ``d_model`` (always trained): the observation tokens the action expert attends to. Positions and mask
are buffers of the fixed length ``L``, nothing depends on the data, so the policy exports to ONNX (SDPA attention).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rslkit.models.vla.backbone_tuning import configure_trainable
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.hf_backbone import (
    VisionTower,
    check_token_grid,
    checkpoint_type,
    load_model,
    reduce_grid,
    resolve_model_dir,
    tower_input,
)

_VLMS = {"smolvlm": "SmolVLMModel", "idefics3": "Idefics3Model"}
"""``model_type`` -> the ``transformers`` class whose vision model, connector and text decoder are kept."""


class PrefixDecoder(nn.Module):
    """``[B, L, D]`` -> ``[B, L, D]``: the first layers of a pretrained text decoder and its final norm, with full
    attention over a prefix of ``length`` tokens and rotary positions ``0..L-1``.

    Args:
        text_model: the VLM's ``transformers`` text model (``LlamaModel`` for SmolVLM): ``layers``, ``norm``,
            ``rotary_emb``.
        num_layers: keep its first N decoder layers.
        length: prefix length ``L``.
    """

    def __init__(self, text_model: Any, num_layers: int, length: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(list(text_model.layers)[:num_layers])
        self.norm: Any = text_model.norm
        self.rotary_emb: Any = text_model.rotary_emb
        self.width = int(text_model.config.hidden_size)
        self.register_buffer("position_ids", torch.arange(length).unsqueeze(0), persistent=False)
        self.register_buffer("mask", torch.zeros(1, 1, length, length), persistent=False)
        self.position_ids: torch.Tensor
        self.mask: torch.Tensor
        """Additive attention mask, 0 everywhere: every prefix token attends to every other one."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden [B, L, D]`` (prefix embeddings) -> hidden states after the kept layers and the final norm."""
        cos_sin = self.rotary_emb(hidden, self.position_ids)
        mask = self.mask.to(hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, position_ids=self.position_ids, position_embeddings=cos_sin)
        return self.norm(hidden)


class HFVLMTokenizer(nn.Module):
    """``state [B, S]``, ``language [B, E]``, ``images {camera: [B, 3, H, W]}`` -> ``[B, L, d]`` through a
    pretrained VLM (module doc): the whole observation token sequence of ``backbone="hf-vlm"``.

    The pretrained part (vision model, connector, kept decoder layers) is frozen, partly trained (``last:N``: the
    last N decoder layers and the final norm), LoRA-adapted or trained in full per ``cfg.backbone_trainable``
    (:func:`~rslkit.models.vla.backbone_tuning.configure_trainable`); the state and instruction embeddings and the
    output projection always train.

    Args:
        state_dim: size of the normalized state.
        cfg: the policy's architecture (``backbone_*``, ``vlm_layers``, ``lora_*``, ``token_grid``, ``cameras``,
            ``language_dim``, ``d_model``).

    Raises:
        ValueError: a checkpoint that is not a SmolVLM / Idefics3, ``vlm_layers`` over the decoder's layer count,
            a checkpoint without the kept decoder weights, or a ``token_grid`` that does not divide the
            connector's grid.
    """

    def __init__(self, state_dim: int, cfg: VLAPolicyCfg) -> None:
        super().__init__()
        name = cfg.backbone_path
        directory = resolve_model_dir(name)
        model_type = checkpoint_type(directory)
        if model_type not in _VLMS:
            raise ValueError(
                f"The backbone {name!r} is a {model_type!r} model; hf-vlm runs a VLM's text decoder and takes "
                f"{sorted(_VLMS)} checkpoints (SmolVLM / SmolVLM2 / Idefics3). For a vision-only model use "
                "--agent.policy.backbone hf-vision."
            )
        model, missing = load_model(directory, _VLMS[model_type])
        self.tower = VisionTower(str(directory), cfg.backbone_layers, loaded=(model, missing))
        kept = self._kept_layers(model.text_model, cfg.vlm_layers, missing, name)
        check_token_grid(cfg.token_grid, self.tower.grid, name)
        self.cameras = tuple(cfg.cameras)
        self.grid = cfg.token_grid
        self.num_tokens = len(self.cameras) * self.grid**2 + 2
        self.decoder = PrefixDecoder(model.text_model, kept, self.num_tokens)
        width = self.decoder.width
        if self.tower.width != width:
            raise ValueError(
                f"{name!r}: its connector gives {self.tower.width}-wide tokens, its decoder takes {width}."
            )
        self.register_buffer("mean", torch.tensor(self.tower.mean).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(self.tower.std).view(1, 3, 1, 1))
        self.mean: torch.Tensor
        self.std: torch.Tensor
        self.language = nn.Linear(cfg.language_dim, width)
        self.state = nn.Sequential(nn.Linear(state_dim, width), nn.GELU(), nn.Linear(width, width))
        self.proj = nn.Linear(width, cfg.d_model)
        self.frozen = cfg.backbone_trainable == "frozen"
        pretrained = nn.ModuleList([self.tower, self.decoder])  # a view for the tuning helper, not a submodule
        configure_trainable(pretrained, cfg, self.decoder.layers, [self.decoder.norm])

    @staticmethod
    def _kept_layers(text_model: Any, vlm_layers: int, missing: list[str], name: str) -> int:
        """How many decoder layers to keep (``vlm_layers``, 0: all), checked against the checkpoint."""
        total = len(text_model.layers)
        if vlm_layers > total:
            raise ValueError(
                f"vlm_layers is {vlm_layers} but {name!r}'s text decoder has {total} layers: set "
                f"--agent.policy.vlm_layers {total} or fewer (0: all; SmolVLA keeps half, {max(total // 2, 1)})."
            )
        kept = vlm_layers or total
        needed = ("text_model.norm.", *(f"text_model.layers.{i}." for i in range(kept)))
        lost = [k for k in missing if k.startswith(needed)]
        if lost:
            raise ValueError(
                f"The checkpoint {name!r} lacks weights of its text decoder ({lost[:4]}...): it would run with "
                "random weights. Save the whole model (model.save_pretrained) or use another checkpoint."
            )
        return kept

    def layout(self) -> list[tuple[str, slice]]:
        """``[(name, token slice), ...]``: ``camera_<name>`` ..., ``instruction``, ``state`` in token order."""
        per = self.grid**2
        out = [(f"camera_{c}", slice(i * per, (i + 1) * per)) for i, c in enumerate(self.cameras)]
        start = len(self.cameras) * per
        return [*out, ("instruction", slice(start, start + 1)), ("state", slice(start + 1, start + 2))]

    def train(self, mode: bool = True) -> HFVLMTokenizer:
        """Train mode for the trained parts; a frozen VLM stays in eval mode (no dropout on fixed features)."""
        super().train(mode)
        if self.frozen:
            self.tower.eval()
            self.decoder.eval()
        return self

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """``images [B, 3, H, W]`` in ``[0, 1]`` -> the tower's input ``[B, 3, S, S]`` (resized, normalized)."""
        return tower_input(images, self.tower.image_size, self.mean, self.std)

    def prefix(self, state: torch.Tensor, language: torch.Tensor, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """The decoder's input ``[B, L, D]``: visual tokens of every camera, the instruction, the state.

        One tower call per camera: a camera-major batch unflattened back to ``[B, C*T, D]`` leaves the ONNX
        exporter a batch size it infers as the traced one (1), which it then bakes into the decoder's reshapes."""
        visual = [reduce_grid(self.tower(self.preprocess(images[c])), self.tower.grid, self.grid, "pool")
                  for c in self.cameras]  # fmt: skip
        return torch.cat([*visual, self.language(language).unsqueeze(1), self.state(state).unsqueeze(1)], dim=1)

    def forward(
        self, state: torch.Tensor, language: torch.Tensor | None, images: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``state [B, S]``, ``language [B, E]``, ``images {camera: [B, 3, H, W]}`` -> tokens ``[B, L, d]``."""
        if language is None:
            raise ValueError("An hf-vlm policy reads an instruction embedding; pass one (the 'instruction' group).")
        return self.proj(self.decoder(self.prefix(state, language, images)))
