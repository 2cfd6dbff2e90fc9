"""Typed dataclass configs and command-line overrides (``--agent.algorithm.learning_rate 3e-4``)."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


def to_dict(cfg: Any) -> dict[str, Any]:
    """Return a plain, JSON-friendly dict of a (nested) dataclass config."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuild a (nested) dataclass of type ``cls`` from :func:`to_dict` output.

    Raises:
        ValueError: if ``data`` holds a key the dataclass does not define.
    """
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"Config {cls.__name__} has no field(s) {sorted(unknown)}; known fields: {sorted(names)}.")
    kwargs = {}
    for name, value in data.items():
        typ = hints[name]
        if isinstance(typ, type) and dataclasses.is_dataclass(typ) and isinstance(value, dict):
            kwargs[name] = from_dict(typ, value)
        elif get_origin(typ) is tuple and isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


def field_paths(cfg: Any, prefix: str = "") -> list[str]:
    """All dotted field paths of a nested dataclass (leaves only)."""
    paths = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            paths += field_paths(value, path + ".")
        else:
            paths.append(path)
    return paths


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean (true/false), got {text!r}")


def parse_value(text: str, typ: Any) -> Any:
    """Parse the command-line string ``text`` into a value of type ``typ``.

    Supports bool, int, float, str, Literal, Optional/unions with None (``none``), and tuples/lists
    written as comma-separated values (``256,256`` or ``[256, 256]``).
    """
    origin = get_origin(typ)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(typ) if a is not type(None)]
        if text.lower() in ("none", "null"):
            return None
        errors = []
        for arg in args:
            try:
                return parse_value(text, arg)
            except ValueError as err:
                errors.append(str(err))
        raise ValueError("; ".join(errors))
    if origin is Literal:
        choices = get_args(typ)
        for choice in choices:
            if str(choice) == text:
                return choice
        raise ValueError(f"expected one of {list(choices)}, got {text!r}")
    if origin in (tuple, list):
        inner = get_args(typ)[0] if get_args(typ) else str
        stripped = text.strip().strip("[]()")
        items = [item.strip() for item in stripped.split(",") if item.strip()]
        values = [parse_value(item, inner) for item in items]
        return tuple(values) if origin is tuple else values
    if typ is bool:
        return _parse_bool(text)
    if typ is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
    if typ is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
    if typ is str or typ is typing.Any:
        return text
    raise ValueError(f"cannot parse a value of type {typ} from the command line")


def _leaf(cfg: Any, path: str, prefix: str) -> tuple[Any, str, Any]:
    """``(node, name, type)`` of the field at dotted ``path`` of ``cfg``: ``setattr(node, name, value)`` sets it.

    Raises:
        ValueError: for an unknown field (with close matches) or a path that ends at a group of settings.
    """
    parts = path.split(".")
    node = cfg
    dot = f"{prefix}." if prefix else ""
    for depth, name in enumerate(parts):
        if not dataclasses.is_dataclass(node) or name not in {f.name for f in dataclasses.fields(node)}:
            known = field_paths(cfg)
            close = [dot + c for c in difflib.get_close_matches(path, known, n=3)]
            hint = f" Did you mean: {', '.join(close)}?" if close else f" Known fields: {', '.join(known)}."
            raise ValueError(f"Unknown config field '{dot}{path}'.{hint}")
        if depth < len(parts) - 1:
            node = getattr(node, name)
    typ = get_type_hints(type(node))[parts[-1]]
    if dataclasses.is_dataclass(typ):
        raise ValueError(f"'{dot}{path}' is a group of settings; set one of its fields, e.g. '{dot}{path}.<field>'.")
    return node, parts[-1], typ


def set_field(cfg: Any, path: str, text: str, prefix: str = "") -> None:
    """Set the field at dotted ``path`` (relative to ``cfg``) from its command-line string.

    ``prefix`` (``agent``, ``env``) is where ``cfg`` sits on the command line; messages name the full path.

    Raises:
        ValueError: for an unknown field (with close matches) or a value of the wrong type.
    """
    node, name, typ = _leaf(cfg, path, prefix)
    try:
        setattr(node, name, parse_value(text, typ))
    except ValueError as err:
        raise ValueError(f"Bad value for '{prefix + '.' if prefix else ''}{path}': {err}") from None


def _fits(value: Any, typ: Any) -> bool:
    """Whether the Python ``value`` is of the field type ``typ`` (the types :func:`parse_value` reads)."""
    origin = get_origin(typ)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in get_args(typ))
    if origin is Literal:
        return value in get_args(typ)
    if origin in (tuple, list):
        inner = get_args(typ)[0] if get_args(typ) else typing.Any
        return isinstance(value, origin) and all(_fits(item, inner) for item in value)
    if typ is typing.Any:
        return True
    if typ is type(None):
        return value is None
    if typ is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or typ)


def apply_settings(cfg: Any, settings: dict[str, Any], prefix: str = "") -> None:
    """Set typed values on ``cfg``: ``{"cameras": ("table",), "sim": "mujoco"}`` (dotted paths relative to ``cfg``),
    the code's counterpart of :func:`apply_overrides` (recipes' env settings are applied this way).

    Raises:
        ValueError: for an unknown field or a value not of the field's type (names ``<prefix>.<path>``).
    """
    dot = f"{prefix}." if prefix else ""
    for path, value in settings.items():
        node, name, typ = _leaf(cfg, path, prefix)
        if not _fits(value, typ):
            raise ValueError(
                f"Bad value for '{dot}{path}': {value!r} is not of its type {getattr(typ, '__name__', typ)}."
            )
        setattr(node, name, value)


def apply_overrides(root: dict[str, Any], args: list[str]) -> None:
    """Apply ``--prefix.field value`` / ``--prefix.field=value`` overrides to named config roots.

    Args:
        root: maps a prefix (``"env"``, ``"agent"``) to its dataclass config.
        args: remaining command-line tokens.

    Raises:
        ValueError: for tokens that are not overrides, unknown prefixes or fields, or missing values.
    """
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            raise ValueError(f"Unexpected argument {token!r}; overrides look like '--agent.algorithm.gamma 0.98'.")
        key = token[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ValueError(f"Override {token!r} needs a value.")
            value = args[i + 1]
            i += 2
        prefix, _, path = key.partition(".")
        if prefix not in root or not path:
            raise ValueError(
                f"Unknown option {token!r}. Config overrides start with one of: "
                f"{', '.join('--' + p + '.' for p in root)} (see --help)."
            )
        set_field(root[prefix], path, value, prefix)


def refuse_renamed(args: list[str], renamed: dict[str, str], note: str = "") -> None:
    """Refuse a flag of an earlier version (``--old`` or ``--old=value``) that ``renamed`` maps to its spelling now.

    Raises:
        ValueError: ``--old was renamed: use --new`` and ``note``.
    """
    for token in args:
        old = token.split("=", 1)[0]
        if old in renamed:
            raise ValueError(f"{old} was renamed: use {renamed[old]}{note}.")
