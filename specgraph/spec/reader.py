"""A spec file read as YAML: ``yaml.safe_load`` semantics, every key and value with its line and
column, and bounds on size, nesting and alias expansion, so that hostile text ends in one
``file:line:col`` sentence instead of a hang.

PyYAML composes the node tree (its ``SafeLoader``, with an alias remembered where it is used);
``read`` builds the Python data from it, counting every value it makes, so a
"billion laughs" document stops after ``MAX_VALUES`` values, whatever its aliases would
expand to. Duplicate keys, keys that are not text and tags other than the standard scalar
ones are refused (``safe_load`` would keep the last duplicate silently).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from specgraph.errors import SpecError

__all__ = ["Document", "Path", "read", "MAX_BYTES", "MAX_DEPTH", "MAX_VALUES"]

MAX_BYTES = 1 << 20  # a spec is a page of text, not a data set
MAX_DEPTH = 48  # nesting of mappings and lists, aliases included
MAX_VALUES = 50_000  # values made, aliases expanded

Path = tuple[str | int, ...]

_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_DATE = "tag:yaml.org,2002:timestamp"
_SCALARS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null")}


@dataclass
class Document:
    """The data of a spec file and where each of its keys and values stands.

    Attributes:
        name: the file as messages name it.
        data: the data, as ``yaml.safe_load`` would give it.
    """

    name: str
    data: Any = None
    _values: dict[Path, tuple[int, int]] = field(default_factory=dict, repr=False)
    _keys: dict[Path, tuple[int, int]] = field(default_factory=dict, repr=False)

    def where(self, path: Path, *, key: bool = False) -> tuple[int, int]:
        """The (line, column), 1-based, of the value at ``path`` (of its key with ``key``),
        or of the nearest enclosing value that has one."""
        table = self._keys if key else self._values
        if path in table:
            return table[path]
        for cut in range(len(path) - 1, -1, -1):
            if path[:cut] in self._values:
                return self._values[path[:cut]]
        return (1, 1)

    def error(self, path: Path, message: str, *, key: bool = False) -> SpecError:
        """A SpecError at ``path`` (``message``: what is wrong and how to fix it)."""
        line, col = self.where(path, key=key)
        return SpecError(self.name, line, col, message)


class _Loader(yaml.SafeLoader):
    """SafeLoader that bounds nesting while composing and remembers where an alias is used."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = copy.copy(super().compose_node(parent, index))  # shares its children
            node.start_mark = mark
            node.alias = True  # where an expansion beyond the bounds is reported
            return node
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Refusal(self.peek_event().start_mark,
                               f"the document nests more than {MAX_DEPTH} levels deep; a spec "
                               "nests blocks a few levels, flatten the structure")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _Refusal(Exception):
    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.mark, self.message = mark, message


def _tag(tag: str) -> str:
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix):] if tag.startswith(prefix) else tag


def _at(mark: Any) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def read(raw: bytes, name: str) -> Document:
    """Read a spec file's bytes into a Document.

    Raises:
        SpecError: the file is too large, not UTF-8, not YAML, nested or aliased beyond
            the bounds, or uses keys or tags a spec has no use for.
    """
    doc = Document(name)
    if len(raw) > MAX_BYTES:
        raise SpecError(name, 1, 1, f"the file has {len(raw):,} bytes, more than the "
                        f"{MAX_BYTES:,} a spec may have; a spec states a model's structure "
                        "in a page, keep data out of it")
    text = _decode(raw, name)
    loader = None
    try:
        loader = _Loader(text)
        root = loader.get_single_node()
        if root is not None:
            doc.data = _Builder(loader, doc).build(root, ())
    except _Refusal as err:
        raise SpecError(name, *_at(err.mark), err.message) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        problem = " ".join(f"{err.context or ''} {err.problem or ''}".split())
        raise SpecError(name, *_at(mark), f"this is not valid YAML: {problem}; fix the "
                        "YAML at this place") from None
    except yaml.reader.ReaderError as err:
        line, col = _position(text, err.position)
        raise SpecError(name, line, col, f"the file holds the character U+"
                        f"{int(err.character):04X}, which YAML does not allow; remove it"
                        ) from None
    except RecursionError:
        raise SpecError(name, 1, 1, "the document nests too deeply to read; a spec nests "
                        "blocks a few levels, flatten the structure") from None
    finally:
        if loader is not None:
            loader.dispose()
    if doc.data is None:
        raise SpecError(name, 1, 1, "the file is empty; a spec is a mapping with at least "
                        "inputs and layers (see `specgraph schema`)")
    return doc


def _decode(raw: bytes, name: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line, col = _position(raw[:err.start].decode("utf-8", "replace"), None)
        raise SpecError(name, line, col, f"byte 0x{raw[err.start]:02x} is not UTF-8; save the "
                        "file as UTF-8") from None


def _position(text: str, index: int | None) -> tuple[int, int]:
    head = text if index is None else text[:index]
    return head.count("\n") + 1, len(head) - (head.rfind("\n") + 1) + 1


class _Builder:
    """The node tree made Python data, with positions, every value counted."""

    def __init__(self, loader: _Loader, doc: Document) -> None:
        self.loader, self.doc, self.count = loader, doc, 0
        self.aliases: list[Any] = []  # the aliases being expanded, outermost first

    def build(self, node: Any, path: Path, depth: int = 0) -> Any:
        if getattr(node, "alias", False):
            self.aliases.append(node.start_mark)
            try:
                return self._build(node, path, depth)
            finally:
                self.aliases.pop()
        return self._build(node, path, depth)

    def _build(self, node: Any, path: Path, depth: int) -> Any:
        self.count += 1
        where = self.aliases[0] if self.aliases else node.start_mark
        if self.count > MAX_VALUES:
            raise _Refusal(where, f"the document expands to more than {MAX_VALUES:,} values "
                           "(aliases are expanded where they are used); write the spec "
                           "without multiplying aliases")
        if depth > MAX_DEPTH:
            raise _Refusal(where, f"the document nests more than {MAX_DEPTH} levels deep "
                           "(counting what its aliases hold); flatten the structure or remove "
                           "the alias that refers to itself")
        self.doc._values[path] = _at(node.start_mark)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                raise _Refusal(node.start_mark, f"the tag {_tag(node.tag)} is not allowed "
                               "here; write a plain list")
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        if node.tag != _MAP:
            raise _Refusal(node.start_mark, f"the tag {_tag(node.tag)} is not allowed here; "
                           "write a plain mapping")
        return self._mapping(node, path, depth)

    def _scalar(self, node: Any) -> Any:
        if node.tag == _DATE:  # a plain 2019-05-24 is text to a spec (a section, a version)
            return node.value
        if node.tag not in _SCALARS:
            raise _Refusal(node.start_mark, f"the tag {_tag(node.tag)} is not allowed here; "
                           "a spec holds plain text, numbers, booleans, lists and mappings")
        try:
            return self.loader.construct_object(node)
        except (ValueError, TypeError, OverflowError):  # !!int abc, !!float x
            raise _Refusal(node.start_mark, f"{node.value!r} is no {node.tag.rpartition(':')[2]}"
                           "; drop the tag or write a value of that type") from None

    def _mapping(self, node: Any, path: Path, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        first: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                for source in self._merge_sources(value_node):
                    for key, value in self._mapping(source, path, depth + 1).items():
                        merged.setdefault(key, value)
                continue
            key = self._key(key_node)
            if key in first:
                line, _ = _at(first[key])
                raise _Refusal(key_node.start_mark, f"the key {key!r} appears twice in this "
                               f"mapping (first on line {line}); keep one")
            first[key] = key_node.start_mark
            self.doc._keys[(*path, key)] = _at(key_node.start_mark)
            out[key] = self.build(value_node, (*path, key), depth + 1)
        return {**{k: v for k, v in merged.items() if k not in out}, **out}

    def _merge_sources(self, node: Any) -> Iterator[Any]:
        if isinstance(node, yaml.MappingNode):
            yield node
            return
        if isinstance(node, yaml.SequenceNode) and all(isinstance(n, yaml.MappingNode)
                                                       for n in node.value):
            yield from node.value
            return
        raise _Refusal(node.start_mark, "a merge key << takes a mapping or a list of mappings; "
                       "point it at an anchored mapping (<<: *defaults)")

    def _key(self, node: Any) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise _Refusal(node.start_mark, "a key here is a list or a mapping; keys are names, "
                           "write a plain name before the colon")
        if node.tag not in _SCALARS:
            raise _Refusal(node.start_mark, f"the tag {_tag(node.tag)} is not allowed on a "
                           "key; keys are plain names")
        key = self._scalar(node)
        if not isinstance(key, str):
            kind = {bool: "a boolean", int: "a number", float: "a number"}.get(type(key), "null")
            raise _Refusal(node.start_mark, f"the key {node.value!r} reads as {kind}, not a "
                           f"name; quote it (\"{node.value}\") if it is meant as a name")
        return key
