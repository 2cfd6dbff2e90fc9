"""SmolVLA's two towers, layer by layer: the VLM's text layers over the prefix (images, language, state) and the
action expert's layers over the noisy action tokens.

Layer ``i`` of the VLM runs self-attention within the prefix (image and language tokens see each other, the state
token sees them all: a prefix-LM mask) and keeps its keys (rotated) and values. Expert layer ``i`` then either
attends jointly to ``[prefix keys; action keys]`` with its own projections of the action tokens (self-attention
layers, every ``self_attn_every_n_layers``-th) or cross-attends to the prefix alone, re-projecting the VLM's keys
and values with its own ``k_proj`` / ``v_proj`` (all other layers). Action tokens attend causally among
themselves and never the other way: the prefix does not depend on the actions, so its keys and values are computed
once per observation (:class:`PrefixCache`) and reused by every Euler step of the sampler and by the loss, which
gives LeRobot's joint forward pass exactly.

Submodule names follow LeRobot's ``SmolVLMWithExpertModel`` (``vlm``, ``lm_expert``), so its weights load by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from rslkit.models.smolvla.attention import apply_rope, attention, prefix_lm_mask
from rslkit.models.smolvla.vlm import build_expert, build_vlm, is_self_attention_layer


@dataclass
class PrefixCache:
    """What the action expert reads of an observation: per VLM layer the prefix's rotated keys and values
    ``[B, P, Hkv, D]``, the prefix's padding mask ``[B, P]`` (True: a real token) and its final hidden states
    ``[B, P, W]`` (after the text model's norm)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    pad: torch.Tensor
    hidden: torch.Tensor

    @property
    def batch_size(self) -> int:
        """``B``."""
        return int(self.pad.shape[0])

    def features(self) -> torch.Tensor:
        """Mean of the final hidden states over the real prefix tokens ``[B, W]``."""
        weight = self.pad.to(self.hidden.dtype).unsqueeze(-1)
        return (self.hidden * weight).sum(1) / weight.sum(1).clamp_min(1.0)


def patch_position_ids(rows: int, cols: int, per_side: int, device: torch.device) -> torch.Tensor:
    """Position-embedding ids ``[rows * cols]`` of a full patch grid as ``transformers`` 4.x's SmolVLM / Idefics3
    vision embeddings compute them: fractional coordinates ``i / n * (1 - 1e-6)`` bucketed into ``per_side``
    buckets (which puts patch 1 in bucket 0 when ``n == per_side``; version 5 does not, and SmolVLA's weights and
    LeRobot's outputs follow 4.x)."""
    boundaries = torch.arange(1 / per_side, 1.0, 1 / per_side, device=device)
    h = torch.arange(rows, device=device, dtype=torch.float32) / rows * (1 - 1e-6)
    w = torch.arange(cols, device=device, dtype=torch.float32) / cols * (1 - 1e-6)
    bucket_h = torch.bucketize(h, boundaries, right=True)
    bucket_w = torch.bucketize(w, boundaries, right=True)
    return (bucket_h[:, None] * per_side + bucket_w).flatten()


class SmolVLMWithExpert(nn.Module):
    """The cut VLM and the action expert (module doc).

    Args:
        vlm_dir: local SmolVLM directory (config; weights are loaded later by the caller).
        num_vlm_layers: text layers kept (<= 0: all).
        width_multiplier: expert width / VLM text width.
        every_n: ``self_attn_every_n_layers`` (<= 0: cross-attention in every layer).
    """

    def __init__(self, vlm_dir: Any, num_vlm_layers: int, width_multiplier: float, every_n: int) -> None:
        super().__init__()
        self.vlm: Any = build_vlm(vlm_dir, num_vlm_layers)
        text = self.vlm.config.text_config
        self.num_layers = len(self.text_model.layers)
        self.lm_expert: Any = build_expert(text, width_multiplier, self.num_layers, every_n)
        self.every_n = every_n
        self.num_heads = int(text.num_attention_heads)
        self.head_dim = int(text.head_dim)
        self.width = int(text.hidden_size)
        self.expert_width = int(self.lm_expert.config.hidden_size)
        self.gradient_checkpointing = False
        """Recompute each layer in the backward pass (set by the policy from its settings)."""

    @property
    def text_model(self) -> Any:
        """The VLM's (cut) Llama text model."""
        return self.vlm.model.text_model

    def embed_image(self, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels [B, 3, H, W]`` in [-1, 1] -> visual tokens ``[B, T, W]`` (vision encoder + connector).

        The patch positions are computed as ``transformers`` 4.x does (:func:`patch_position_ids`), with which
        SmolVLA was trained and LeRobot runs: ``transformers`` 5 buckets them differently."""
        vision = self.vlm.model.vision_model
        embeddings = vision.embeddings
        patches = embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        size = embeddings.patch_size
        ids = patch_position_ids(pixels.shape[2] // size, pixels.shape[3] // size, embeddings.num_patches_per_side,
                                 pixels.device)  # fmt: skip
        hidden = patches + embeddings.position_embedding(ids)[None]
        hidden = vision.post_layernorm(vision.encoder(inputs_embeds=hidden).last_hidden_state)
        return self.vlm.model.connector(hidden)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids ``[B, L]`` -> embeddings ``[B, L, W]``."""
        return self.text_model.get_input_embeddings()(tokens)

    def _layer(self, index: int, hidden: torch.Tensor, fn: Any, *args: Any) -> Any:
        if self.gradient_checkpointing and torch.is_grad_enabled():
            return checkpoint(fn, index, hidden, *args, use_reentrant=False)
        return fn(index, hidden, *args)

    @staticmethod
    def _finish(layer: Any, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Output projection and residual, then the MLP block and its residual."""
        out = layer.self_attn.o_proj(attended) + hidden
        return layer.mlp(layer.post_attention_layernorm(out)) + out

    @staticmethod
    def _qkv(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[B, L, H, D]`` queries and ``[B, L, Hkv, D]`` keys and values of a Llama layer's normed input."""
        h = layer.input_layernorm(hidden)
        shape = (*h.shape[:-1], -1, layer.self_attn.head_dim)
        return (layer.self_attn.q_proj(h).view(shape), layer.self_attn.k_proj(h).view(shape),
                layer.self_attn.v_proj(h).view(shape))  # fmt: skip

    def prefix(self, embeddings: torch.Tensor, pad: torch.Tensor, blocks: torch.Tensor) -> PrefixCache:
        """Run the VLM's layers over the prefix ``embeddings [B, P, W]`` with padding ``pad [B, P]`` and attention
        blocks ``blocks [B, P]`` (:func:`~rslkit.models.smolvla.attention.prefix_lm_mask`)."""
        positions = torch.cumsum(pad.long(), dim=1) - 1
        mask = prefix_lm_mask(pad, blocks)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        hidden = embeddings
        for index in range(self.num_layers):
            hidden, key, value = self._layer(index, hidden, self._prefix_layer, positions, mask)
            keys.append(key)
            values.append(value)
        return PrefixCache(keys, values, pad, self.text_model.norm(hidden))

    def _prefix_layer(
        self, index: int, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        layer = self.text_model.layers[index]
        query, key, value = self._qkv(layer, hidden)
        query, key = apply_rope(query, positions), apply_rope(key, positions)
        out = self._finish(layer, hidden, attention(mask, query, key, value, self.num_heads))
        return out, key, value

    def suffix(self, embeddings: torch.Tensor, cache: PrefixCache) -> torch.Tensor:
        """Run the expert's layers over the action tokens ``embeddings [B, S, E]`` against the prefix ``cache``;
        returns their final hidden states ``[B, S, E]`` (after the expert's norm)."""
        b, s = embeddings.shape[:2]
        device = embeddings.device
        steps = torch.arange(s, device=device)
        causal = (steps[None, :] <= steps[:, None]).expand(b, s, s)
        prefix_mask = cache.pad[:, None, :].expand(b, s, cache.pad.shape[1])
        joint_mask = torch.cat([prefix_mask, causal], dim=2)
        joint_positions = cache.pad.long().sum(-1, keepdim=True) + steps[None, :]
        cross_positions = steps[None, :].expand(b, s)
        hidden = embeddings
        for index in range(self.num_layers):
            if is_self_attention_layer(index, self.every_n):
                hidden = self._layer(index, hidden, self._joint_layer, cache.keys[index], cache.values[index],
                                     joint_positions, joint_mask)  # fmt: skip
            else:
                hidden = self._layer(index, hidden, self._cross_layer, cache.keys[index], cache.values[index],
                                     cross_positions, prefix_mask)  # fmt: skip
        return self.lm_expert.norm(hidden)

    def _joint_layer(
        self,
        index: int,
        hidden: torch.Tensor,
        prefix_keys: torch.Tensor,
        prefix_values: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Self-attention layer: the action tokens attend to ``[prefix; actions]``."""
        layer = self.lm_expert.layers[index]
        query, key, value = self._qkv(layer, hidden)
        query, key = apply_rope(query, positions), apply_rope(key, positions)
        key, value = torch.cat([prefix_keys, key], dim=1), torch.cat([prefix_values, value], dim=1)
        return self._finish(layer, hidden, attention(mask, query, key, value, self.num_heads))

    def _cross_layer(
        self,
        index: int,
        hidden: torch.Tensor,
        prefix_keys: torch.Tensor,
        prefix_values: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Cross-attention layer: the action tokens attend to the prefix through the expert's own projections of
        the VLM layer's (rotated) keys and values; the queries are rotated from position 0."""
        layer = self.lm_expert.layers[index]
        attn = layer.self_attn
        h = layer.input_layernorm(hidden)
        query = apply_rope(attn.q_proj(h).view(*h.shape[:-1], -1, attn.head_dim), positions)
        b, p = prefix_keys.shape[:2]
        key = attn.k_proj(prefix_keys.reshape(b, p, -1)).view(b, p, -1, attn.head_dim)
        value = attn.v_proj(prefix_values.reshape(b, p, -1)).view(b, p, -1, attn.head_dim)
        return self._finish(layer, hidden, attention(mask, query, key, value, self.num_heads))
