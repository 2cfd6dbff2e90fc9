"""``package.module:attribute`` plug-in names: import, factory calls with settings, and errors naming the flag."""

from __future__ import annotations

import pytest

from rslkit.utils.plugins import load_plugin, split_plugin_name


def test_split_names_module_attribute_and_factory_call() -> None:
    assert split_plugin_name("a.b:c", "--x") == ("a.b", "c", False)
    assert split_plugin_name("a.b:make()", "--x") == ("a.b", "make", True)


@pytest.mark.parametrize("name", ["nocolon", ":attr", "mod:", "mod:a:b", "mod:not-an-identifier"])
def test_malformed_names_name_the_flag(name: str) -> None:
    with pytest.raises(ValueError, match="--actor.reward must be package.module:attribute"):
        split_plugin_name(name, "--actor.reward")


def test_loads_an_attribute_and_calls_a_factory_with_settings() -> None:
    assert load_plugin("os.path:join", "--x") is __import__("os").path.join
    assert load_plugin("collections:OrderedDict()", "--x", kwargs={"a": 1}) == {"a": 1}


def test_errors_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="--task no_such_module_xyz:f: cannot import"):
        load_plugin("no_such_module_xyz:f", "--task")
    with pytest.raises(ValueError, match="has no attribute 'nothing'"):
        load_plugin("os:nothing", "--task")
    with pytest.raises(ValueError, match="name a factory that takes them"):
        load_plugin("os:getcwd", "--x", kwargs={"a": 1})
    with pytest.raises(ValueError, match="not a factory to call"):
        load_plugin("os:sep()", "--x")
