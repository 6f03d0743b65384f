"""A validated spec document compiled to the shared Graph, statement by statement.

Names resolve lexically: a statement reads the graph's inputs, earlier statements of its
block and of the blocks around it, and earlier blocks by name (``layer.3``, an iteration of a
repeat block). A repeat block runs its statements ``repeat`` times with its index (``i``)
defined; with ``in: x`` the name ``x`` inside the block is the block's input in its first
iteration and the previous iteration's output after that. Output shapes come from each
canonical op's NumPy reference run on zeros of the input shapes, so every canonical op is a
spec op and a shape that does not fit is caught at its statement. Every failure is a
SpecError at the ``file:line:col`` of the key or value at fault.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from specgraph.errors import GraphError, SpecError, first_line
from specgraph.ir import GraphBuilder, Value
from specgraph.ops import REQUIRED, get_spec
from specgraph.spec import shapes
from specgraph.spec.compiled import CompiledSpec, Count, Fill, Statement, Tolerance, Unchecked
from specgraph.spec.expr import FUNCTIONS, ExprError, evaluate, suggest
from specgraph.spec.inference import attribute, infer, listed
from specgraph.spec.stated import Stated
from specgraph.spec.reader import Document, Path
from specgraph.spec.vocabulary import (REARRANGE, RULES, SPEC_OPS, STAND_IN_ACTIVATION,
                                       STATEMENT_FIELDS, Rule, attributes)

__all__ = ["compile_document", "MAX_REPEAT", "MAX_NODES"]

MAX_REPEAT = 1000
MAX_NODES = 20_000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_OUTPUT = re.compile(r"^(.*)\[(\d+)\]$")
_PARAM_DTYPE = "float32"


class _Names:
    """One block's names, and the block around it."""

    def __init__(self, parent: _Names | None, prefix: str) -> None:
        self.parent, self.prefix = parent, prefix
        self.local: dict[str, tuple[Value, ...]] = {}
        self.lines: dict[str, int] = {}

    def find(self, name: str) -> tuple[Value, ...] | None:
        names: _Names | None = self
        while names is not None:
            if name in names.local:
                return names.local[name]
            names = names.parent
        return None

    def visible(self) -> set[str]:
        out: set[str] = set()
        names: _Names | None = self
        while names is not None:
            out |= set(names.local)
            names = names.parent
        return out

    def scope(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name


def compile_document(doc: Document, source: str, *, dims: Mapping[str, int] | None = None,
                     fills: Mapping[tuple[str, str], Fill] | None = None) -> CompiledSpec:
    """Compile a schema-valid spec document; ``source`` names the file in nodes' ``source``.

    Args:
        doc: the document, read and validated.
        source: the file as nodes' ``source`` names it.
        dims: sizes for the spec's dims instead of its example sizes (the sizes of another
            model's inputs).
        fills: per (scope, op) of a node, what to run where the spec leaves something
            open (an implementation's choices: ``specgraph.spec.resolve``). Stated
            parameter counts are then recorded, not enforced (an open bias changes them).

    Raises:
        SpecError: a name is unknown or defined twice, a shape does not fit, an expression
            fails, a stated parameter shape or count disagrees with the statements.
    """
    return _Compiler(doc, source, dict(dims or {}), fills).run()


class _Compiler(Stated):
    def __init__(self, doc: Document, source: str, dims: dict[str, int],
                 fills: Mapping[tuple[str, str], Fill] | None) -> None:
        self.doc, self.source = doc, source
        self.bound, self.fills = dims, fills
        self.counts: list[Count] = []
        self.input_shapes: dict[str, tuple[str, ...]] = {}
        self.data: dict[str, Any] = doc.data
        self.builder = GraphBuilder(doc.name)
        self.sizes: dict[str, int | float] = {}
        self.unchecked: list[Unchecked] = []
        self.statements: list[Statement] = []
        self.param_total = 0
        self.nodes = 0
        self.ranges: dict[str, tuple[int, int]] = {}
        self.indices: list[str] = []  # the repeat indices defined where compiling is

    # --- errors --------------------------------------------------------------------------
    def fail(self, path: Path, message: str, *, key: bool = False) -> SpecError:
        return self.doc.error(path, message, key=key)

    @contextmanager
    def at(self, path: Path, what: str = "", *, key: bool = False) -> Iterator[None]:
        """ExprErrors raised meanwhile become SpecErrors at ``path`` (its key with ``key``)."""
        try:
            yield
        except ExprError as err:
            raise self.fail(path, f"{what}{err}", key=key) from None

    def line(self, path: Path) -> str:
        return f"{self.source}:{self.doc.where(path)[0]}"

    # --- the document --------------------------------------------------------------------
    def run(self) -> CompiledSpec:
        self._sizes()
        root = _Names(None, "")
        self._inputs(root)
        tolerance = self._tolerance(self.data.get("tolerance"), ("tolerance",), Tolerance())
        last = self._statements(self.data["layers"], ("layers",), root, dict(self.sizes),
                                False, tolerance)
        self._outputs(root, last)
        self._count(self.data.get("param_count"), ("param_count",), self.sizes,
                    self.param_total, "the spec", "")
        try:
            graph = self.builder.build()
        except GraphError as err:  # a name clash between a block and a statement's params
            raise self.fail(("layers",), f"the statements do not make a valid graph: "
                            f"{first_line(err)}; rename one of the clashing statements") from None
        dims = tuple(self.data.get("dims") or {})
        return CompiledSpec(graph, self.doc.name, dict(self.data.get("paper") or {}),
                            dict(self.sizes), dims, self.ranges, tuple(self.unchecked),
                            tuple(self.statements), tolerance, self.input_shapes,
                            tuple(self.counts),
                            {n: self.doc.where(("inputs", n), key=True)
                             for n in self.input_shapes}, self._implementations())

    def _sizes(self) -> None:
        for section in ("dims", "hyper"):
            for name, value in (self.data.get(section) or {}).items():
                path = (section, name)
                if name in self.sizes:
                    raise self.fail(path, f"{name} is defined in dims and in hyper; define it "
                                    "once", key=True)
                if name in FUNCTIONS:
                    raise self.fail(path, f"{name} is the name of a function in expressions; "
                                    "call the size something else", key=True)
                if section == "dims" and name in self.bound:
                    value = self.bound[name]
                with self.at(path, f"{section}.{name}: "):
                    self.sizes[name] = shapes.size(value, self.sizes) if section == "dims" \
                        else evaluate(value, self.sizes)

    def _inputs(self, root: _Names) -> None:
        for name, decl in self.data["inputs"].items():
            path = ("inputs", name)
            if name in self.sizes:
                raise self.fail(path, f"the input {name} has the name of a size; inputs and "
                                "sizes share one namespace, rename one", key=True)
            where = (*path, "shape") if isinstance(decl, dict) else path
            decl = decl if isinstance(decl, dict) else {"shape": decl}
            written = decl["shape"]
            self.input_shapes[name] = tuple(
                shapes.tokens(written) if isinstance(written, str)
                else (str(v) for v in (written if isinstance(written, list) else [written])))
            with self.at(where, f"the shape of input {name}: "):
                shape = shapes.shape(decl["shape"], self.sizes)
            dtype = decl.get("dtype", "float32")
            if "range" in decl:
                with self.at((*path, "range"), f"the range of input {name}: "):
                    low, high = (int(evaluate(v, self.sizes)) for v in decl["range"])
                if dtype not in ("int64", "int32") or not low < high:
                    raise self.fail((*path, "range"), f"range [{low}, {high}) of input {name}: "
                                    "a range is [low, high) with low < high, for an integer "
                                    "input (dtype: int64)")
                self.ranges[name] = (low, high)
            elif dtype in ("int64", "int32"):
                self.ranges[name] = (0, 2)
            root.local[name] = (self.builder.input(name, shape, dtype),)
            root.lines[name] = self.doc.where(path, key=True)[0]

    # --- statements and blocks -----------------------------------------------------------
    def _statements(self, items: list[Any], path: Path, names: _Names,
                    env: dict[str, int | float], blanket: bool, tolerance: Tolerance
                    ) -> tuple[Value, ...]:
        last: tuple[Value, ...] = ()
        for i, item in enumerate(items):
            here = (*path, i)
            if "layers" in item:
                last = self._block(item, here, names, env, blanket, tolerance)
            else:
                last = self._statement(item, here, names, env, blanket, tolerance)
        return last

    def _define(self, names: _Names, name: str, values: tuple[Value, ...], path: Path) -> None:
        if name in names.local:
            raise self.fail(path, f"{name} is defined twice in this block (first on line "
                            f"{names.lines[name]}); give each statement its own name")
        names.local[name] = values
        names.lines[name] = self.doc.where(path)[0]

    def _name(self, text: str, path: Path, env: Mapping[str, int | float]) -> str:
        def fill(match: re.Match[str]) -> str:
            try:
                value = evaluate(match.group(1), env)
            except ExprError as err:
                if "is not defined here" in str(err) and not self.indices:
                    raise self.fail(path, f"the name {text!r} uses {{{match.group(1)}}}, but an "
                                    "index such as {i} exists only inside a block with "
                                    "repeat:; add repeat: N to the block or drop the braces"
                                    ) from None
                raise self.fail(path, f"the name {text!r}: {err}") from None
            if not float(value).is_integer():
                raise self.fail(path, f"the name {text!r}: {{{match.group(1)}}} is {value:g}, "
                                "not a whole number; an index in a name is a whole number")
            return str(int(value))

        name = _PLACEHOLDER.sub(fill, text)
        if not _NAME.match(name):
            raise self.fail(path, f"the name {text!r} reads {name!r}; a name is words of "
                            "letters, digits and _ joined by dots, with {i} for an index, "
                            "such as layer.{i}.attention")
        return name

    def _block(self, item: dict[str, Any], path: Path, names: _Names,
               env: dict[str, int | float], blanket: bool, tolerance: Tolerance
               ) -> tuple[Value, ...]:
        count, index = self._repeat(item, path, env)
        carried = self._find(item["in"], (*path, "in"), names, env) if "in" in item else None
        blanket = blanket or item.get("unspecified") is True
        tolerance = self._tolerance(item.get("tolerance"), (*path, "tolerance"), tolerance)
        first = None
        value: tuple[Value, ...] = ()
        for k in range(count):
            inner_env = {**env, index: k} if index else env
            name = self._name(item["name"], (*path, "name"), inner_env)
            if k == 1 and name == first:
                raise self.fail((*path, "name"), f"the block repeats {count} times but its "
                                f"name {item['name']!r} uses no {{{index}}}: every iteration "
                                f"would be {name}; write {item['name']}.{{{index}}}")
            first = first or name
            inner = _Names(names, names.scope(name))
            if carried is not None:
                inner.local[item["in"]] = carried
                inner.lines[item["in"]] = self.doc.where((*path, "in"))[0]
            self.indices.extend([index] if index else [])
            try:
                value = self._iteration(item, path, inner, inner_env, blanket, tolerance)
            finally:
                del self.indices[len(self.indices) - (1 if index else 0):]
            self._define(names, name, value, (*path, "name"))
            carried = value if carried is not None else None
        return value

    def _repeat(self, item: dict[str, Any], path: Path, env: Mapping[str, int | float]
                ) -> tuple[int, str | None]:
        """How many times a block runs, and the name of its index (None: no repeat)."""
        if "repeat" not in item:
            if "index" in item:
                raise self.fail((*path, "index"), "index: names the index of a repeat block, "
                                "and this block has no repeat:; add repeat: N or drop index:",
                                key=True)
            return 1, None
        with self.at((*path, "repeat"), "repeat: "):
            count = shapes.size(item["repeat"], env)
        if count > MAX_REPEAT:
            raise self.fail((*path, "repeat"), f"repeat is {count:,}; a block repeats at most "
                            f"{MAX_REPEAT:,} times")
        index = item.get("index", "i")
        if index in env:
            raise self.fail((*path, "index") if "index" in item else (*path, "repeat"),
                            f"the index {index} is already a name here (a size or the index "
                            "of an enclosing block); name it with index: j")
        return count, index

    def _iteration(self, item: dict[str, Any], path: Path, inner: _Names,
                   env: dict[str, int | float], blanket: bool, tolerance: Tolerance
                   ) -> tuple[Value, ...]:
        """One run of a block's statements: its value, its parameter count checked."""
        start = self.param_total
        value = self._statements(item["layers"], (*path, "layers"), inner, env, blanket,
                                 tolerance)
        if "out" in item:
            if item["out"] not in inner.local:
                raise self.fail((*path, "out"), f"out: {item['out']} is no statement of this "
                                f"block{suggest(item['out'], inner.local)}; name one of its "
                                "statements")
            value = inner.local[item["out"]]
        self._count(item.get("param_count"), (*path, "param_count"), env,
                    self.param_total - start, f"block {inner.prefix}", inner.prefix)
        if item.get("unspecified") is True:
            self.unchecked.append(Unchecked(inner.prefix, None, source=self.line(path)))
        return value

    def _find(self, text: Any, path: Path, names: _Names, env: Mapping[str, int | float]
              ) -> tuple[Value, ...]:
        match = _OUTPUT.match(text)
        base = match.group(1) if match else text
        name = self._name(base, path, env) if "{" in base else base
        found = names.find(name)
        if found is None:
            visible = sorted(names.visible())
            shown = ", ".join(visible[-12:])
            raise self.fail(path, f"{name} is not defined before this statement"
                            f"{suggest(name, visible)}; names defined here: {shown}")
        if match:
            k = int(match.group(2))
            if k >= len(found):
                raise self.fail(path, f"{name} has {len(found)} outputs, so {text} does not "
                                f"exist; pick one of {name}[0] to {name}[{len(found) - 1}]")
            return (found[k],)
        return found

    def _statement(self, item: dict[str, Any], path: Path, names: _Names,
                   env: dict[str, int | float], blanket: bool, tolerance: Tolerance
                   ) -> tuple[Value, ...]:
        name = self._name(item["name"], (*path, "name"), env)
        ops = [k for k in item if k in SPEC_OPS]
        if not ops:
            raise self.fail((*path, "name"), f"the statement {name} names no op; write the op "
                            "as a key with the names it reads (linear: x), or layers: for a "
                            "block")
        if len(ops) > 1:
            raise self.fail((*path, ops[1]), f"the statement {name} names two ops, {ops[0]} "
                            f"and {ops[1]}; one statement is one op, split it in two", key=True)
        op = ops[0]
        scope = names.scope(name)
        raw = item[op]
        refs = [raw] if isinstance(raw, str) else list(raw)
        inputs = [v for i, r in enumerate(refs)
                  for v in self._find(r, (*path, op) if isinstance(raw, str) else (*path, op, i),
                                      names, env)]
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(path, f"the spec compiles to more than {MAX_NODES:,} statements; "
                            "use smaller repeat counts")
        blanket = blanket or item.get("unspecified") is True
        source = self.line(path)
        start = self.param_total
        if op == REARRANGE:
            values = self._rearrange(item, path, inputs, env, scope, source)
        else:
            values = self._op(op, item, path, inputs, env, scope, source, blanket)
        if "activation" in item:
            values = self._activation(item["activation"], path, values, scope, source,
                                      blanket)
        self._define(names, name, values, (*path, "name"))
        if item.get("unspecified") is True:
            self.unchecked.append(Unchecked(scope, None, source=source))
        self._record(item, path, op, scope, source, env, tolerance, refs,
                     self.param_total - start, blanket)
        return values

    def _fill(self, scope: str, op: str) -> Fill | None:
        return self.fills.get((scope, op)) if self.fills else None

    # --- one op --------------------------------------------------------------------------
    def _op(self, op: str, item: dict[str, Any], path: Path, inputs: list[Value],
            env: dict[str, int | float], scope: str, source: str, blanket: bool
            ) -> tuple[Value, ...]:
        spec, rule = get_spec(op), RULES.get(op, Rule())
        shapes_in = [v.shape for v in inputs]
        written, stated_open = self._attrs(op, item, path, env)
        for entry in spec.inputs:  # a parameter the spec states is one the op has
            role, _, flag = entry.partition("?")
            if flag and role in (item.get("params") or {}):
                if written.get(flag) is False:
                    raise self.fail((*path, "params", role), f"{scope} states params.{role} but "
                                    f"{flag}: false; drop one of them", key=True)
                written[flag] = True
        stated = set(written)
        fill = self._fill(scope, op)
        if fill is not None:  # the implementation's choices where the spec is open
            written.update((k, v) for k, v in fill.attrs.items()
                           if k in spec.attrs and (blanket or k not in stated))
        attrs = self._complete(op, rule, written, shapes_in, path)
        params = self._params(op, rule, item, path, attrs, shapes_in, env, scope)
        canonical = {k: v for k, v in attrs.items() if k in spec.attrs}
        args = self._arguments(op, path, inputs, params, canonical)
        outs = self._infer(op, path, args, canonical, scope)
        try:
            values = self.builder.add_multi(op, args, canonical, outputs=outs, scope=scope,
                                            source=source, origin=op)
        except GraphError as err:
            raise self.fail((*path, op), f"{op} {scope}: {first_line(err)}; fix its "
                            "attributes", key=True) from None
        derived = set(rule.derived(0)) if rule.derived else set()
        open_attrs = sorted((set(spec.attrs) - stated - derived) | set(stated_open))
        if open_attrs and not blanket:
            self.unchecked.append(Unchecked(scope, op, tuple(open_attrs), source=source))
        return values

    def _attrs(self, op: str, item: dict[str, Any], path: Path, env: Mapping[str, Any]
               ) -> tuple[dict[str, Any], list[str]]:
        allowed = attributes(op)
        written: dict[str, Any] = {}
        left_open: list[str] = []
        for key, value in item.items():
            if key in STATEMENT_FIELDS or key == op:
                continue
            if key not in allowed:
                raise self.fail((*path, key), f"{op} has no attribute {key}"
                                f"{suggest(key, allowed)}; its attributes: "
                                f"{', '.join(allowed) or 'none'}", key=True)
            if value == "unspecified":
                left_open.append(key)
                continue
            kind = allowed[key][0]
            with self.at((*path, key), f"{key}: "):
                written[key] = attribute(kind, value, env)
        return written, left_open

    def _complete(self, op: str, rule: Rule, written: dict[str, Any],
                  shapes_in: list[tuple[int, ...]], path: Path) -> dict[str, Any]:
        """The written attributes with spatial ones widened, axes made non-negative, and
        stand-ins for required ones left out."""
        attrs = dict(written)
        rank = len(shapes_in[0]) if shapes_in else 0
        spatial = max(rank - 2, 0)
        for key, per_axis in rule.spatial.items():
            if key in attrs and len(attrs[key]) == 1:
                attrs[key] = attrs[key] * (spatial * per_axis)
            if key in attrs and len(attrs[key]) != spatial * per_axis:
                raise self.fail((*path, key), f"{key} has {len(attrs[key])} entries; a {op} over "
                                f"{spatial} spatial axes takes one number or {spatial * per_axis}"
                                + (" (the begin of each spatial axis, then the end)"
                                   if per_axis == 2 else " (one per spatial axis)"))
        for key in ("axis", "axes"):
            if key in attrs and attrs[key] is not None:
                size = rank + (len(attrs[key]) if op == "unsqueeze" else 0)
                attrs[key] = self._axes(attrs[key], size, (*path, key))
        if rule.stand_ins is not None and shapes_in:
            for key, value in rule.stand_ins(shapes_in, attrs).items():
                attrs.setdefault(key, value)
        if rule.derived is not None:
            attrs.update(rule.derived(len(shapes_in)))
        spec = get_spec(op)
        for key, attr in spec.attrs.items():  # defaults too, so the parameters follow them
            if attr.default is not REQUIRED:
                attrs.setdefault(key, attr.default)
        missing = [k for k, a in spec.attrs.items() if a.default is REQUIRED and k not in attrs]
        if missing:
            raise self.fail((*path, op), f"{op} needs {missing[0]}: the spec cannot leave it "
                            f"out; add {missing[0]}: ...", key=True)
        return attrs

    def _axes(self, value: Any, rank: int, path: Path) -> Any:
        many = isinstance(value, tuple)
        out = []
        for axis in value if many else (value,):
            if not -rank <= axis < rank:
                raise self.fail(path, f"axis {axis} does not exist in a tensor of {rank} axes; "
                                f"an axis is from {-rank} to {rank - 1}")
            out.append(axis % rank)
        return tuple(out) if many else out[0]

    def _params(self, op: str, rule: Rule, item: dict[str, Any], path: Path,
                attrs: dict[str, Any], shapes_in: list[tuple[int, ...]],
                env: Mapping[str, Any], scope: str) -> dict[str, Value]:
        stated: dict[str, tuple[int, ...]] = {}
        roles = get_spec(op).params
        for role, value in (item.get("params") or {}).items():
            if role not in roles:
                raise self.fail((*path, "params", role), f"{op} has no parameter {role}; its "
                                f"parameters: {', '.join(roles) or 'none'}", key=True)
            with self.at((*path, "params", role), f"params.{role}: "):
                stated[role] = shapes.shape(value, env)
        if rule.params is None:
            return {}
        if rule.from_params is not None:
            for key, value in rule.from_params(stated, attrs).items():
                attrs.setdefault(key, value)
        missing = [k for k in rule.extras if k not in attrs]
        if missing:
            raise self.fail((*path, op), f"{op} {scope} needs {missing[0]} to size its "
                            f"parameters; add {missing[0]}: ... or params: with their shapes",
                            key=True)
        try:
            derived = {r: tuple(int(s) for s in shp)
                       for r, shp in rule.params(shapes_in, attrs).items()}
        except (IndexError, ZeroDivisionError, TypeError) as err:
            raise self.fail((*path, op), f"{op} {scope} cannot size its parameters from inputs "
                            f"of shapes {listed(shapes_in)} ({first_line(err)}); check its "
                            "inputs", key=True) from None
        for role, shp in stated.items():
            if role in derived and shp != derived[role]:
                raise self.fail((*path, "params", role), f"params.{role} of {scope} is "
                                f"{list(shp)} but the statement makes it {list(derived[role])} "
                                f"(inputs {listed(shapes_in)}); fix one of them")
        out = {}
        for role, shp in derived.items():
            if math.prod(shp) > shapes.MAX_ELEMENTS or min(shp, default=1) < 1:
                raise self.fail((*path, op), f"{scope}.{role} would be {list(shp)}; a parameter "
                                f"holds from 1 to {shapes.MAX_ELEMENTS:,} elements", key=True)
            try:
                out[role] = self.builder.param(f"{scope}.{role}", shp, _PARAM_DTYPE)
            except GraphError:
                raise self.fail((*path, "name"), f"the parameter {scope}.{role} is made twice: "
                                f"another statement has the scope {scope}; rename one") from None
            self.param_total += math.prod(shp)
        return out

    def _arguments(self, op: str, path: Path, inputs: list[Value], params: dict[str, Value],
                   attrs: dict[str, Any]) -> list[Value]:
        """The node's inputs in the canonical op's order: what the statement reads, and its
        parameters where the op takes them."""
        spec = get_spec(op)
        if any(e.startswith("*") for e in spec.inputs):
            if not inputs:
                raise self.fail((*path, op), f"{op} reads one or more inputs, got none; list "
                                "the names it reads", key=True)
            return list(inputs)
        present = [base for entry in spec.inputs
                   for base, _, flag in [entry.partition("?")]
                   if not flag or attrs.get(flag)]
        wanted = [base for base in present if base not in spec.params]
        if len(inputs) != len(wanted):
            raise self.fail((*path, op), f"{op} reads {len(wanted)} input"
                            f"{'s' if len(wanted) != 1 else ''} ({', '.join(wanted)}), got "
                            f"{len(inputs)}; list the names it reads", key=True)
        given = iter(inputs)
        return [params[base] if base in spec.params else next(given) for base in present]

    def _infer(self, op: str, path: Path, args: list[Value], attrs: dict[str, Any],
               scope: str) -> list[tuple[tuple[int, ...], str]]:
        with self.at((*path, op), f"{op} {scope} ", key=True):
            return infer(op, args, attrs)

    def _rearrange(self, item: dict[str, Any], path: Path, inputs: list[Value],
                   env: dict[str, int | float], scope: str, source: str) -> tuple[Value, ...]:
        if len(inputs) != 1:
            raise self.fail((*path, REARRANGE), f"rearrange reads one input, got {len(inputs)}",
                            key=True)
        if "pattern" not in item:
            raise self.fail((*path, REARRANGE), "rearrange needs pattern: an einops pattern "
                            "such as \"b t (h d) -> b h t d\"", key=True)
        sizes = {k: v for k, v in env.items() if isinstance(v, int)}
        for key, value in (item.get("sizes") or {}).items():
            with self.at((*path, "sizes", key), f"sizes.{key}: "):
                sizes[key] = shapes.size(value, env)
        value = inputs[0]
        with self.at((*path, "pattern")):
            steps = shapes.rearrange(item["pattern"], value.shape, sizes)
        for op, attrs, shape in steps:
            value = self.builder.add(op, [value], attrs, shape=shape, dtype=value.dtype,
                                     scope=scope, source=source, origin=REARRANGE)
        return (value,)

    def _activation(self, act: str, path: Path, values: tuple[Value, ...], scope: str,
                    source: str, blanket: bool) -> tuple[Value, ...]:
        if len(values) != 1:
            raise self.fail((*path, "activation"), "activation: applies to a statement with "
                            "one output; write the activation as a statement of its own")
        op = STAND_IN_ACTIVATION if act == "unspecified" else act
        value = values[0]
        fill = self._fill(scope, op)
        run, attrs = op, {}
        if fill is not None:  # what the implementation has where the spec is open
            run = fill.op if fill.op and (act == "unspecified" or blanket) else op
            attrs = {k: v for k, v in fill.attrs.items() if k in get_spec(run).attrs}
        out = self.builder.add(run, [value], attrs, shape=value.shape, dtype=value.dtype,
                               scope=scope, source=source, origin="unspecified activation"
                               if act == "unspecified" else op)
        spec = get_spec(op)
        if act == "unspecified":
            self.unchecked.append(Unchecked(scope, op, stand_in=True, source=source))
        elif spec.attrs:
            self.unchecked.append(Unchecked(scope, op, tuple(sorted(spec.attrs)), source=source))
        return (out,)

    def _outputs(self, root: _Names, last: tuple[Value, ...]) -> None:
        given = self.data.get("outputs")
        if given is None:
            name = next(reversed(root.local))
            pairs = [(name if len(last) == 1 else f"{name}_{k}", v) for k, v in enumerate(last)]
        else:
            items = given.items() if isinstance(given, dict) else \
                ((_OUTPUT.sub(r"\1_\2", r).replace(".", "_"), r) for r in given)
            pairs = []
            for i, (out, ref) in enumerate(items):
                where = ("outputs", out) if isinstance(given, dict) else ("outputs", i)
                values = self._find(ref, where, root, self.sizes)
                if len(values) != 1:
                    raise self.fail(where, f"{ref} has {len(values)} outputs; name one of "
                                    f"them as {ref}[0] ... {ref}[{len(values) - 1}]")
                pairs.append((out, values[0]))
        seen = set()
        for out, value in pairs:
            if out in seen:
                raise self.fail(("outputs",), f"the output {out} is named twice; name each "
                                "output once")
            seen.add(out)
            self.builder.output(out, value)
