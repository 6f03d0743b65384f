"""Layer paths from TensorFlow op names for the TF frontend (Keras name-scope suffixes undone).

A Keras layer's ops live under its name scope, uniquified by the graph: ``dense`` becomes
``dense_1`` when the name is taken. Keras 3 opens each layer's scope twice per call (once
to build, once to call), so its ops always carry a suffix (``fc1`` -> ``fc1_1``, and a layer
named ``dense_1`` -> ``dense_1_2``); tf_keras and ``tf.Module`` open it once (``fc1``). An op
name is matched component by component against the layer tree, each component being a
child layer's name with an optional ``_N``; components that match no child (TensorFlow's
own sub-scopes such as ``Tensordot`` or ``moments``) end the path, as does the op's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

__all__ = ["Scopes"]


class _Layer:
    __slots__ = ("name", "component", "obj", "children")

    def __init__(self, name: str, component: str, obj: Any) -> None:
        self.name = name
        self.component = component
        self.obj = obj
        self.children: list[_Layer] = []


def _is_keras3(model: Any) -> bool:
    return any(c.__module__.startswith("keras.") for c in type(model).__mro__)


def _children(obj: Any) -> list[tuple[str, str, Any]]:
    """(name in op names, component of the scope path, object) of each direct sublayer."""
    if hasattr(obj, "_flatten_layers"):
        try:
            layers = list(obj._flatten_layers(include_self=False, recursive=False))
        except TypeError:
            layers = []
        return [(str(layer.name), str(layer.name), layer)
                for layer in layers + _untracked(obj, layers)]
    flatten = getattr(obj, "_flatten", None)
    if flatten is None:
        return []
    import tensorflow as tf

    found = flatten(recursive=False, with_path=True,
                    predicate=lambda m: isinstance(m, tf.Module) and m is not obj)
    return [(str(m.name), ".".join(str(p) for p in path), m) for path, m in found]


def _untracked(obj: Any, tracked: list[Any]) -> list[Any]:
    """The ``tf.Module``s (tf_keras layers among them) that a Keras 3 layer holds in its
    public attributes without tracking them as layers: a Keras 3 model wrapping a tf_keras
    one (HF's TF models, where ``tf.keras`` was Keras 3 when they were wrapped). Their ops
    are named after them all the same; unseen, their paths and their layers' settings (a
    batch normalization's momentum) were lost."""
    import tensorflow as tf

    if not any(c.__module__.startswith("keras.") for c in type(obj).__mro__):
        return []
    known = {id(layer) for layer in tracked}
    found = []
    for attr, value in vars(obj).items():
        if attr.startswith("_"):
            continue
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, tf.Module) and id(item) not in known:
                known.add(id(item))
                found.append(item)
    return found


def _build(obj: Any, name: str, component: str, seen: set[int]) -> _Layer:
    node = _Layer(name, component, obj)
    seen = seen | {id(obj)}
    for child_name, child_component, child in _children(obj):
        if id(child) not in seen:
            node.children.append(_build(child, child_name, child_component, seen))
    return node


def _suffix(component: str, name: str) -> bool:
    rest = component[len(name):]
    return component.startswith(name) and bool(re.fullmatch(r"_\d+", rest))


class Scopes:
    """Resolves op names to layer paths (``attn.query``) for one model."""

    def __init__(self, model: Any) -> None:
        name = str(getattr(model, "name", "") or "")
        self.root = _build(model, name, "", set())
        self.suffixed_first = _is_keras3(model)
        self._cache: dict[str, tuple[str, Any]] = {}

    def strip_root(self, path: str) -> str:
        """``mlp.fc1.kernel`` -> ``fc1.kernel`` when ``mlp`` is the model's own name."""
        parts = path.split(".")
        children = {c.name for c in self.root.children}
        if len(parts) > 2 and parts[0] == self.root.name and parts[1] in children:
            return ".".join(parts[1:])
        return path

    def layers(self) -> Iterator[tuple[str, Any]]:
        """(scope path, layer) of every layer under the model, parents first."""
        stack = [(c, c.component) for c in reversed(self.root.children)]
        while stack:
            node, path = stack.pop()
            yield path, node.obj
            stack.extend((c, f"{path}.{c.component}") for c in reversed(node.children))

    def resolve(self, op_name: str) -> tuple[str, Any]:
        """The scope path of the layer that made op ``op_name``, and that layer (or None)."""
        components = op_name.split("/")[:-1]
        key = "/".join(components)
        if key not in self._cache:
            self._cache[key] = self._walk(components)
        return self._cache[key]

    def _walk(self, components: list[str]) -> tuple[str, Any]:
        node = self.root
        if components and (components[0] == node.name or _suffix(components[0], node.name)):
            components = components[1:]
        path: list[str] = []
        matched = None
        for component in components:
            child = self._match(node, component)
            if child is None:
                break
            node = matched = child
            path.append(child.component)
        return ".".join(path), (matched.obj if matched is not None else None)

    def _match(self, node: _Layer, component: str) -> _Layer | None:
        exact = [c for c in node.children if c.name == component]
        suffixed = [c for c in node.children if _suffix(component, c.name)]
        suffixed.sort(key=lambda c: -len(c.name))
        ranked = suffixed + exact if self.suffixed_first else exact + suffixed
        return ranked[0] if ranked else None
