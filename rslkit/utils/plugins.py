"""``package.module:attribute`` names: the one way a user's code (a task, a reward function) is named on the
command line and imported. Torch-free."""

from __future__ import annotations

import importlib
from typing import Any


def split_plugin_name(name: str, flag: str) -> tuple[str, str, bool]:
    """``(module, attribute, call)`` of ``package.module:attribute`` or ``package.module:factory()``.

    Raises:
        ValueError: a name without exactly one module and one attribute part (names ``flag``).
    """
    module_name, sep, attr = name.partition(":")
    call = attr.endswith("()")
    attr = attr.removesuffix("()")
    if not sep or not module_name or not attr or ":" in attr or not attr.isidentifier():
        raise ValueError(f"{flag} must be package.module:attribute (or package.module:factory()), got {name!r}.")
    return module_name, attr, call


def load_plugin(name: str, flag: str, *, kwargs: dict[str, Any] | None = None) -> Any:
    """Import the object ``package.module:attribute`` names; ``package.module:factory()`` calls the factory (with
    ``kwargs``, the plug-in's typed settings) and returns its result.

    Args:
        name: the plug-in's name as the user typed it.
        flag: the command-line flag that carried it, named in every error (``--actor.reward``).
        kwargs: keyword arguments of a factory; refused for a name that is not a factory call.

    Raises:
        ValueError: a malformed name, a module that does not import, a missing attribute, or keyword arguments for
            a name that does not end in ``()``.
    """
    module_name, attr, call = split_plugin_name(name, flag)
    if kwargs and not call:
        raise ValueError(f"{flag} {name}: settings were given, so name a factory that takes them: {name}().")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"{flag} {name}: cannot import {module_name!r} ({err}); install its package or run from the folder "
            "that holds it."
        ) from err
    if not hasattr(module, attr):
        raise ValueError(f"{flag} {name}: module {module_name!r} has no attribute {attr!r}.")
    obj = getattr(module, attr)
    if not call:
        return obj
    if not callable(obj):
        raise ValueError(f"{flag} {name}: {module_name}.{attr} is a {type(obj).__name__}, not a factory to call.")
    return obj(**(kwargs or {}))
