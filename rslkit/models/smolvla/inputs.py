"""SmolVLA's input preprocessing as LeRobot does it: images resized with padding and scaled to [-1, 1] per
checkpoint camera (empty cameras as all -1 images with a False mask), instructions tokenized with a newline to
a fixed length, state and actions zero-padded to the model's max dims.

Instructions longer than ``tokenizer_max_length`` tokens are refused: LeRobot truncates them without a word,
which silently changes what the policy is told.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F


def resize_with_pad(images: torch.Tensor, width: int, height: int, pad_value: float = 0.0) -> torch.Tensor:
    """``[B, C, H, W]`` -> ``[B, C, height, width]``: bilinear resize keeping the aspect ratio, then padding on
    the left and top (LeRobot's ``resize_with_pad``)."""
    h, w = images.shape[2:]
    ratio = max(w / width, h / height)
    new_h, new_w = int(h / ratio), int(w / ratio)
    resized = F.interpolate(images, size=(new_h, new_w), mode="bilinear", align_corners=False)
    return F.pad(resized, (max(0, width - new_w), 0, max(0, height - new_h), 0), value=pad_value)


def prepare_images(
    images: dict[str, torch.Tensor], cameras: Sequence[str], size: tuple[int, int], empty_cameras: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The VLM's images and their masks: the given ``images`` (checkpoint camera -> ``[B, 3, H, W]`` in [0, 1])
    in the checkpoint's ``cameras`` order, resized with padding to ``size = (width, height)`` and scaled to
    [-1, 1], then ``empty_cameras`` all -1 images with False masks.

    A checkpoint camera without images is left out, as in LeRobot: its tokens would be padding, which no token
    attends to and which shifts no position, so leaving it out and an empty image give the same outputs.

    Raises:
        ValueError: no image at all.
    """
    present = [c for c in cameras if c in images]
    if not present:
        raise ValueError(f"SmolVLA needs at least one of its cameras {list(cameras)}; got {sorted(images)}.")
    out, masks = [], []
    for camera in present:
        pixels = resize_with_pad(images[camera], *size, pad_value=0.0) * 2.0 - 1.0
        out.append(pixels)
        masks.append(torch.ones(pixels.shape[0], dtype=torch.bool, device=pixels.device))
    for _ in range(empty_cameras):
        out.append(-torch.ones_like(out[0]))
        masks.append(torch.zeros_like(masks[0]))
    return out, masks


def pad_vector(x: torch.Tensor, size: int) -> torch.Tensor:
    """Zero-pad the last dimension of ``x`` to ``size``."""
    if x.shape[-1] == size:
        return x
    return F.pad(x, (0, size - x.shape[-1]))


def tokenize(texts: Sequence[str], tokenizer: Any, max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [G, max_length], mask [G, max_length] bool)`` of instructions, each ending in a newline (as LeRobot's
    SmolVLA preprocessor writes them), right-padded.

    Raises:
        ValueError: an instruction longer than ``max_length`` tokens (LeRobot would truncate it).
    """
    texts = [t if t.endswith("\n") else f"{t}\n" for t in texts]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]]
    long = [(t.strip(), n) for t, n in zip(texts, lengths, strict=True) if n > max_length]
    if long:
        text, n = long[0]
        raise ValueError(
            f"The instruction {text!r} is {n} tokens, the policy reads at most tokenizer_max_length = {max_length}: "
            "shorten the dataset's task texts (LeRobot would cut it off silently), or for a new policy set "
            "--agent.policy.smolvla.tokenizer_max_length."
        )
    enc = tokenizer(texts, padding="max_length", max_length=max_length, padding_side="right", return_tensors="pt")
    return enc["input_ids"].long(), enc["attention_mask"].bool()
