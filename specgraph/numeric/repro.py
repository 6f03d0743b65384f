"""Repro export: the first divergence as standalone scripts, one per framework.

``write_repro`` writes ``case.npz`` (the layer's captured inputs, and for a backward case its
output gradients and a direction, plus each side's float64 truth) and, for each side, a
script that runs just that layer with the framework's own function, compares with the truth
and exits 1 when the framework is off. The op's code is copied from the runner's op table
(the function and the helpers it calls), so the scripts need only the framework and NumPy:
a bug report ready to file.
"""

from __future__ import annotations

import ast
import dis
import importlib
import inspect
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np

from specgraph.errors import SpecgraphError
from specgraph.ir import GraphBuilder, Node
from specgraph.numeric.oracle import directional_derivative, reference_outputs
from specgraph.numeric.result import ReproCase

__all__ = ["write_repro", "function_source", "global_names"]

_TOLERANCE = 1e-4

_LOAD = {
    "torch": "torch.from_numpy(np.ascontiguousarray(x))",
    "jax": "jnp.asarray(x)",
    "tf": "tf.constant(x)",
}
_FETCH = {
    "torch": "t.detach().cpu().double().numpy()",
    "jax": "np.asarray(t, dtype=np.float64)",
    "tf": "np.asarray(t.numpy(), dtype=np.float64)",
}
_BACKWARD = {
    "torch": '''    xs = [x.requires_grad_() if x.is_floating_point() else x for x in xs]
    outs = fn(*xs, **ATTRS)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
    floats = [x for x in xs if x.is_floating_point()]
    got = torch.autograd.grad([o for o, _ in pairs], floats,
                              grad_outputs=[to_framework(g) for _, g in pairs],
                              allow_unused=True)
    got = iter(got)
    grads_in = [next(got) if x.is_floating_point() else None for x in xs]''',
    "jax": '''    slots = [i for i, x in enumerate(xs) if jnp.issubdtype(x.dtype, jnp.floating)]

    def f(*floats):
        full = list(xs)
        for i, v in zip(slots, floats):
            full[i] = v
        outs = fn(*full, **ATTRS)
        return outs if isinstance(outs, tuple) else (outs,)

    outs, pullback = jax.vjp(f, *[xs[i] for i in slots])
    cts = tuple(jnp.zeros_like(o) if g is None else to_framework(g).astype(o.dtype)
                for o, g in zip(outs, grads))
    got = dict(zip(slots, pullback(cts)))
    grads_in = [got.get(i) for i in range(len(xs))]''',
    "tf": '''    floats = [x for x in xs if x.dtype.is_floating]
    with tf.GradientTape() as tape:
        tape.watch(floats)
        outs = fn(*xs, **ATTRS)
        outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
    got = iter(tape.gradient([o for o, _ in pairs], floats,
                             output_gradients=[to_framework(g) for _, g in pairs]))
    grads_in = [next(got) if x.dtype.is_floating else None for x in xs]''',
}


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


def _op_function(framework: str, op: str) -> Any:
    from specgraph.frontends import RUNNERS

    module_name, cls_name, _ = RUNNERS[framework]
    runner_cls = getattr(importlib.import_module(module_name), cls_name)
    fn = runner_cls.ops.get(op)
    if fn is None:
        raise SpecgraphError(f"the {framework} runner has no function for {op!r} to copy "
                             "into a repro script")
    return fn


def _script(framework: str, node: Node, side: str, case: ReproCase) -> str:
    fn = _op_function(framework, node.op)
    body = function_source(fn)
    attrs = {k: v for k, v in node.attrs.items()}
    backward = case.kind == "backward"
    lines = [
        f'"""Reproduces a {case.kind} divergence of {node.op} at {node.scope or "<model>"} '
        f"in {framework}.",
        "",
        f"Runs the layer alone on the inputs captured in case.npz (seed {case.seed}) and "
        "compares with the",
        "float64 truth; exits 1 when the framework is off by more than the tolerance.",
        '"""',
        "",
        "import sys",
        "from pathlib import Path",
        "",
        body,
        "",
        f"ATTRS = {attrs!r}",
        f"TOLERANCE = {_TOLERANCE!r}",
        f"fn = {fn.__name__}",
        "",
        "",
        "def to_framework(x):",
        f"    return {_LOAD[framework]}",
        "",
        "",
        "def to_numpy(t):",
        f"    return {_FETCH[framework]}",
        "",
        "",
        "data = np.load(Path(__file__).with_name('case.npz'))",
        f"xs = [to_framework(data[f'input{{i}}']) for i in range({len(case.inputs)})]",
    ]
    if not backward:
        lines += [
            "outs = fn(*xs, **ATTRS)",
            "outs = outs if isinstance(outs, tuple) else (outs,)",
            "worst = 0.0",
            "for k, out in enumerate(outs):",
            f"    truth = data[f'{side}_output{{k}}'].astype(np.float64)",
            "    scale = max(float(np.sqrt(np.mean(np.square(truth)))), 1e-30)",
            "    worst = max(worst, float(np.max(np.abs(to_numpy(out) - truth))) / scale)",
            f"print(f'{framework} {node.op}: max error {{worst:.3e}} of the values\\' scale "
            "(tolerance {TOLERANCE:.0e})')",
        ]
    else:
        lines += [
            f"grads = [data[f'grad_output{{k}}'] if f'grad_output{{k}}' in data else None "
            f"for k in range({len(node.outputs)})]",
            textwrap.dedent(_BACKWARD[framework]),
            "got = sum(float(np.sum(to_numpy(g) * data[f'direction{i}']))",
            "          for i, g in enumerate(grads_in) if g is not None and "
            "f'direction{i}' in data)",
            f"truth = float(data['{side}_directional'])",
            "worst = abs(got - truth) / max(abs(truth), 1e-30)",
            f"print(f'{framework} {node.op} backward: <gradient, u> = {{got:.9g}}, float64 "
            "truth {truth:.9g}, relative error {worst:.3e} (tolerance {TOLERANCE:.0e})')",
        ]
    lines += ["sys.exit(1 if worst > TOLERANCE else 0)", ""]
    return "\n".join(lines)


def _onnx_files(folder: Path, node: Node, side: str, case: ReproCase) -> None:
    from specgraph.frontends.onnx.export import to_onnx

    b = GraphBuilder("repro")
    ins = [b.input(f"input{i}", v.shape, v.dtype) for i, v in enumerate(node.inputs)]
    made = b.add_multi(node.op, ins, dict(node.attrs),
                       outputs=[(v.shape, v.dtype) for v in node.outputs])
    for k, v in enumerate(made):
        b.output(f"output{k}", v)
    model = to_onnx(b.build(), {})
    (folder / "layer.onnx").write_bytes(model.SerializeToString())
    (folder / "repro_onnx.py").write_text(f'''"""Reproduces a forward divergence of {node.op} in onnxruntime: runs layer.onnx alone
on the inputs captured in case.npz and compares with the float64 truth (exit 1 when off)."""

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

here = Path(__file__).parent
data = np.load(here / "case.npz")
session = ort.InferenceSession(str(here / "layer.onnx"), providers=["CPUExecutionProvider"])
feed = {{f"input{{i}}": data[f"input{{i}}"] for i in range({len(node.inputs)})}}
outs = session.run(None, feed)
worst = 0.0
for k, out in enumerate(outs):
    truth = data[f"{side}_output{{k}}"].astype(np.float64)
    scale = max(float(np.sqrt(np.mean(np.square(truth)))), 1e-30)
    worst = max(worst, float(np.max(np.abs(out.astype(np.float64) - truth))) / scale)
print(f"onnxruntime {node.op}: max error {{worst:.3e}} of the values' scale")
sys.exit(1 if worst > {_TOLERANCE!r} else 0)
''', encoding="utf-8")


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


def write_repro(report: Any, folder: str | Path) -> list[str]:
    """Write the repro of ``report``'s first divergence into ``folder``; returns what was
    written, one line per file (nothing when the numbers agreed)."""
    case = getattr(report.numeric, "case", None)
    if case is None:
        return []
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "case.npz", **_case_arrays(case))
    written = [f"{out / 'case.npz'}: the layer's inputs and the float64 truth"]
    sides = [("lhs", case.lhs_framework, case.lhs_node), ("rhs", case.rhs_framework,
                                                          case.rhs_node)]
    seen = set()
    for side, framework, node in sides:
        if framework in seen:
            continue
        seen.add(framework)
        name = "jax" if framework == "flax" else framework
        if name == "onnx":
            if case.kind == "forward":
                _onnx_files(out, node, side, case)
                written.append(f"{out / 'repro_onnx.py'}: the layer in onnxruntime")
            continue
        if name not in _LOAD:
            continue
        path = out / f"repro_{name}.py"
        path.write_text(_script(name, node, side, case), encoding="utf-8")
        written.append(f"{path}: the layer in {name}")
    return written
