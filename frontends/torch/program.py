"""The PyTorch model's own program: its ExportedProgram, run again and observed.

``TorchProgram.observe`` runs the exported ATen graph (parameters lifted to inputs) with the
given weights and inputs on PyTorch's own kernels. Eager mode runs the graph op by op, as
``module(*inputs)`` does, keeps the tensors of the observed FX values and takes the loss's
gradient with respect to them. Compiled mode runs it through ``torch.compile`` as one
program, forward and backward, so fusion across layers is what is observed: there each
observed value gets a zero probe added where it is read (``x + 0`` is ``x``), the gradient
with respect to the probe being the gradient at that value, and the value itself becomes an
extra output. On a GPU the observed values and gradients stay there, as tensors.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Collection, Hashable, Mapping
from typing import Any

import numpy as np
import torch

from specgraph.numeric.program import DeviceCopies, NativeProgram, Observation
from specgraph.numeric.runner import Context, RunnerError

__all__ = ["TorchProgram"]

_WEIGHT_KINDS = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")


def _tensor(array: np.ndarray, device: Any) -> torch.Tensor:
    """A tensor over ``array``, copied only where its buffer is strided or read-only
    (PyTorch must not write into memory NumPy marks read-only)."""
    return torch.from_numpy(np.require(array, requirements=("C", "W"))).to(device)


def _numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return t.cpu().numpy()


def _kept(t: torch.Tensor) -> Any:
    """An observed tensor as the observation keeps it: a NumPy view on the CPU, the
    tensor itself (detached) on a GPU, where the comparison reads it."""
    return _numpy(t) if t.device.type == "cpu" else t.detach()


class _Watcher(torch.fx.Interpreter):
    """Runs an FX graph module node by node, keeping the tensors of the observed keys."""

    def __init__(self, module: Any, keys: list[Hashable]) -> None:
        super().__init__(module, garbage_collect_values=True)
        self.want: dict[str, list[Hashable]] = {}
        for key in keys:
            self.want.setdefault(key[0], []).append(key)  # type: ignore[index]
        self.seen: dict[Hashable, torch.Tensor] = {}
        # what an in-place op writes into: its first argument and, where that is a view
        # (DeBERTa's ``pos_query_layer /= scale`` on the heads' permute of the linear's
        # output), every tensor it views, down to its base
        self.overwritten: set[str] = set()
        for n in module.graph.nodes:
            if _writes_first_argument(n) and hasattr(n.args[0], "name"):
                self.overwritten.update(_viewed(n.args[0]))

    def run_node(self, n: Any) -> Any:
        if _writes_first_argument(n) and hasattr(n.args[0], "name"):
            self._before_write(self.env.get(n.args[0]))
        out = super().run_node(n)
        for key in self.want.get(n.name, ()):
            index = key[1]  # type: ignore[index]
            value = out if index is None else out[index]
            if n.name in self.overwritten:  # a later in-place op writes over it: its value
                value = value.detach().clone()  # now, without a gradient of its own
            self.seen[key] = value
        return out

    def _before_write(self, target: Any) -> None:
        """A kept tensor in the memory an in-place op is about to write keeps its value as
        it is now (without a gradient of its own): an op that returns its input itself
        (dropout in eval: XLM's ``t = dropout(layer_norm(x)); t *= mask``) aliases the
        norm's output with no view in its schema to say so."""
        if not isinstance(target, torch.Tensor):
            return
        memory = target.untyped_storage().data_ptr()
        for key, value in self.seen.items():
            if isinstance(value, torch.Tensor) and \
                    value.untyped_storage().data_ptr() == memory:
                self.seen[key] = value.detach().clone()


def _zero_probe(shape: tuple[int, ...], dtype: Any, device: Any, grad: bool) -> torch.Tensor:
    """A leaf of zeros of ``shape`` over one element (all strides 0: nothing the size of the
    value is allocated or read), its own leaf for its own gradient, which autograd gives
    whole, of ``shape``."""
    one = torch.zeros(1, dtype=dtype, device=device)
    return one.as_strided(shape, (0,) * len(shape)).detach().requires_grad_(grad)


def _viewed(node: Any) -> list[str]:
    """The names of ``node`` and of every FX node it is a view of (through ops whose first
    argument the result aliases without writing it: view, permute, slice, ...)."""
    names = []
    while node is not None and hasattr(node, "name"):
        names.append(node.name)
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or not schema.arguments or \
                not node.args:
            break
        alias = schema.arguments[0].alias_info
        if alias is None or alias.is_write:
            break
        node = node.args[0]
    return names


def _writes_first_argument(node: Any) -> bool:
    """Whether ``node`` is an in-place op (``add_``) that writes into its first argument."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.arguments:
        return False
    alias = schema.arguments[0].alias_info
    return alias is not None and alias.is_write


class TorchProgram(NativeProgram):
    """An ExportedProgram with the names the traced graph gives its parameters, inputs and
    outputs.

    Args:
        exported: the ``torch.export`` program.
        targets: state_dict target -> graph parameter name (tied targets share a name).
        input_names: graph input names, in the order of the program's tensor inputs.
        output_names: graph output names, in the order of the program's tensor outputs.
    """

    framework = "torch"

    def __init__(self, exported: Any, targets: Mapping[str, str], input_names: list[str],
                 output_names: list[str]) -> None:
        self.ep = exported
        self.nodes = {n.name: n for n in exported.graph.nodes}
        self.targets = dict(targets)
        self.state = frozenset(
            self.targets[spec.target] for spec in exported.graph_signature.input_specs
            if spec.kind.name == "BUFFER" and spec.target in self.targets)
        self.input_names = input_names
        self.output_names = output_names
        self._built: dict[tuple[Any, ...], tuple[Any, list[Hashable], list[Any]]] = {}
        self._copies = DeviceCopies()  # weights and held tensors on a GPU
        # the placeholders an in-place op writes into through views (nn.Embedding's
        # max_norm renormalizes its weight's rows): each run gets a copy of its own, so the
        # caller's arrays (which a CPU tensor would view) stay as given
        self._written = {name for n in exported.graph.nodes if _writes_first_argument(n)
                         and hasattr(n.args[0], "name") for name in _viewed(n.args[0])}

    def _trains(self, target: str) -> bool:
        """Whether the model trains its parameter ``target`` (``requires_grad``)."""
        held = self.ep.state_dict.get(target)
        return bool(getattr(held, "requires_grad", True))

    def _on_device(self, name: str, array: Any, device: torch.device) -> torch.Tensor:
        """``array`` as a tensor on ``device``: on a GPU copied there once while the same
        memory is given (``DeviceCopies``), each call a new tensor over that copy, so that
        no run's autograd reaches another."""
        def copy() -> torch.Tensor:
            return _tensor(array, device) if isinstance(array, np.ndarray) else \
                array.detach().to(device)

        if device.type == "cpu":  # a view of the array, nothing copied
            return copy()
        return self._copies.get(name, array, device, copy).detach()

    # --- the program with probes ---------------------------------------------------------
    def _build(self, keys: Collection[Hashable], mode: str
               ) -> tuple[Any, list[Hashable], list[tuple[tuple[int, ...], Any] | None]]:
        """The keys that can be observed and, compiled, a copy of the exported graph module
        with a zero probe input added at each floating one, whose value becomes an extra
        output (an integer value, which no gradient reaches, is an extra output as it is:
        an opaque ``argsort``'s indices, which no kernel of the walk could remake)."""
        cache_key = (tuple(sorted(keys, key=repr)), mode)
        if cache_key in self._built:
            return self._built[cache_key]
        if mode == "eager":  # the graph as is (``_Watcher`` keeps the values)
            eager = [k for k in cache_key[0]
                     if self._node_for(self.nodes, k, floating=False) is not None]
            self._built[cache_key] = (None, eager, [])
            return None, eager, []
        gm = copy.deepcopy(self.ep.graph_module)
        graph = gm.graph
        nodes = {n.name: n for n in graph.nodes}
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        output = next(n for n in graph.nodes if n.op == "output")
        observed: list[Hashable] = []
        metas: list[tuple[tuple[int, ...], Any] | None] = []
        extra = []
        # what an in-place op writes into later (BERT's ``e += positions`` after ``e = a +
        # b``): its value is output as a copy made where it is computed, else the program
        # hands over the buffer as the write left it
        overwritten = {name for n in graph.nodes if _writes_first_argument(n)
                       and hasattr(n.args[0], "name") for name in _viewed(n.args[0])}

        def kept(value: Any, traced: Any) -> Any:
            """``value`` (``traced``'s, or its probed sum) as an output: a copy where an
            in-place op writes into ``traced`` later."""
            if traced.name not in overwritten:
                return value
            with graph.inserting_after(value):
                return graph.call_function(torch.ops.aten.clone.default, (value,))

        for key in cache_key[0]:
            node = self._node_for(nodes, key, floating=False)
            if node is None:
                continue
            if not node.meta["val"].dtype.is_floating_point:
                observed.append(key)
                extra.append(kept(node, node))
                metas.append(None)  # no probe: no gradient
                continue
            with graph.inserting_after(placeholders[-1]):
                probe = graph.placeholder(f"_probe_{len(observed)}")
            placeholders.append(probe)
            with graph.inserting_after(node):
                probed = graph.call_function(torch.ops.aten.add.Tensor, (node, probe))
            node.replace_all_uses_with(probed, delete_user_cb=lambda u: u is not probed)
            observed.append(key)
            extra.append(kept(probed, node))  # its value exactly (x + 0)
            val = node.meta["val"]
            metas.append((tuple(int(d) for d in val.shape), val.dtype))
        outs = output.args[0]
        flat = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        output.args = (tuple(flat + extra),)
        gm.graph.lint()
        gm.recompile()
        run = torch.compile(gm, dynamic=False)
        self._built[cache_key] = (run, observed, metas)
        return run, observed, metas

    @staticmethod
    def _node_for(nodes: Mapping[str, Any], key: Hashable, floating: bool = True) -> Any:
        """The FX node holding the tensor ``key`` names (a tuple output's getitem): a
        floating one, or (``floating=False``) any."""
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] in nodes):
            return None
        node = nodes[key[0]]
        if key[1] is not None:
            node = next((u for u in node.users if u.target is operator.getitem
                         and u.args[1] == key[1]), None)
        if node is None or not isinstance(node.meta.get("val"), torch.Tensor):
            return None
        return node if node.meta["val"].dtype.is_floating_point or not floating else None

    def native_call(self, key: Hashable) -> tuple[str, Any, Any, list[tuple[int, ...]]] | None:
        """The ATen call that makes the value ``key`` names, for a script that runs it alone
        (``--repro``): the op's qualified name (``aten.avg_pool2d.default``), its arguments
        and keyword arguments with each tensor argument replaced by ``("input", k)`` (k in the
        order they appear) and the shapes of those tensors; None where an argument is
        something a script cannot write (a tensor held as a constant, a symbolic size) or
        the value is one output of several (its getitem's op is the call)."""
        node = self._node_for(self.nodes, key, floating=False)
        if node is None or node.op != "call_function" or key[1] is not None:  # type: ignore
            return None
        target = node.target
        name = getattr(target, "name", lambda: None)()
        overload = getattr(target, "_overloadname", None)
        if not isinstance(name, str) or not name.startswith("aten::") or \
                not isinstance(overload, str) or not all(
                    part.isidentifier() for part in (name[len("aten::"):], overload)):
            return None  # an op a script names by attribute: plain identifiers only
        shapes: list[tuple[int, ...]] = []
        plain = True

        def put(a: Any) -> Any:
            nonlocal plain
            if isinstance(a, torch.fx.Node):
                val = a.meta.get("val")
                if not isinstance(val, torch.Tensor) or a.op == "get_attr":
                    plain = False
                    return None
                shapes.append(tuple(int(d) for d in val.shape))
                return ("input", len(shapes) - 1)
            if isinstance(a, (list, tuple)):
                return type(a)(put(x) for x in a)
            if a is None or isinstance(a, (bool, int, float, str)):
                return a
            plain = False
            return None

        args, kwargs = put(node.args), {k: put(v) for k, v in node.kwargs.items()}
        if not plain:
            return None
        return f"aten.{name[len('aten::'):]}.{overload}", args, kwargs, shapes

    def _single_readers(self, keys: list[Hashable]) -> set[Hashable]:
        """The keys whose FX value one node alone reads (not an output of the program)."""
        out = set()
        for key in keys:
            node = self._node_for(self.nodes, key)
            if node is not None and len(node.users) == 1 and \
                    next(iter(node.users)).op != "output":
                out.add(key)
        return out

    # --- running it ------------------------------------------------------------------------
    def _device(self, context: Context) -> torch.device:
        if context.device == "cuda" and not torch.cuda.is_available():
            raise RunnerError("--device cuda: PyTorch sees no CUDA device here; pass "
                              "--device cpu or auto")
        cuda = context.device in ("cuda", "auto") and torch.cuda.is_available()
        return torch.device("cuda" if cuda else "cpu")

    def observe(self, weights: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
                keys: Collection[Hashable], cotangents: Mapping[str, np.ndarray] | None,
                context: Context) -> Observation:
        self.require_float32(context)
        device = self._device(context)
        run, observed, metas = self._build(keys, context.mode)
        backward = cotangents is not None
        args: list[Any] = []
        leaves: dict[str, torch.Tensor] = {}
        fed: dict[str, torch.Tensor] = {}  # floating user inputs, for their gradients
        user = iter(self.input_names)
        for spec in self.ep.graph_signature.input_specs:
            kind = spec.kind.name
            if kind in _WEIGHT_KINDS:
                name = self.targets.get(spec.target)
                if name is not None and name in weights:
                    if name not in leaves:
                        t = self._on_device(name, weights[name], device)
                        if spec.arg.name in self._written:
                            t = t.clone()
                        # a parameter requires its gradient even for a forward alone, as
                        # in model(*inputs): PyTorch picks other kernels for tensors that
                        # do (linear on a strided input rounds otherwise without)
                        # a parameter frozen in the model (requires_grad=False: Marian's
                        # sinusoidal table) gets no gradient, as in training
                        trained = kind == "PARAMETER" and t.is_floating_point() and \
                            self._trains(spec.target)
                        leaves[name] = t.requires_grad_(trained)
                    args.append(leaves[name])
                else:
                    held = (self.ep.constants[spec.target] if spec.target in self.ep.constants
                            else self.ep.state_dict[spec.target])
                    args.append(self._on_device(f"held:{spec.target}", held, device))
            elif kind == "USER_INPUT":
                if hasattr(spec.arg, "value") and (spec.arg.value is None or not hasattr(
                        spec.arg, "name")):  # an input given as None: no tensor to feed
                    args.append(spec.arg.value)
                    continue
                name = next(user)
                t = _tensor(inputs[name], device)
                if backward and t.is_floating_point():
                    fed[name] = t.requires_grad_(True)
                args.append(t)
            else:
                raise RunnerError(f"the PyTorch program takes a {kind.lower()} input, which "
                                  "specgraph cannot feed; pass --replay")
        if context.mode == "eager":
            # op by op, the exported graph as is: the observed values are its own tensors
            # (no probe changes a layout), their gradients taken with respect to them
            flat_probes = []
            watcher = _Watcher(self.ep.graph_module, observed)
            with torch.enable_grad():  # as model(*inputs) runs
                outs = list(watcher.run(*args))
            seen = [watcher.seen[k] for k in observed]
            wrt_seen = [t for t in seen if t.requires_grad]
        else:
            probe_of = {k: _zero_probe(meta[0], meta[1], device, backward)
                        for k, meta in zip(observed, metas) if meta is not None}
            flat_probes = list(probe_of.values())
            with torch.enable_grad():  # as model(*inputs) runs
                results = list(run(*args, *flat_probes))
            n_out = len(results) - len(observed)
            outs, seen = results[:n_out], results[n_out:]
            wrt_seen = flat_probes
        tensor_outs = [o for o in outs if isinstance(o, torch.Tensor)]
        obs = Observation(outputs={name: _numpy(t) for name, t in
                                   zip(self.output_names, tensor_outs)},
                          values={k: _kept(t) for k, t in zip(observed, seen)},
                          single_reader=self._single_readers(observed))
        if backward:
            pairs = [(t, _tensor(cotangents[name], device).to(t.dtype))
                     for name, t in zip(self.output_names, tensor_outs)
                     if name in cotangents and t.requires_grad]
            params = [t for t in leaves.values() if t.requires_grad]
            wrt = [*params, *fed.values(), *wrt_seen]
            if pairs and wrt:
                grads = torch.autograd.grad([t for t, _ in pairs], wrt,
                                            grad_outputs=[c for _, c in pairs],
                                            allow_unused=True)
                names = [n for n, t in leaves.items() if t.requires_grad]
                for name, g in zip(names, grads[:len(names)]):
                    if g is not None:
                        obs.param_grads[name] = _kept(g)
                for name, g in zip(fed, grads[len(names):len(names) + len(fed)]):
                    if g is not None:
                        obs.input_grads[name] = _kept(g)
                by_tensor = dict(zip(map(id, wrt_seen), grads[len(names) + len(fed):]))
                for key, t in zip(observed, seen):
                    if context.mode != "eager":  # its gradient is its probe's
                        t = probe_of.get(key)
                    g = by_tensor.get(id(t))
                    if g is not None:
                        obs.grads[key] = _kept(g)
        return obs
