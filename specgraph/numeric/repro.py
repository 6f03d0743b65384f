"""Repro export: the first divergence as standalone scripts, one per framework.

``write_repro`` writes ``case.npz`` (the layer's captured inputs, and for a backward case its
output gradients and a direction, plus each side's float64 truth) and asks each side's
``ReproWriter`` (a frontend's, handed down by the front door) for a script that runs just
that layer with the framework's own function, compares with the truth and exits 1 when the
framework is off. ``python_script`` is the template the Python frameworks share: the op's
code is copied from the runner's op table (the function and the helpers it calls), so the
scripts need only the framework and NumPy: a bug report ready to file.
"""

from __future__ import annotations

import ast
import dis
import inspect
import math
import re
import sys
import textwrap
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specgraph.errors import SpecgraphError
from specgraph.ir import Node
from specgraph.numeric.oracle import directional_derivative, reference_outputs

__all__ = ["ReproCase", "ReproWriter", "ScriptWriter", "write_repro", "python_script",
           "function_source", "global_names", "comment", "literal", "TOLERANCE"]

TOLERANCE = 1e-4


@dataclass(frozen=True, eq=False)
class ReproCase:
    """The first divergence, captured so it can be re-run alone: the two nodes, lhs's inputs
    to them and, for a backward divergence, lhs's output gradients."""

    kind: str  # "forward" or "backward"
    lhs_node: Node
    rhs_node: Node
    inputs: tuple[np.ndarray, ...]
    output_grads: tuple[np.ndarray | None, ...]
    blame: str
    lhs_framework: str
    rhs_framework: str
    seed: int
    compiled: frozenset[str] = frozenset()  # the sides whose programs ran compiled whole
    # by side, the framework's own call that made the layer's output in its program: (op,
    # args, kwargs), tensor arguments written ("input", k) for the k-th of ``inputs``
    native_calls: Mapping[str, tuple[str, Any, Any]] = field(default_factory=dict)


# writer(folder, node, side, case) -> one line per file written ("path: what it is")
ReproWriter = Callable[[Path, Node, str, ReproCase], list[str]]

def function_source(fn: Any) -> str:
    """``fn``'s source with the imports, constants and same-module helpers it needs, as a
    standalone module text."""
    module = sys.modules[fn.__module__]
    imports = _imports(module)
    parts: dict[str, str] = {}
    _collect(fn, module, parts)
    return "\n".join(imports) + "\n\n\n" + "\n\n".join(reversed(list(parts.values())))


def _imports(module: types.ModuleType) -> list[str]:
    tree = ast.parse(inspect.getsource(module))
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            text = ast.unparse(node)
            if "specgraph" not in text and "__future__" not in text:
                out.append(text)
    return out


def global_names(code: types.CodeType) -> set[str]:
    """The global names ``code`` reads (attribute names such as ``F.pad`` are not)."""
    names = {ins.argval for ins in dis.get_instructions(code)
             if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def _collect(fn: Any, module: types.ModuleType, parts: dict[str, str]) -> None:
    if fn.__name__ in parts:
        return
    parts[fn.__name__] = inspect.getsource(fn).rstrip() + "\n"
    for name in sorted(global_names(fn.__code__)):
        obj = module.__dict__.get(name)
        if inspect.isfunction(obj) and obj.__module__ == module.__name__:
            _collect(obj, module, parts)
        elif name.isupper() and isinstance(obj, (int, float, str, tuple, frozenset)):
            parts.setdefault(name, f"{name} = {obj!r}\n")


def python_script(framework: str, fn: Any, node: Node, side: str, case: ReproCase, *,
                  load: str, fetch: str, backward: str, compile: str = "",
                  call: str = "") -> str:
    """A standalone script that runs ``fn`` (an op function of ``framework``'s runner) on
    ``case``'s inputs and exits 1 when it is off the float64 truth of ``side``'s node.

    Args:
        framework: the framework's name, for messages.
        fn: the op function; its source and the same-module helpers it reads are copied.
        node: the node the script reproduces (its op and attributes).
        side: ``lhs`` or ``rhs``: whose float64 truth the script compares with.
        case: the captured divergence.
        load: an expression turning the NumPy array ``x`` into the framework's tensor.
        fetch: an expression turning the framework's tensor ``t`` into a float64 array.
        backward: statements computing ``grads_in`` (one per input, None where nothing
            flows) from ``xs``, ``fn``, ``ATTRS`` and the output gradients ``grads``.
        compile: statements that rebind ``fn`` to the framework's compiled form of
            ``_eager`` (the layer's function): the script then runs the layer compiled
            alone, as the side's compiled program ran it (empty: eagerly).
        call: statements that rebind ``fn`` to the framework's own op as the model's
            program called it (the model's op, not specgraph's kernel; empty: the kernel).
    """
    body = function_source(fn)
    attrs = {k: v for k, v in node.attrs.items()}
    layer = f"{node.op} at {node.scope or '<model>'}"
    lines = [
        f'"""Reproduces a {case.kind} divergence of one layer in {framework}'
        f'{" compiled" if compile else ""} (LAYER below).',
        "",
        f"Runs the layer alone on the inputs captured in case.npz (seed {case.seed}) and "
        "compares with the",
        "float64 truth; exits 1 when the framework is off by more than the tolerance.",
        '"""',
        f"# layer: {comment(layer)}",
        "",
        "import sys",
        "from pathlib import Path",
        "",
        body,
        "",
        f"LAYER = {layer!r}",
        f"ATTRS = {literal(attrs)}",
        f"TOLERANCE = {TOLERANCE!r}",
        f"fn = {fn.__name__}",
        *(["# the model's own op, called as its program calls it",
           *textwrap.dedent(call).strip().splitlines()] if call else []),
        *(["_eager = fn", "# compiled alone, as the model's compiled program ran it",
           *textwrap.dedent(compile).strip().splitlines()] if compile else []),
        "",
        "",
        "def to_framework(x):",
        f"    return {load}",
        "",
        "",
        "def to_numpy(t):",
        f"    return {fetch}",
        "",
        "",
        "data = np.load(Path(__file__).with_name('case.npz'))",
        f"xs = [to_framework(data[f'input{{i}}']) for i in range({len(case.inputs)})]",
    ]
    if case.kind != "backward":
        lines += [
            "outs = fn(*xs, **ATTRS)",
            "outs = outs if isinstance(outs, tuple) else (outs,)",
            "worst = 0.0",
            "for k, out in enumerate(outs):",
            f"    truth = data[f'{side}_output{{k}}'].astype(np.float64)",
            "    scale = max(float(np.sqrt(np.mean(np.square(truth)))), 1e-30)",
            "    worst = max(worst, float(np.max(np.abs(to_numpy(out) - truth))) / scale)",
            f"print(f'{framework} {{LAYER}}: max error {{worst:.3e}} of the values\\' scale "
            "(tolerance {TOLERANCE:.0e})')",
        ]
    else:
        lines += [
            f"grads = [data[f'grad_output{{k}}'] if f'grad_output{{k}}' in data else None "
            f"for k in range({len(node.outputs)})]",
            textwrap.dedent(backward),
            "got = sum(float(np.sum(to_numpy(g) * data[f'direction{i}']))",
            "          for i, g in enumerate(grads_in) if g is not None and "
            "f'direction{i}' in data)",
            f"truth = float(data['{side}_directional'])",
            "worst = abs(got - truth) / max(abs(truth), 1e-30)",
            f"print(f'{framework} {{LAYER}} backward: <gradient, u> = {{got:.9g}}, float64 "
            "truth {truth:.9g}, relative error {worst:.3e} (tolerance {TOLERANCE:.0e})')",
        ]
    lines += ["sys.exit(1 if worst > TOLERANCE else 0)", ""]
    return "\n".join(lines)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def comment(text: str) -> str:
    """``text`` fit for a ``#`` comment of a generated script: control characters (newlines
    among them) replaced by spaces, so that a name cannot end the comment."""
    return _CONTROL.sub(" ", text)


def literal(value: Any) -> str:
    """``value`` (attributes: numbers, strings, booleans, None, tuples, lists, dicts of them)
    as a Python expression; infinities and NaN as ``float('inf')`` and ``float('nan')``,
    strings as escaped literals, anything else refused."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return f"np.array({literal(value.tolist())}, dtype={str(value.dtype)!r})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (tuple, frozenset)):
        value = tuple(sorted(value, key=repr)) if isinstance(value, frozenset) else value
        return "(" + "".join(f"{literal(v)}, " for v in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise SpecgraphError(f"a repro script cannot hold the attribute value {type(value).__name__}"
                         f" {comment(repr(value))[:80]}; only numbers, strings and their "
                         "tuples, lists and dicts")


@dataclass(frozen=True, eq=False)
class ScriptWriter:
    """The ``ReproWriter`` of a Python framework: ``repro_<framework>.py`` from
    ``python_script``, with the op function taken from the runner's op table ``ops``."""

    framework: str
    ops: Mapping[str, Any]
    load: str
    fetch: str
    backward: str
    # statements that make ``fn`` the framework's compiled form of ``_eager`` (the layer
    # compiled alone: torch.compile, jax.jit...), for a side whose program ran compiled
    compile: str = ""
    # (op, args, kwargs) -> statements that make ``fn`` the framework's own call of that op
    # on the script's inputs (``ReproCase.native_calls``), or None where it has none
    call: Callable[[str, Any, Any], str] | None = None

    def __call__(self, folder: Path, node: Node, side: str, case: ReproCase) -> list[str]:
        fn = self.ops.get(node.op)
        if fn is None:
            raise SpecgraphError(f"the {self.framework} runner has no function for "
                                 f"{node.op!r} to copy into a repro script")
        compiled = self.compiles(side, case)
        call = case.native_calls.get(side) if self.call is not None else None
        path = folder / f"repro_{self.framework}{'_compiled' if compiled else ''}.py"
        path.write_text(python_script(self.framework, fn, node, side, case, load=self.load,
                                      fetch=self.fetch, backward=self.backward,
                                      compile=self.compile if compiled else "",
                                      call=self.call(*call) if call is not None else ""),
                        encoding="utf-8")
        how = "the model's own op" if call is not None else "the layer"
        return [f"{path}: {how} in {self.framework}" + (", compiled alone" if compiled else "")]

    def compiles(self, side: str, case: ReproCase) -> bool:
        """Whether the script for ``side`` runs the layer compiled."""
        return side in case.compiled and bool(self.compile)


def _case_arrays(case: ReproCase) -> dict[str, np.ndarray]:
    arrays = {f"input{i}": np.asarray(x) for i, x in enumerate(case.inputs)}
    for side, node in (("lhs", case.lhs_node), ("rhs", case.rhs_node)):
        for k, out in enumerate(reference_outputs(node, case.inputs)):
            arrays[f"{side}_output{k}"] = out
    if case.kind == "backward":
        rng = np.random.default_rng(case.seed)
        direction = [rng.standard_normal(np.shape(x)) if np.asarray(x).dtype.kind == "f"
                     else None for x in case.inputs]
        for i, d in enumerate(direction):
            if d is not None:
                arrays[f"direction{i}"] = d
        for k, g in enumerate(case.output_grads):
            if g is not None:
                arrays[f"grad_output{k}"] = np.asarray(g)
        for side, node in (("lhs", case.lhs_node), ("rhs", case.rhs_node)):
            arrays[f"{side}_directional"] = np.float64(directional_derivative(
                node, case.inputs, case.output_grads, direction))
    return arrays


def write_repro(case: ReproCase, folder: str | Path,
                writers: Sequence[tuple[str, ReproWriter | None]]) -> tuple[str, ...]:
    """Write ``case`` into ``folder``: ``case.npz`` and each side's script.

    Args:
        case: the captured divergence.
        folder: where to write (created if missing; files of the same names are replaced).
        writers: ``(side, writer)`` for lhs then rhs; a side whose framework has no writer
            (None), or whose framework the other side already wrote, gets no script.

    Returns:
        One line per file written: ``path: what it holds``.
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "case.npz", **_case_arrays(case))
    written = [f"{out / 'case.npz'}: the layer's inputs and the float64 truth"]
    nodes = {"lhs": case.lhs_node, "rhs": case.rhs_node}
    seen: set[Any] = set()
    for side, writer in writers:
        node = nodes[side]
        # one script per framework, and one more where one side of it ran compiled
        key = (writer, getattr(writer, "compiles", lambda *_: False)(side, case))
        if writer is None or key in seen:
            continue
        seen.add(key)
        written.extend(writer(out, node, side, case))
    return tuple(written)
