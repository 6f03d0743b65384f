"""PyTorch frontend: ``torch.export`` at the level of high-level ATen ops, onto the shared IR.

Parameters and buffers become graph parameters under their ``state_dict`` names, in
canonical layout (linear weights transposed to ``[in, out]``); ``scope`` comes from
``nn_module_stack``, ``source`` from the user frame of ``stack_trace``. Each ATen op has a
small converter in ``specgraph.frontends.torch.ops`` or ``shape_ops``; an op none knows
becomes ``opaque``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import logging
import operator
import warnings
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from specgraph.errors import FactoryError, TraceError, first_line
from specgraph.frontends._common.converter import (NATIVE, BaseConverter, Step, no_steps,
                                                   swap_last_two)
from specgraph.frontends._common.inputs import example_tuple
from specgraph.frontends._common.sources import display_path
from specgraph.frontends._common.table import join
from specgraph.frontends._common.writes import emit_write
from specgraph.frontends.torch import ops, recurrent, shape_ops
from specgraph.frontends.torch.complex_ops import ComplexPair, with_complex
from specgraph.frontends.torch.program import TorchProgram
from specgraph.ir import Value, prune
from specgraph.model import TracedModel
from specgraph.ops.dtypes import numpy_dtype

__all__ = ["trace", "accepts", "FRAMEWORK"]

FRAMEWORK = "torch"

_DTYPES = {
    torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
    torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}
_TORCH_DIR = os.path.dirname(torch.__file__)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_CONVERTERS = with_complex(join(ops.CONVERTERS, shape_ops.CONVERTERS, recurrent.CONVERTERS))


def accepts(model: Any) -> bool:
    return isinstance(model, torch.nn.Module)


def dtype_name(dtype: torch.dtype, where: str = "") -> str:
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise TraceError(f"{where}dtype {dtype} is not supported by specgraph") from None


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A detached CPU NumPy copy (bfloat16 widened to float32), in memory PyTorch allocated
    (64-byte aligned, so that the runners of other frameworks can share it)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.clone(memory_format=torch.contiguous_format).numpy()


def _leaves_with_names(tree: Any, root: str) -> list[tuple[str, Any]]:
    """Leaves of a pytree with dotted path names ("logits", "hidden_states.1", "0").

    Walks mappings (ModelOutput included), dataclasses, lists and tuples itself, in pytree
    order, so types registered without key paths still get readable names.
    """
    out: list[tuple[str, Any]] = []

    def walk(node: Any, parts: list[str]) -> None:
        if node is None:
            return
        if isinstance(node, Mapping):
            for key, item in node.items():
                walk(item, [*parts, str(key)])
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            for f in dataclasses.fields(node):
                walk(getattr(node, f.name), [*parts, f.name])
        elif isinstance(node, (list, tuple)):
            for i, item in enumerate(node):
                walk(item, [*parts, str(i)])
        else:
            out.append((".".join(parts) or "output", node))

    walk(tree, [root] if root else [])
    return out


def _input_names(module: torch.nn.Module, args: tuple[Any, ...]) -> list[tuple[str, Any]]:
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    named: list[tuple[str, Any]] = []
    for i, arg in enumerate(args):
        root = params[i] if i < len(params) else f"input{i}"
        named.extend(_leaves_with_names(arg, root))
    return named


def _holds_cache(tree: Any, depth: int = 0) -> str | None:
    """The class name of a key/value cache object among a model's outputs (HF's
    ``DynamicCache`` in ``past_key_values``), if there is one."""
    if depth > 4 or tree is None or isinstance(tree, torch.Tensor):
        return None
    name = type(tree).__name__
    if name.endswith("Cache") and hasattr(tree, "update"):
        return name
    if isinstance(tree, Mapping):
        items: Any = tree.values()
    elif isinstance(tree, (list, tuple)):
        items = tree
    elif dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        items = [getattr(tree, f.name) for f in dataclasses.fields(tree)]
    else:
        return None
    return next((found for item in items if (found := _holds_cache(item, depth + 1))), None)


def _register_dataclasses(tree: Any) -> None:
    """Let torch.export flatten dataclass outputs that are not pytree nodes yet."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        cls = type(tree)
        if cls not in pytree.SUPPORTED_NODES:
            torch.export.register_dataclass(cls)
        for f in dataclasses.fields(tree):
            _register_dataclasses(getattr(tree, f.name))
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            _register_dataclasses(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            _register_dataclasses(item)


def _as_tensors(example_inputs: Any, reference: str) -> tuple[Any, ...]:
    example_inputs = example_tuple(
        example_inputs, reference, single=lambda x: isinstance(x, (torch.Tensor, np.ndarray)),
        returns="(module, example_inputs)", kind="tensor")

    def convert(leaf: Any) -> Any:
        return torch.from_numpy(np.asarray(leaf)) if isinstance(leaf, np.ndarray) else leaf

    return tuple(pytree.tree_map(convert, a) for a in example_inputs)


def trace(module: Any, example_inputs: Any, *, reference: str = "<model>") -> TracedModel:
    """Trace a ``torch.nn.Module`` on ``example_inputs`` into a TracedModel (eval mode).

    Args:
        module: the model.
        example_inputs: a tuple of inputs (tensors or pytrees of tensors), or one tensor.
        reference: the model reference, for messages.

    Raises:
        TraceError: torch.export failed (its reason is in the message).
    """
    if not accepts(module):
        raise FactoryError(f"{reference}: expected a torch.nn.Module, got "
                           f"{type(module).__name__}")
    args = _as_tensors(example_inputs, reference)
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    kept = _renormed_weights(module)
    try:
        try:
            with torch.no_grad():
                eager = module(*args)
        except Exception as err:
            raise TraceError(f"{reference}: the model raised {type(err).__name__} when run on "
                             f"its example inputs: {first_line(err)}") from err
        _register_dataclasses(eager)
        cache = _holds_cache(eager)  # HF's default use_cache=True returns a Cache object
        if cache is not None:
            raise TraceError(
                f"{reference}: the model returns a key/value cache "
                f"({cache}), which is no tensor to compare; build it with "
                "use_cache=False in its config (or pass use_cache=False in the call)")
        try:
            exported = _export(module, args)
        except Exception as err:
            raise TraceError(
                f"{reference}: torch.export could not trace the model: {first_line(err)}; "
                "simplify forward (data-dependent Python control flow, outputs that are not "
                "tensors) or run with --debug for torch's full report"
            ) from err
    finally:  # the model as it was given: its weights, not the rows its run renormalized,
        # and in the mode it was in (a model being trained stays in training mode)
        with torch.no_grad():
            for weight, before in kept:
                weight.copy_(before)
        for m, mode in modes:
            m.training = mode
    converter = _Converter(exported, reference, _CONVERTERS, _preferred_names(module))
    graph, weights = converter.convert(module, args)
    inputs = {name: to_numpy(t) for name, t in _input_names(module, args)
              if isinstance(t, torch.Tensor)}
    outputs = {name: to_numpy(t) for name, t in converter.output_leaves(eager)}
    steps, shapes = converter.native_layouts()
    program = TorchProgram(exported, converter.param_targets(graph), list(inputs),
                           list(graph.output_names))
    training = [name or "the model" for name, m in module.named_modules()
                if m.training and _modal(m)]
    notes = (f"the model was handed over in training mode ({_listed(training)}); it was "
             "traced and run in eval mode (dropout off, batch norm on its running "
             "statistics) and is left in training mode",) if training else ()
    return TracedModel(graph, weights, inputs, outputs, FRAMEWORK, reference, native=module,
                       program=program, param_layouts=steps, param_shapes=shapes, notes=notes)


def _modal(module: torch.nn.Module) -> bool:
    """Whether ``module`` computes otherwise in training mode: a dropout, a batch norm, a
    recurrent layer with dropout between its layers."""
    return isinstance(module, (torch.nn.modules.dropout._DropoutNd,
                               torch.nn.modules.batchnorm._BatchNorm)) or \
        isinstance(module, torch.nn.RNNBase) and module.dropout > 0


def _listed(names: list[str]) -> str:
    """Up to three module names, then how many more."""
    shown = ", ".join(names[:3])
    return shown if len(names) <= 3 else f"{shown} and {len(names) - 3} more"


def _renormed_weights(module: Any) -> list[tuple[Any, Any]]:
    """Each weight the model's run writes into, with a copy of it: ``nn.Embedding(max_norm=
    ...)`` renormalizes the rows it looks up in place, so running the model would change
    the user's weights (and its traced program would read the changed ones)."""
    return [(m.weight, m.weight.detach().clone()) for m in module.modules()
            if isinstance(m, torch.nn.Embedding) and m.max_norm is not None]


def _broadcast_sdpa_mask(masking: Any) -> Any:
    """transformers' ``sdpa_mask_recent_torch`` with the mask function applied to
    broadcast index tensors (batch, head, query, key: one axis each) instead of under four
    ``torch.vmap``s: HF's mask functions compare and index elementwise, so it is the same
    boolean mask, and ``torch.export`` records it op by op rather than as one opaque call
    on the mask input."""
    def sdpa_mask(batch_size: int, cache_position: torch.Tensor, kv_length: int,
                  kv_offset: int = 0, mask_function: Any = masking.causal_mask_function,
                  attention_mask: Any = None, local_size: Any = None,
                  allow_is_causal_skip: bool = True, **kwargs: Any) -> Any:
        q_length = cache_position.shape[0]
        padding_mask = masking.prepare_padding_mask(attention_mask, kv_length, kv_offset,
                                                    _slice=False)
        if allow_is_causal_skip and masking._ignore_causal_mask_sdpa(
                padding_mask, q_length, kv_length, kv_offset, local_size):
            return None
        kv_arange = torch.arange(kv_length, device=cache_position.device) + kv_offset
        if padding_mask is not None:
            mask_function = masking.and_masks(mask_function,
                                              masking.padding_mask_function(padding_mask))
        device = cache_position.device
        mask = mask_function(torch.arange(batch_size, device=device)[:, None, None, None],
                             torch.arange(1, device=device)[None, :, None, None],
                             cache_position[None, None, :, None],
                             kv_arange[None, None, None, :])
        return mask.expand(batch_size, 1, q_length, kv_length)

    return sdpa_mask


@contextlib.contextmanager
def _masks_without_vmap() -> Any:
    """Within, HF transformers' (4.53 on) attention masks are built without ``torch.vmap``
    (``_broadcast_sdpa_mask``); nothing changes where transformers is not loaded or builds
    its masks otherwise."""
    masking = sys.modules.get("transformers.masking_utils")
    recent = getattr(masking, "sdpa_mask_recent_torch", None)
    table = getattr(getattr(masking, "ALL_MASK_ATTENTION_FUNCTIONS", None), "_global_mapping",
                    None)
    needed = ("causal_mask_function", "prepare_padding_mask", "_ignore_causal_mask_sdpa",
              "and_masks", "padding_mask_function")
    if recent is None or getattr(masking, "sdpa_mask", None) is not recent or not all(
            hasattr(masking, name) for name in needed):
        yield
        return
    broadcast = _broadcast_sdpa_mask(masking)
    swapped = isinstance(table, dict) and table.get("sdpa") is recent
    masking.sdpa_mask = broadcast  # what eager_mask calls
    if swapped:
        table["sdpa"] = broadcast
    try:
        yield
    finally:
        masking.sdpa_mask = recent
        if swapped:
            table["sdpa"] = recent


@contextlib.contextmanager
def _causal_masks_undecided() -> Any:
    """Within, ``nn.TransformerEncoder``'s check whether a float mask it is given is the
    causal one (``_detect_is_causal_mask``: ``bool((mask == causal).all())``, which
    torch.export cannot decide on a mask the model builds in ``forward``, as pytorch/examples'
    word language model does) answers what the caller said (``is_causal``, else no) where
    the export cannot decide: the mask is applied as given either way, so the layers
    compute the same; ``is_causal`` only picks a kernel."""
    from torch.nn.modules import transformer

    detect = getattr(transformer, "_detect_is_causal_mask", None)
    if detect is None:
        yield
        return

    def undecided(mask: Any, is_causal: Any = None, size: Any = None) -> bool:
        try:
            return detect(mask, is_causal, size)
        except Exception:  # noqa: BLE001  (a data-dependent guard: undecided)
            return bool(is_causal)

    transformer._detect_is_causal_mask = undecided
    try:
        yield
    finally:
        transformer._detect_is_causal_mask = detect


def _viewed_base(node: Any) -> Any:
    """The tensor ``node`` is a view of (through slices, selects, views...), or None where
    it is a tensor of its own."""
    base = node
    while getattr(base, "op", None) == "call_function":
        schema = getattr(base.target, "_schema", None)
        if schema is None or not schema.returns or schema.returns[0].alias_info is None or \
                schema.returns[0].alias_info.is_write or not base.args or \
                not hasattr(base.args[0], "name"):
            break
        base = base.args[0]
    return None if base is node else base


def _view_steps(view: Any, base: Any) -> list[tuple[Any, ...]] | None:
    """How ``view`` views ``base``: its selects and slices of step one from ``base`` on,
    each (kind, axis, start, end, the shape it views); None through any other view."""
    steps: list[tuple[Any, ...]] = []
    node = view
    while node is not base:
        if getattr(node, "op", None) != "call_function" or not node.args:
            return None
        x, key = node.args[0], str(node.target)
        shape = tuple(int(n) for n in shape_ops.shape_of(x))
        if key == "aten.select.int":
            dim = shape_ops.wrap_dim(node.args[1], len(shape))
            index = int(node.args[2]) % shape[dim]
            steps.insert(0, ("select", dim, index, index + 1, shape))
        elif key == "aten.slice.Tensor":
            dim = shape_ops.wrap_dim(node.args[1] if len(node.args) > 1 else 0, len(shape))
            start, end, step = slice(*(list(node.args[2:5]) + [None] * 3)[:3]).indices(
                shape[dim])
            if step != 1 or end < start:
                return None
            steps.insert(0, ("slice", dim, start, end, shape))
        else:
            return None
        node = x
    return steps


def _export(module: Any, args: tuple[Any, ...]) -> Any:
    """``torch.export.export`` with HF's masks built without vmap; where a mask function
    does not take broadcast indices, as the model writes it. Regions run under another
    grad mode are written in line (``_inline_grad_modes``)."""
    try:
        with _quiet_torch(), _masks_without_vmap(), _causal_masks_undecided():
            exported = torch.export.export(module, args)
    except Exception:
        with _quiet_torch(), _causal_masks_undecided():
            exported = torch.export.export(module, args)
    for _ in range(4):  # each export again may leave more sizes it can now know
        again = _specialized(exported, args)
        if again is exported:
            break
        exported = again
    _inline_grad_modes(exported)
    return exported


_SCALARS = ("aten.item.default", "aten._local_scalar_dense.default")


def _constant_scalars(exported: Any) -> list[Any]:
    """The program's ``tensor.item()`` nodes whose tensor comes from constants alone (no
    input, parameter or buffer of the model reaches it): sizes the model computes from
    fixed numbers through tensors, which torch.export leaves symbolic."""
    lifted = {spec.arg.name for spec in exported.graph_signature.input_specs
              if spec.kind.name == "CONSTANT_TENSOR" and hasattr(spec.arg, "name")}
    found = []
    for node in exported.graph.nodes:
        if node.op != "call_function" or str(node.target) not in _SCALARS:
            continue
        stack, seen, fixed = list(node.all_input_nodes), set(), True
        while stack and fixed:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            fixed = n.op != "placeholder" or n.name in lifted  # a torch.tensor(...) held
            stack.extend(n.all_input_nodes)
        if fixed:
            found.append(node)
    return found


def _specialized(exported: Any, args: tuple[Any, ...]) -> Any:
    """The program with each ``item()`` of a tensor made from constants alone replaced by
    its value, exported again: HF Funnel's relative positions are ``torch.arange`` between
    tensor endpoints computed from the sequence length, which torch.export leaves as sizes
    it cannot know; they are the same numbers on every input of these shapes. An ``item()``
    that an input or a weight reaches stays symbolic (its value is the data's)."""
    scalars = _constant_scalars(exported)
    if not scalars:
        return exported
    names = {n.name for n in scalars}
    try:
        module = exported.module()
    except Exception:  # noqa: BLE001  (the program as exported: its sizes stay symbolic)
        return exported
    values: dict[str, Any] = {}

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            if n.name in names:
                values[n.name] = out
            return out

    try:
        with torch.no_grad(), _quiet_torch():
            _Recorder(module).run(*pytree.tree_leaves(args))
    except Exception:  # noqa: BLE001  (the program as exported: its sizes stay symbolic)
        return exported
    graph = module.graph
    for node in list(graph.nodes):
        if node.name not in values:
            continue
        value = values[node.name]
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args,
                                              lambda a, n=node, v=value: v if a is n else a)
            user.kwargs = torch.fx.node.map_arg(user.kwargs,
                                                lambda a, n=node, v=value: v if a is n else a)
        graph.erase_node(node)
    graph.eliminate_dead_code()
    module.recompile()
    try:
        with _quiet_torch():
            return torch.export.export(module, args)
    except Exception:  # noqa: BLE001
        return exported


def _inline_grad_modes(exported: Any) -> None:
    """A part of ``forward`` run under ``torch.no_grad()`` (a method decorated so: Pegasus',
    Marian's and RoFormer's sinusoidal position tables) is exported as a call of a graph of
    its own, ``wrap_with_set_grad_enabled(False, submod, *args)``: its ops are put in line,
    each output then ``detach``ed (grad mode on: as they are), so that the model's own
    program computes the same values and the same gradients (none through it), and the
    graph reads them as any other ops."""
    wrap = getattr(torch.ops.higher_order, "wrap_with_set_grad_enabled", None)
    if wrap is None:
        return
    gm = exported.graph_module
    graph = gm.graph
    calls = [n for n in graph.nodes if n.op == "call_function" and n.target is wrap]
    for node in calls:
        enabled, holder, *inputs = node.args
        body = getattr(gm, holder.target, None)
        if not isinstance(body, torch.fx.GraphModule):
            continue
        places = [n for n in body.graph.nodes if n.op == "placeholder"]
        with graph.inserting_before(node):
            copies: dict[Any, Any] = dict(zip(places, inputs))
            for held in (n for n in body.graph.nodes if n.op == "get_attr"):
                # what the region holds (a region of its own: autocast's) moves to the
                # module under a name of its own, not one the module already uses
                name = "_inlined_" + str(held.target).replace(".", "_")
                k = 0
                while hasattr(gm, f"{name}_{k}"):
                    k += 1
                setattr(gm, f"{name}_{k}", operator.attrgetter(held.target)(body))
                copies[held] = graph.get_attr(f"{name}_{k}")
                copies[held].meta = dict(held.meta)
            outs = graph.graph_copy(body.graph, copies)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            if not enabled:
                kept = []
                for out in outs:
                    val = getattr(out, "meta", {}).get("val")
                    if isinstance(val, torch.Tensor) and val.is_floating_point():
                        cut = graph.call_function(torch.ops.aten.detach.default, (out,))
                        cut.meta = dict(out.meta)
                        out = cut
                    kept.append(out)
                outs = kept
        for user in list(node.users):
            if user.target is operator.getitem:
                user.replace_all_uses_with(outs[user.args[1]])
                graph.erase_node(user)
        if node.users:  # read otherwise than item by item: leave the call as it was
            continue
        graph.erase_node(node)
        if not holder.users:
            graph.erase_node(holder)
    if calls:
        graph.lint()
        gm.recompile()


@contextlib.contextmanager
def _quiet_torch() -> Any:
    """Keep torch's own log lines and warnings off the terminal while it exports; its
    reasons reach the user through the one-sentence error (and --debug's traceback)."""
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
               if name == "torch" or name.startswith("torch.")]
    loggers.append(logging.getLogger("torch"))
    levels = [(lg, lg.level) for lg in loggers]
    for lg, _ in levels:
        lg.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in levels:
            lg.setLevel(level)


def _preferred_names(module: torch.nn.Module) -> dict[str, str]:
    """Each parameter or buffer name -> the first name of the same tensor (tied weights)."""
    first: dict[int, str] = {}
    names: dict[str, str] = {}
    tensors = [*module.named_parameters(remove_duplicate=False),
               *module.named_buffers(remove_duplicate=False)]
    for name, tensor in tensors:
        names[name] = first.setdefault(id(tensor), name)
    return names


def _source(stack: str | None) -> str:
    if not stack:
        return ""
    frames = _FRAME.findall(stack)
    for file, line in reversed(frames):
        if not file.startswith(_TORCH_DIR):
            return f"{display_path(file)}:{line}"
    return ""


def _scope(meta: dict[str, Any]) -> str:
    stack = meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return re.sub(r"^L__self___|^L\['self'\]\.", "", str(path))


class _Converter(BaseConverter):
    """Walks the exported FX graph and builds the IR, one converter call per ATen node.

    Parameters and buffers are keyed by their ``state_dict`` target and stored ``native``
    or ``linear`` (a linear weight ``[out, in]`` stored ``[in, out]``).
    """

    LAYOUTS = {NATIVE: no_steps, "linear": swap_last_two,
               # a PReLU's slope per channel, laid out to broadcast over maps of rank 3-5
               **{f"channels{rank}": (lambda shape, rank=rank: (
                   ("reshape", (shape[0],) + (1,) * (rank - 2)),)) for rank in (3, 4, 5)}}

    def __init__(self, exported: Any, reference: str, converters: dict[str, Any],
                 preferred: dict[str, str]) -> None:
        super().__init__(reference)
        self.ep = exported
        self.preferred = preferred
        self.converters = converters
        self.env: dict[str, Any] = {}
        self.placeholders: dict[str, tuple[str, str]] = {}  # fx name -> (kind, target)
        self.targets: dict[str, Any] = {}  # parameter or buffer target -> its placeholder
        self.constants: dict[str, Value] = {}  # constant tensor target -> graph constant
        self.static: dict[str, Any] = {}  # fx name -> value computed by torch at trace time
        self.folded: dict[str, Value] = {}
        # (weight, indices) fx names -> (max_norm, norm_type): nn.Embedding(max_norm=...)'s
        # in-place renorm of the rows its lookup then reads (``ops._embedding_renorm``)
        self.renormed: dict[tuple[Any, Any], tuple[float, float]] = {}
        self.current: Any = None
        self.fills: dict[Value, Value] = {}  # a fill's result -> the number it fills with

    # --- the walk ------------------------------------------------------------------------
    def convert(self, module: torch.nn.Module, args: tuple[Any, ...]):
        user_inputs = iter(_input_names(module, args))
        for spec in self.ep.graph_signature.input_specs:
            name = spec.arg.name if hasattr(spec.arg, "name") else None
            kind = spec.kind.name
            if kind == "BUFFER" and self._is_constant_buffer(spec):
                kind = "CONSTANT_TENSOR"
            if kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                self.placeholders[name] = (kind, spec.target)
        self._refuse_vmap_over_inputs()
        for node in self.ep.graph.nodes:
            self.current, self._where = node, None
            if node.op == "placeholder":
                if node.name in self.placeholders:
                    self.targets[self.placeholders[node.name][1]] = node
                elif node.meta.get("val") is None:  # an input given as None (a mask not
                    self.static[node.name] = None  # passed): no tensor, nothing to feed
                else:
                    input_name, _ = next(user_inputs)
                    shape, dtype = self.meta(node)[0]
                    self.env[node.name] = self.b.input(input_name, shape, dtype)
            elif node.op == "get_attr":  # constants and functions held by the module
                obj = self.ep.graph_module
                for part in str(node.target).split("."):
                    obj = getattr(obj, part)
                self.static[node.name] = obj
            elif node.op == "call_function":
                if not self._fold(node):
                    self.env[node.name] = self.call(node)
                    self._record_native(node)
            elif node.op == "output":
                self.outputs(node)
        graph = prune(self.b.build())
        return graph, self.weights(graph)

    def _refuse_vmap_over_inputs(self) -> None:
        """A ``torch.vmap`` over values made from the model's inputs or weights is recorded
        as calls that change vmap's global state around an opaque Python function: a
        TraceError before anything runs (one over constants alone is computed, as a
        constant, with its calls balanced)."""
        dynamic: set[str] = set()
        depth, opened = 0, None
        for node in self.ep.graph.nodes:
            name = getattr(node.target, "__name__", "")
            if node.op == "placeholder":
                if self.placeholders.get(node.name, ("",))[0] != "CONSTANT_TENSOR":
                    dynamic.add(node.name)
                continue
            reads = {a.name for a in _flat_args(node) if hasattr(a, "name")}
            if reads & dynamic:
                dynamic.add(node.name)
                if depth:
                    raise TraceError(
                        f"{self.reference}: the model calls torch.vmap on values computed from "
                        f"its inputs or weights (at {_scope(opened.meta) or 'the top level'}); "
                        "specgraph follows the ops a model runs but not a vmapped Python "
                        "function: write that part with broadcasting instead of torch.vmap")
            if name == "_vmap_increment_nesting":
                depth += 1
                opened = opened or node
            elif name == "_vmap_decrement_nesting":
                depth = max(0, depth - 1)
                opened = opened if depth else None

    def _record_native(self, node: Any) -> None:
        """The IR values of ``node``'s outputs equal the FX node's values ``(name, index)``
        (where their shapes agree: a complex pair or a relaid value is no native)."""
        result = self.env[node.name]
        if node.target is operator.getitem:
            return  # the producer's record holds
        results = result if isinstance(result, (tuple, list)) else (result,)
        val = node.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        for index, (value, native) in enumerate(zip(results, vals)):
            if isinstance(value, Value) and isinstance(native, torch.Tensor) and \
                    not native.is_complex() and value.shape == tuple(native.shape):
                self.b.native(value, (node.name, index if len(results) > 1 else None))

    def _is_constant_buffer(self, spec: Any) -> bool:
        """A buffer that is a constant of the model, not a weight: one kept out of the
        state_dict (``persistent=False``: position ids, token-type ids, rotary frequency
        tables) or an integer or boolean one (an index table, a step counter). Persistent
        floating buffers (BatchNorm's running statistics) are weights."""
        if not getattr(spec, "persistent", True):
            return True
        tensor = self._tensor(spec.target)
        return not (tensor.is_floating_point() or tensor.is_complex())

    def _tensor(self, target: str) -> torch.Tensor:
        """The value of a parameter, buffer or constant tensor of the exported program."""
        if target in self.ep.constants:
            return self.ep.constants[target]
        return self.ep.state_dict[target]

    def _fold(self, node: Any) -> bool:
        """Compute with torch a node that reads neither inputs nor parameters (a causal mask,
        position ids, a vmap'd mask builder); its value becomes a graph constant if used."""
        args = _flat_args(node)
        for a in args:
            if hasattr(a, "name") and a.name not in self.static and not (
                    a.name in self.placeholders and self.placeholders[a.name][0] ==
                    "CONSTANT_TENSOR"):
                return False

        def resolve(a: Any) -> Any:
            if not hasattr(a, "name"):
                return a
            if a.name in self.static:
                return self.static[a.name]
            return self._tensor(self.placeholders[a.name][1])

        try:
            with torch.no_grad():
                value = node.target(*pytree.tree_map(resolve, node.args),
                                    **pytree.tree_map(resolve, node.kwargs))
        except Exception:  # not computable here: convert it like any other node
            return False
        self.static[node.name] = value
        return True

    def call(self, node: Any) -> Any:
        target = node.target
        if target is operator.getitem:
            seq, index = node.args
            return self.env[seq.name][index]
        key = str(target)
        converter = self.converters.get(key)
        # (an op without a converter is opaque; in place, what it writes into is too)
        result = self.opaque(node) if converter is None else converter(self, node)
        if key.endswith("_.default") or re.search(r"_\.[A-Za-z_]+$", key):
            first = node.args[0]  # an in-place op: later reads of its input see the result
            if hasattr(first, "name") and first.name not in self.placeholders:
                base = _viewed_base(first)
                if base is not None:
                    self._written_through_view(base, first, result)
                self.env[first.name] = result
        return result

    def _written_through_view(self, base: Any, view: Any, result: Any) -> None:
        """An in-place op wrote into ``view``, a view of ``base`` (``x[:, 0] = 0``,
        ``x[..., 1:] = y``): ``base`` changed too. Through selects and slices of step one it
        is ``where(written, y placed, base)``, ``written`` the constant mask of the view's
        elements and ``y`` padded (a fill: its number) into base's shape; through other views
        later reads of it read an opaque value (an error where it is run, never the
        unwritten tensor)."""
        val = base.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(result, Value):
            return
        before = self.value(base)
        meta = (tuple(int(s) for s in val.shape), dtype_name(val.dtype, self._at()))
        steps = _view_steps(view, base)
        if steps is not None and tuple(before.shape) == meta[0]:
            written = self._placed(before, result, steps)
        else:
            (written,) = self.emit_opaque([before, result], outs=[meta],
                                          target=f"{self.current.target} into a view")
        self.static.pop(base.name, None)
        self.folded.pop(base.name, None)
        self.env[base.name] = written

    def _placed(self, before: Value, result: Value, steps: list[tuple[Any, ...]]) -> Value:
        """``before`` with ``result`` written where ``steps`` (selects and slices, from
        ``before`` on) view it."""
        shape = tuple(before.shape)
        at = np.arange(int(np.prod(shape))).reshape(shape)
        for kind, dim, start, end, _ in steps:
            at = np.take(at, start, axis=dim) if kind == "select" else \
                np.take(at, np.arange(start, end), axis=dim)
        source = np.full(shape, -1, np.int64)
        source.reshape(-1)[at.reshape(-1)] = np.arange(at.size)
        return emit_write(self, before, source, result, self.fills.get(result))

    def opaque(self, node: Any) -> Any:
        if not isinstance(node.meta.get("val"), (torch.Tensor, tuple, list)):
            # a Python number read off the data (``lengths.max().item()``, a comparison of
            # such numbers) that only the program's own checks read: no tensor of the graph
            return None
        inputs = [self.value(a) for a in _flat_args(node) if self._is_tensor_arg(a)]
        outs = self.emit_opaque(inputs)
        val = node.meta.get("val")
        return outs if isinstance(val, (tuple, list)) else outs[0]

    def outputs(self, node: Any) -> None:
        flat = pytree.tree_leaves(node.args[0])
        names = self.output_names(len(flat))
        for name, arg in zip(names, flat):
            if hasattr(arg, "name"):
                self.b.output(name, self.value(arg))

    def output_names(self, count: int) -> list[str]:
        spec = self.ep.call_spec.out_spec
        tree = pytree.tree_unflatten(list(range(count)), spec)
        return [name for name, _ in _leaves_with_names(tree, "")]

    def param_targets(self, graph: Any) -> dict[str, str]:
        """Each graph parameter's name -> the state_dict targets that hold it (tied
        weights: every target of the one tensor)."""
        out: dict[str, list[str]] = {}
        for target in self.targets:
            name = self.preferred.get(target, target)
            if name in graph.params:
                out.setdefault(name, []).append(target)
        return {target: name for name, targets in out.items() for target in targets}

    def output_leaves(self, eager: Any) -> list[tuple[str, Any]]:
        return [(n, t) for n, t in _leaves_with_names(eager, "") if isinstance(t, torch.Tensor)]

    # --- the current node and the parameters, for the shared converter base ------------
    def locate(self) -> dict[str, str]:
        node = self.current
        return {"scope": _scope(node.meta), "source": _source(node.meta.get("stack_trace")),
                "origin": str(node.target)}

    def out(self, index: int = 0) -> tuple[tuple[int, ...], str]:
        return self.meta(self.current)[index]

    def outs(self) -> list[tuple[tuple[int, ...], str]]:
        return self.meta(self.current)

    def param_spec(self, key: Any) -> tuple[str, tuple[int, ...], str]:
        shape, dtype = self.meta(self.targets[key])[0]
        return self.preferred.get(key, key), shape, dtype

    def weight_array(self, key: Any, steps: tuple[Step, ...]) -> np.ndarray:
        """The parameter copied once in PyTorch's own layout and laid out by ``steps`` as a
        view of that copy where NumPy can (a linear weight is the transpose of a contiguous
        [out, in] array): the model's program takes it back without another copy."""
        array = to_numpy(self._tensor(key))
        for kind, arg in steps:
            array = np.transpose(array, arg) if kind == "transpose" else np.reshape(array, arg)
        return array

    # --- helpers for converters ----------------------------------------------------------

    def meta(self, node: Any) -> list[tuple[tuple[int, ...], str]]:
        val = node.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        out = []
        for v in vals:
            if isinstance(v, torch.Tensor):
                try:
                    shape = tuple(int(s) for s in v.shape)
                except Exception as err:  # a size torch.export left to the data
                    raise TraceError(
                        f"{self._at()}its output's shape {tuple(v.shape)} depends on the "
                        "values of the model's inputs (torch.export leaves it symbolic), and "
                        "specgraph traces shapes fixed by the example inputs; compute it from "
                        "shapes instead of values there") from err
                out.append((shape, dtype_name(v.dtype, self._at())))
        return out

    def _at(self) -> str:
        scope = _scope(self.current.meta) or "<model>"
        return f"{self.reference}: {self.current.target} at {scope}: "

    def _is_tensor_arg(self, arg: Any) -> bool:
        return hasattr(arg, "name") and isinstance(arg.meta.get("val"), torch.Tensor)

    def bind(self, node: Any) -> dict[str, Any]:
        """The node's arguments by schema name, defaults filled in."""
        schema = node.target._schema
        bound: dict[str, Any] = {}
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args):
                bound[arg.name] = node.args[i]
            elif arg.name in node.kwargs:
                bound[arg.name] = node.kwargs[arg.name]
            elif arg.has_default_value():
                bound[arg.name] = arg.default_value
            else:
                bound[arg.name] = None
        return bound

    def value(self, arg: Any) -> Value:
        """The IR value of an FX argument (parameters in their native layout)."""
        if not hasattr(arg, "name"):
            raise TraceError(f"{self._at()}expected a tensor argument, got {arg!r}")
        if arg.name in self.placeholders:
            return self.placeholder(arg, NATIVE)
        if arg.name in self.static:
            if arg.name not in self.folded:
                tensor = self.static[arg.name]
                if not isinstance(tensor, torch.Tensor):
                    raise TraceError(f"{self._at()}expected a tensor, got {type(tensor)}")
                self.folded[arg.name] = self.b.constant(to_numpy(tensor),
                                                        dtype_name(tensor.dtype, self._at()))
            return self.folded[arg.name]
        found = self.env[arg.name]
        if found is None:
            raise TraceError(f"{self._at()}a number read off the values of a tensor "
                             "(.item(), .tolist()) is computed with here; specgraph traces "
                             "tensor programs: keep it a tensor (drop the .item())")
        if isinstance(found, ComplexPair):
            raise TraceError(f"{self._at()}a complex tensor is read here; specgraph follows "
                             "complex tensors through view_as_complex, polar, mul, add, sub "
                             "and view_as_real only")
        return found

    def operand(self, arg: Any, dtype: str) -> Value:
        """A tensor argument, or a Python scalar as a 0-d constant of ``dtype``."""
        if hasattr(arg, "name") and not (arg.name in self.static and
                                         not isinstance(self.static[arg.name], torch.Tensor)):
            return self.value(arg)
        if hasattr(arg, "name"):
            arg = self.static[arg.name]
        np_dtype = numpy_dtype(dtype) if dtype != "bool" else np.bool_
        return self.b.constant(np.array(arg, dtype=np_dtype), dtype)

    def is_param(self, arg: Any) -> bool:
        """Whether an FX argument is a parameter or buffer of the module."""
        return hasattr(arg, "name") and self.placeholders.get(arg.name, ("",))[0] in (
            "PARAMETER", "BUFFER")

    def placeholder(self, arg: Any, layout: str) -> Value:
        """A parameter, buffer or constant tensor in ``layout`` (``native`` or ``linear``)."""
        kind, target = self.placeholders[arg.name]
        if kind != "CONSTANT_TENSOR":
            return self.param(target, layout)
        if target not in self.constants:
            tensor = self._tensor(target)
            self.constants[target] = self.b.constant(to_numpy(tensor), dtype_name(tensor.dtype))
        return self.relayout(self.constants[target], layout, target)

    def weight(self, arg: Any, layout: str) -> Value:
        """A weight argument in ``layout``: a parameter, or a computed tensor re-laid out."""
        if hasattr(arg, "name") and arg.name in self.placeholders:
            return self.placeholder(arg, layout)
        return self.relayout(self.value(arg), layout, f"value:{arg.name}")

    def opaque_output(self, node: Any, index: int) -> Value:
        """An output no canonical op computes (e.g. pooling indices), as its own opaque node."""
        return self.emit_opaque_output(self.value(node.args[0]), index)


def _flat_args(node: Any) -> list[Any]:
    return pytree.tree_leaves((node.args, node.kwargs))
