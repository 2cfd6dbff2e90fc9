"""Which weights of a pretrained backbone train: none, the last layers, low-rank adapters (LoRA) or all.

LoRA (Hu et al. 2021) replaces ``y = W x`` of each targeted linear layer by ``y = W x + (alpha / r) B A x`` with
``A [r, in]`` random, ``B [out, r]`` zero at the start (so the adapted tower starts as the pretrained one) and only
``A``, ``B`` trained: ``W`` stays bit-identical. The adapters are ``peft``'s (``inject_adapter_in_model``), so
they also load into ``peft`` / ``transformers`` tools; their weights sit in the policy's state dict
(``...q_proj.lora_A.default.weight``) beside the frozen ``...q_proj.base_layer.weight``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from rslkit.models.vla.config import VLAPolicyCfg


def linear_names(module: nn.Module) -> list[str]:
    """Sorted last names of the ``nn.Linear`` submodules of ``module`` (what ``lora_targets`` may name)."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in module.named_modules() if isinstance(m, nn.Linear)})


def add_lora(module: nn.Module, rank: int, alpha: int, dropout: float, targets: tuple[str, ...]) -> None:
    """Inject LoRA adapters into the linear layers of ``module`` named ``targets``, in place; freeze the rest.

    Raises:
        ImportError: ``peft`` is missing.
        ValueError: a target names no linear layer of ``module`` (the message lists those it has).
    """
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as err:
        raise ImportError("backbone_trainable 'lora' needs peft: pip install -e '.[vla]'.") from err
    names = linear_names(module)
    unknown = [t for t in targets if t not in names]
    if unknown:
        raise ValueError(
            f"lora_targets {unknown} name no linear layer of the backbone; set --agent.policy.lora_targets to some "
            f"of {names}."
        )
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets), bias="none")
    inject_adapter_in_model(config, module)


def configure_trainable(
    model: nn.Module, cfg: VLAPolicyCfg, layers: nn.ModuleList, tail: Sequence[nn.Module | None]
) -> None:
    """Set ``requires_grad`` on a pretrained ``model`` per ``cfg.backbone_trainable``.

    ``frozen``: nothing trains; ``last:N``: the last N of ``layers`` and the ``tail`` modules after them (a vision
    tower's final LayerNorm and connector; a VLM decoder's final norm); ``lora``: only the adapters
    (:func:`add_lora` on all of ``model``); ``full``: everything.

    Raises:
        ValueError: ``last:N`` with more layers than ``layers`` holds.
    """
    mode = cfg.backbone_trainable
    last = cfg.trainable_layers()
    model.requires_grad_(mode == "full")
    if mode == "lora":
        add_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_targets))
    elif last is not None:
        if last > len(layers):
            raise ValueError(
                f"backbone_trainable {mode!r} but the backbone keeps {len(layers)} layers: set last:N with N <= "
                f"{len(layers)} (or 'full')."
            )
        for module in [*layers[len(layers) - last :], *tail]:
            if module is not None:
                module.requires_grad_(True)
