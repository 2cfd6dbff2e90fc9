"""The VLM of SmolVLA: ``transformers``' SmolVLM (vision encoder, pixel-shuffle connector, Llama text model) built
from a local model directory's config, with random weights (a checkpoint's weights are loaded over them), its text
model cut to its first N layers as LeRobot does; and the expert's text config derived from it.

Nothing downloads: the directory (``--agent.policy.backbone_path``) holds the SmolVLM2 ``config.json`` and the
tokenizer files, e.g. ``hf download HuggingFaceTB/SmolVLM2-500M-Video-Instruct --local-dir DIR`` once.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from torch import nn

from rslkit.models.vla.hf_backbone import checkpoint_type, resolve_model_dir

_INSTALL_HINT = "pip install -e '.[vla]'"
_VLM_TYPES = ("smolvlm",)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as err:
        raise ImportError(f"SmolVLA needs transformers: {_INSTALL_HINT}.") from err
    return transformers


def vlm_directory(name: str) -> Path:
    """The local directory of the VLM ``name`` (a directory or a cached hub name), checked to be a SmolVLM.

    Raises:
        FileNotFoundError: not found locally (never downloaded) or without ``config.json``.
        ValueError: another ``model_type``.
    """
    directory = resolve_model_dir(name)
    model_type = checkpoint_type(directory)
    if model_type not in _VLM_TYPES:
        raise ValueError(
            f"--agent.policy.backbone_path {name!r} is a {model_type!r} model; SmolVLA's VLM is a SmolVLM "
            "(model_type 'smolvlm', e.g. HuggingFaceTB/SmolVLM2-500M-Video-Instruct saved to a local directory)."
        )
    return directory


def vision_image_size(directory: Path) -> int:
    """The side of the square images the VLM's vision encoder was made for (``vision_config.image_size``)."""
    config = json.loads((directory / "config.json").read_text())
    return int(config.get("vision_config", {}).get("image_size", 512))


def build_vlm(directory: Path, num_vlm_layers: int) -> Any:
    """``SmolVLMForConditionalGeneration`` of ``directory``'s config with random weights, its text model cut to
    the first ``num_vlm_layers`` layers (<= 0: all).

    Raises:
        ValueError: more layers asked for than the text model has.
    """
    transformers = _transformers()
    config = transformers.AutoConfig.from_pretrained(str(directory), local_files_only=True)
    vlm = transformers.SmolVLMForConditionalGeneration(config)
    layers = vlm.model.text_model.layers
    if num_vlm_layers > len(layers):
        raise ValueError(
            f"num_vlm_layers is {num_vlm_layers} but the VLM at {directory} has {len(layers)} text layers: pass the "
            "VLM the checkpoint was trained from as --agent.policy.backbone_path (SmolVLA keeps 16 of "
            "SmolVLM2-500M's 32), or for a new policy set --agent.policy.vlm_layers <= "
            f"{len(layers)}."
        )
    if num_vlm_layers > 0:
        vlm.model.text_model.layers = layers[:num_vlm_layers]
    return vlm


def expert_intermediate_size(width: int, multiplier: int = 4, multiple_of: int = 256) -> int:
    """The expert MLP's hidden size for a ``width``-wide expert (LeRobot's ``get_intermediate_size``)."""
    hidden = int(multiplier * int(2 * width / 3))
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def expert_config(text_config: Any, width_multiplier: float, num_layers: int) -> Any:
    """The action expert's Llama config: the VLM text config at ``width_multiplier`` of its width (same heads and
    head size), ``num_layers`` layers."""
    config = copy.deepcopy(text_config)
    width = int(text_config.hidden_size * width_multiplier)
    config.hidden_size = width
    config.intermediate_size = expert_intermediate_size(width)
    config.num_hidden_layers = num_layers
    return config


def build_expert(text_config: Any, width_multiplier: float, num_layers: int, every_n: int) -> Any:
    """The action expert: a Llama text model (no token embeddings) whose cross-attention layers (all but every
    ``every_n``-th; all when ``every_n <= 0``) read the VLM layer's keys/values through their own ``k_proj`` /
    ``v_proj`` from the VLM's key/value width."""
    transformers = _transformers()
    config = expert_config(text_config, width_multiplier, num_layers)
    expert = transformers.AutoModel.from_config(config)
    kv_in = text_config.num_key_value_heads * text_config.head_dim
    kv_out = config.num_key_value_heads * config.head_dim
    for index, layer in enumerate(expert.layers):
        if is_self_attention_layer(index, every_n):
            continue
        layer.self_attn.k_proj = nn.Linear(kv_in, kv_out, bias=config.attention_bias)
        layer.self_attn.v_proj = nn.Linear(kv_in, kv_out, bias=config.attention_bias)
    expert.embed_tokens = None
    return expert


def is_self_attention_layer(index: int, every_n: int) -> bool:
    """Whether layer ``index`` attends jointly over [prefix, actions] (else: the expert cross-attends)."""
    return every_n > 0 and index % every_n == 0


def load_tokenizer(directory: Path) -> Any:
    """The VLM's tokenizer from ``directory`` (local files only)."""
    return _transformers().AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
