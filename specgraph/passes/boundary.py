"""``canonicalize_model``: a traced model in canonical form, layouts absorbed at its boundary.

Graph passes make the inside canonical; a model whose inputs are channels-last (Keras, Flax)
still starts with transposes to channels-first. Here such an input becomes channels-first
itself, with the permutation recorded in ``TracedModel.input_layouts`` (and likewise for
outputs), and a parameter read only through a reshape or transpose is stored in that layout
(recorded in ``TracedModel.param_layouts``), so the same network from any framework is the
same graph. An input read only through elementwise ops with fixed broadcast operands
(rescaling and per-channel normalization before the first convolution) whose results all
reach transposes by one permutation is transposed first and those ops run in its layout, so
that the input itself takes it. A parameter of integer or boolean dtype (an index table kept
as a buffer) is a constant of the graph, not a weight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Mapping, MutableMapping

import numpy as np

from specgraph.ir import Graph, Node, Value, prune, same_elements
from specgraph.model import INFERENCE_ONLY, LazyOutputs, TracedModel
from specgraph.ops import get_spec
from specgraph.passes.layer_attrs import with_layer_attrs
from specgraph.passes.linear_sums import fold_bias_sums
from specgraph.passes.manager import canonicalize
from specgraph.passes.rewrite import Rewriter
from specgraph.passes.transposes import ELEMENTWISE, inverse_perm, relayout_operand

__all__ = ["canonicalize_model", "channels_first", "take_channels_first", "take_layouts",
           "BATCH_FIRST"]

# the permutation taking a sequence-first input, [T, B, ...], batch-first
BATCH_FIRST = (1, 0, 2)


def channels_first(rank: int) -> tuple[int, ...]:
    """The permutation taking a channels-last array of ``rank`` axes channels-first."""
    return (0, rank - 1, *range(1, rank - 1))


def _absorb_input_transposes(graph: Graph, kept: Collection[str] = ()
                             ) -> tuple[Graph, dict[str, tuple[int, ...]]]:
    """Each input read only through transposes by one permutation takes that layout. A
    channels-last input that some readers transpose to channels-first and others read as
    it is (Keras' ``x + conv(x)``: the add reads the input itself) takes channels-first
    too, the others reading it transposed back (which the canonical passes then sink)."""
    layouts: dict[str, tuple[int, ...]] = {}
    inputs = list(graph.inputs)
    replaced: dict[Value, Value] = {}
    back: list[Node] = []  # the transposes back to the input's own layout, first
    for i, (name, v) in enumerate(zip(graph.input_names, graph.inputs)):
        if name in kept:
            continue
        users = graph.consumers(v)
        moved = [u for u in users if u.op == "transpose"]
        perms = {u.attrs["perm"] for u in moved}
        if not moved or len(perms) != 1:
            continue
        (perm,) = perms
        if len(moved) != len(users) and (v.rank < 3 or perm != channels_first(v.rank)):
            continue
        new = Value(tuple(v.shape[p] for p in perm), v.dtype)
        inputs[i] = new
        layouts[name] = perm
        for u in moved:
            replaced[u.outputs[0]] = new
        if len(moved) != len(users):
            own = Value(v.shape, v.dtype)
            attrs = get_spec("transpose").normalize_attrs({"perm": inverse_perm(perm)})
            back.append(Node("transpose", (new,), (own,), attrs, moved[0].scope,
                             moved[0].source, moved[0].origin))
            replaced[v] = own
    if not layouts:
        return graph, layouts
    nodes = back + [_remap(n, replaced) for n in graph.nodes
                    if n.outputs[0] not in replaced]
    outputs = [replaced.get(v, v) for v in graph.outputs]
    return graph.replace(inputs=inputs, nodes=nodes, outputs=outputs), layouts


def take_channels_first(traced: TracedModel, names: Collection[str]) -> TracedModel:
    """``traced`` taking the inputs ``names`` (channels-last, rank 3 or more) channels-first,
    each transposed back to its own layout where the model reads it: a channels-last model
    whose first layer is elementwise or a normalization (Keras' PReLU, GroupNormalization, a
    symmetric pad) takes its input as the channels-first model it is compared with does."""
    return take_layouts(traced, {name: channels_first(v.rank) for name, v in
                                 zip(traced.graph.input_names, traced.graph.inputs)
                                 if name in names and v.rank >= 3})


def take_layouts(traced: TracedModel, perms: Mapping[str, tuple[int, ...]]) -> TracedModel:
    """``traced`` taking each input of ``perms`` laid out by its permutation, transposed
    back to its own layout where the model reads it (a channels-last input taken
    channels-first; a sequence-first one, ``[T, B, ...]``, taken batch-first)."""
    graph = traced.graph
    inputs, replaced, back = list(graph.inputs), {}, []
    layouts = dict(traced.input_layouts)
    examples = dict(traced.inputs)
    for i, (name, v) in enumerate(zip(graph.input_names, graph.inputs)):
        if name not in perms or name in layouts:
            continue
        perm = tuple(perms[name])
        new = Value(tuple(v.shape[p] for p in perm), v.dtype)
        own = Value(v.shape, v.dtype)
        attrs = get_spec("transpose").normalize_attrs({"perm": inverse_perm(perm)})
        back.append(Node("transpose", (new,), (own,), attrs, "", "", ""))
        inputs[i], replaced[v], layouts[name] = new, own, perm
        if name in examples:
            examples[name] = np.ascontiguousarray(np.transpose(examples[name], perm))
    if not back:
        return traced
    nodes = back + [_remap(n, replaced) for n in graph.nodes]
    outputs = [replaced.get(v, v) for v in graph.outputs]
    return dataclasses.replace(traced, graph=graph.replace(inputs=inputs, nodes=nodes,
                                                           outputs=outputs),
                               inputs=examples, input_layouts=layouts)


def _compose(first: tuple[int, ...] | None, then: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation of a native output laid out by ``first`` and then by ``then``."""
    return then if first is None else tuple(then[p] for p in first)


def _fixed_values(graph: Graph) -> set[Value]:
    """Values that depend on parameters and constants only."""
    fixed = set(graph.params.values()) | set(graph.constants)
    for node in graph.nodes:
        if node.inputs and all(v in fixed for v in node.inputs):
            fixed.update(node.outputs)
    return fixed


def _relayable(value: Value, perm: tuple[int, ...]) -> bool:
    """Whether a broadcast operand reads in the layout ``perm`` makes by a reshape alone."""
    full = (1,) * (len(perm) - value.rank) + value.shape
    order = [i for i in perm if full[i] != 1]
    return value.rank <= len(perm) and order == sorted(order)


def _input_region(graph: Graph, x: Value, fixed: set[Value]
                  ) -> tuple[list[Node], list[Node], tuple[int, ...]] | None:
    """The elementwise ops between input ``x`` and the transposes by one permutation that
    all their results reach, or None: each op reads values of the region (shaped as ``x``)
    and fixed broadcast operands a reshape relays out, and nothing else reads the region."""
    inside, ops, ends, perms = {x}, [], [], set()
    outputs = set(graph.outputs)
    for node in graph.nodes:
        if not any(v in inside for v in node.inputs):
            continue
        if node.op == "transpose":
            ends.append(node)
            perms.add(node.attrs["perm"])
            continue
        out = node.outputs
        if get_spec(node.op).category not in ELEMENTWISE or len(out) != 1 \
                or out[0].shape != x.shape or out[0] in outputs:
            return None
        ops.append(node)
        inside.add(out[0])
    if not ops or len(perms) != 1 or x in outputs:
        return None
    (perm,) = perms
    for node in ops:
        for v in node.inputs:
            if v not in inside and (v not in fixed or v.rank > x.rank
                                    or not _relayable(v, perm)):
                return None
    return ops, ends, perm


def _hoist_to_inputs(graph: Graph, kept: Collection[str] = ()) -> Graph:
    """Each input whose ``_input_region`` is found is read through one transpose: the
    region's ops run in the transposed layout (the same arithmetic on each element, their
    broadcast operands reshaped) and the transposes after them are dropped."""
    fixed = _fixed_values(graph)
    regions = {}
    for name, x in zip(graph.input_names, graph.inputs):
        if name in kept:
            continue
        found = _input_region(graph, x, fixed)
        if found is not None:
            regions[x] = found
    if not regions:
        return graph
    rw = Rewriter(graph)
    moved: dict[Value, Value] = {}
    ops = {id(n): x for x, (region_ops, _, _) in regions.items() for n in region_ops}
    ends = {id(n): x for x, (_, region_ends, _) in regions.items() for n in region_ends}
    for node in graph.nodes:
        x = ops.get(id(node)) or ends.get(id(node))
        if x is None:
            inputs = tuple(rw.resolve(v) for v in node.inputs)
            rw.keep(node if inputs == node.inputs else node.replace(inputs=inputs))
            continue
        perm = regions[x][2]
        if x not in moved:
            moved[x] = rw.emit("transpose", [x], {"perm": perm}, like=node,
                               shape=tuple(x.shape[p] for p in perm), dtype=x.dtype)
        if node.op == "transpose":
            rw.replace(node.outputs[0], moved[node.inputs[0]])
            continue
        inputs = [moved[v] if v in moved else
                  relayout_operand(rw, v, inverse_perm(perm), x.rank, node)
                  for v in node.inputs]
        moved[node.outputs[0]] = rw.emit(node.op, inputs, dict(node.attrs), like=node,
                                         shape=moved[x].shape, dtype=node.outputs[0].dtype)
    return rw.finish()


def _absorb_output_transposes(graph: Graph, kept: Collection[str] = ()
                              ) -> tuple[Graph, dict[str, tuple[int, ...]]]:
    layouts: dict[str, tuple[int, ...]] = {}
    outputs = list(graph.outputs)
    for i, (name, v) in enumerate(zip(graph.output_names, graph.outputs)):
        if name in kept:
            continue
        node = graph.producer(v)
        if node is None or node.op != "transpose" or graph.consumers(v):
            continue
        layouts[name] = node.attrs["perm"]  # native = canonical.transpose(perm)
        outputs[i] = node.inputs[0]
    if not layouts:
        return graph, layouts
    return prune(graph.replace(outputs=outputs)), layouts


def _fold_param_layouts(graph: Graph, weights: dict[str, np.ndarray]
                        ) -> tuple[Graph, dict[str, tuple[tuple[str, tuple[int, ...]], ...]]]:
    """A parameter read only through one reshape or transpose is stored in that layout (a
    Flax DenseGeneral kernel [d, h, k] read as [d, h·k] becomes a [d, h·k] parameter, TF's
    [1, n] bias read as [n] an [n] one, TF's weight_norm g [k, 1, 1] read as [1, 1, k] a
    [1, 1, k] one); one read with size-1 axes added is kept as is, unless a layer reads it as
    its parameter in that shape (a weight norm's gain [k] read as [k, 1, 1], PyTorch's own
    shape for it); one with leading size-1 axes that only elementwise ops read, broadcasting
    it, is stored without them."""
    steps: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {}
    params = dict(graph.params)
    replaced: dict[Value, Value] = {}
    dropped: set[int] = set()
    for name, v in graph.params.items():
        users = graph.consumers(v)
        if (shape := _broadcast_alike(graph, v, users)) is not None:
            params[name] = replaced[v] = Value(shape, v.dtype)
            weights[name] = np.reshape(weights[name], shape)
            steps[name] = (("reshape", shape),)
            continue
        if not users or any(u.op not in ("reshape", "transpose") for u in users):
            continue
        kinds = {(u.op, u.attrs.get("shape", u.attrs.get("perm"))) for u in users}
        if len(kinds) != 1:
            continue
        ((op, arg),) = kinds
        shape = users[0].outputs[0].shape
        if op == "reshape" and len(arg) > v.rank and same_elements(arg, v.shape) and \
                not _read_as_layer_params(graph, [u.outputs[0] for u in users]):
            # a broadcasting view: [C] read as [1, 1, C] keeps its layout; [C] read as
            # [1, C, 1, 1] is stored as the [C, 1, 1] that broadcasts alike (TF's layer
            # scale on channels-last maps made channels-first, PyTorch's own shape for it)
            shape = _broadcast_view(graph, [u.outputs[0] for u in users]) or v.shape
            if shape == v.shape:
                continue
            arg = shape
        new = Value(shape, v.dtype)
        params[name] = new
        for u in users:
            replaced[u.outputs[0]] = new
            dropped.add(id(u))
        data = weights[name]
        weights[name] = np.reshape(data, arg) if op == "reshape" else np.transpose(data, arg)
        steps[name] = ((op, tuple(arg)),)
    if not steps:
        return graph, steps
    nodes = [_remap(n, replaced) for n in graph.nodes if id(n) not in dropped]
    outputs = [replaced.get(v, v) for v in graph.outputs]
    return graph.replace(params=params, nodes=nodes, outputs=outputs), steps


def _fold_param_splits(graph: Graph, weights: dict[str, np.ndarray],
                       known: Mapping[str, tuple[str, int, int, int]],
                       laid: Mapping[str, tuple[tuple[str, tuple[int, ...]], ...]],
                       shared: bool = False) -> tuple[Graph, dict[str, tuple[str, int, int, int]],
                                  dict[str, tuple[tuple[str, tuple[int, ...]], ...]],
                                  list[str]]:
    """A parameter read only by one split (a packed projection's weight, separated by
    ``specgraph.passes.packed``; PyTorch's cross-attention splitting ``in_proj_weight``
    into q's and the packed k·v's) is stored as its pieces, each named by the block it
    holds (``in_proj_weight[0:32]``: output features 0 to 31), each a parameter of its own.
    A piece (``known``) split again along the axis it was cut along (through the transposes
    laid on it since, ``laid``: PyTorch splits ``in_proj_weight`` before it transposes
    each part) is stored as blocks of the whole, laid out as that piece; the layouts of
    such blocks are returned with them, and the pieces they replace.

    ``shared``: the model is an inference program, whose exporter stores equal initializers
    once (``torch.onnx.export`` keeps one array of zeros for the biases of both attention
    layers of a freshly made decoder layer, split by the cross-attention and read whole by
    the self-attention); a parameter one split reads among other readers is stored as its
    pieces too and kept whole for the others (there is no gradient to share out)."""
    pieces: dict[str, tuple[str, int, int, int]] = {}
    moved: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {}
    retired: list[str] = []
    params: dict[str, Value] = {}
    replaced: dict[Value, Value] = {}
    dropped: set[int] = set()
    folds = []  # (name, its split, axis, the whole's name and axis, offset, layout steps)
    for name, v in graph.params.items():
        users = graph.consumers(v)
        splits = [u for u in users if u.op == "split"]
        alone = len(users) == 1 and len(splits) == 1
        params[name] = v
        if not (alone or (shared and len(splits) == 1 and name not in known)) or \
                v in graph.outputs:
            continue
        (split,) = splits
        axis = whole_axis = split.attrs["axis"] % v.rank
        whole, offset, steps = name, 0, ()
        if name in known:
            whole, whole_axis, offset, _ = known[name]
            steps = tuple(laid.get(name, ()))
            if _axis_before(axis, steps) != whole_axis:
                continue
        if alone:  # else read whole elsewhere too: it stays, and its split's pieces join it
            del params[name]
            if name in known:
                retired.append(name)  # split further: no longer a parameter
        folds.append((name, split, axis, whole, whole_axis, offset, steps))
    for name, split, axis, whole, whole_axis, offset, steps in folds:
        data, start = weights[name], 0
        for out, size in zip(split.outputs, split.attrs["sizes"]):
            piece = f"{whole}[{offset + start}:{offset + start + size}]"
            start += size
            same = params.get(piece)  # the block another split of it gave (``shared``)
            if same is not None and same.shape == out.shape:
                replaced[out] = same
                continue
            params[piece] = replaced[out] = Value(out.shape, out.dtype)
            weights[piece] = np.take(data, np.arange(start - size, start), axis=axis)
            pieces[piece] = (whole, whole_axis, offset + start - size, offset + start)
            if steps:
                moved[piece] = steps  # laid out as the piece it is cut from
        dropped.add(id(split))
    if not folds:
        return graph, pieces, moved, retired
    nodes = [_remap(n, replaced) for n in graph.nodes if id(n) not in dropped]
    outputs = [replaced.get(v, v) for v in graph.outputs]
    return graph.replace(params=params, nodes=nodes, outputs=outputs), pieces, moved, retired


def _axis_before(axis: int, steps: tuple[tuple[str, tuple[int, ...]], ...]) -> int | None:
    """The axis of a parameter, before its layout ``steps``, that is ``axis`` after them
    (None through a reshape)."""
    for kind, arg in reversed(steps):
        if kind != "transpose":
            return None
        axis = arg[axis]
    return axis


def _broadcast_alike(graph: Graph, v: Value, users: list[Node]) -> tuple[int, ...] | None:
    """``v``'s shape without its leading size-1 axes, where it has some and is read only by
    elementwise ops that broadcast it to the same result without them (an exporter's folded
    position table [1, T, d] beside the [T, d] table PyTorch's CLIP adds whole)."""
    lead = 0
    while lead < v.rank and v.shape[lead] == 1:
        lead += 1
    if not lead or not users or v in graph.outputs or \
            any(get_spec(u.op).category not in ("elementwise", "activation") for u in users):
        return None
    for k in range(lead, 0, -1):  # as many as the results keep their shapes without
        shape = v.shape[k:]
        if all(_broadcast(shape if x is v else x.shape for x in u.inputs) == u.outputs[0].shape
               for u in users):
            return shape
    return None


def _broadcast_view(graph: Graph, views: list[Value]) -> tuple[int, ...] | None:
    """The one shape, without leading size-1 axes, in which every one of ``views`` (a
    parameter's reshapes to one shape) is read alike, broadcast by elementwise ops."""
    shapes = {_broadcast_alike(graph, v, graph.consumers(v)) for v in views}
    return shapes.pop() if len(shapes) == 1 else None


def _broadcast(shapes: Iterator[tuple[int, ...]]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _read_as_layer_params(graph: Graph, values: list[Value]) -> bool:
    """Whether every read of ``values`` is in a slot its op names as a parameter."""
    for v in values:
        readers = graph.consumers(v)
        if not readers:
            return False
        for node in readers:
            spec = get_spec(node.op)
            names = spec.input_names(node.attrs, len(node.inputs))
            if any(u is v and name not in spec.params for u, name in zip(node.inputs, names)):
                return False
    return True


def _unit_group_affines_as_constants(graph: Graph, weights: dict[str, np.ndarray]) -> Graph:
    """In an inference program, the scale of ones and bias of zeros of a norm of a grouped
    reshape are constants, not weights (PyTorch's export of ``nn.GroupNorm`` normalizes
    [B, G, -1] with an InstanceNormalization the exporter gives unit initializers, then
    applies the model's per-channel scale and bias after the reshape back): what they hold
    is how the exporter wrote the norm, which the norm rules then see
    (``raise_norms._regroup``)."""
    tables = {}
    for node in graph.nodes:
        if node.op != "group_norm" or len(node.inputs) != 3:
            continue
        producer = graph.producer(node.inputs[0])
        if producer is None or producer.op != "reshape":
            continue
        for value, unit in zip(node.inputs[1:], (1.0, 0.0)):
            name = graph.param_name(value)
            if name is None or name not in weights or len(graph.consumers(value)) != 1:
                continue
            data = np.asarray(weights[name])
            if data.size and np.all(data == unit):
                tables[name] = value
    return _as_constants(graph, weights, tables)


def _integer_params_as_constants(graph: Graph, weights: dict[str, np.ndarray]) -> Graph:
    """A parameter of integer or boolean dtype is a constant: no gradient trains it, and
    its value is what the model's code computed (Swin's relative position index, a
    buffer in PyTorch and a non-trainable variable in TF), never a weight to pair."""
    return _as_constants(graph, weights, {
        name: v for name, v in graph.params.items()
        if v.dtype == "bool" or v.dtype.startswith(("int", "uint"))})


def _as_constants(graph: Graph, weights: dict[str, np.ndarray], tables: dict[str, Value]
                  ) -> Graph:
    """``graph`` with the parameters ``tables`` made constants of their values (taken out
    of ``weights``)."""
    if not tables:
        return graph
    constants = dict(graph.constants)
    for name, v in tables.items():
        data = np.array(weights.pop(name))
        data.setflags(write=False)
        constants[v] = data
    params = {k: v for k, v in graph.params.items() if k not in tables}
    return graph.replace(params=params, constants=constants)


_CARRIES = frozenset({"reshape", "expand", "squeeze", "unsqueeze", "transpose"})


def _fixed_floats_as_constants(graph: Graph, weights: dict[str, np.ndarray],
                               state: Collection[str]) -> Graph:
    """A floating parameter the model never trains (a PyTorch buffer, a non-trainable
    Keras variable) that only elementwise arithmetic reads (through reshapes), never a
    layer (a BatchNorm's running statistics): a constant of the model, as Keras'
    ``Rescaling(1/255)`` and ``Normalization(mean, variance)`` hold theirs, and a port's
    ``register_buffer('scale', ...)`` is compared by its numbers (the canonical graph has
    its layers raised: a norm that reads the statistics is a norm by then)."""
    def elementwise_only(v: Value, depth: int = 0) -> bool:
        readers = graph.consumers(v)
        if not readers or v in graph.outputs or depth > 4:
            return False
        for node in readers:
            if node.op in _CARRIES:
                if not all(elementwise_only(u, depth + 1) for u in node.outputs):
                    return False
            elif get_spec(node.op).category != "elementwise":
                return False
        return True

    return _as_constants(graph, weights, {
        name: v for name, v in graph.params.items()
        if name in state and name in weights and v.dtype.startswith(("float", "bfloat"))
        and elementwise_only(v)})


def _trig_tables_as_constants(graph: Graph, weights: dict[str, np.ndarray]) -> Graph:
    """A floating parameter read only to make a table of cosines and sines, with no input
    on the way (a rotary frequency table: ESM's ``inv_freq``, a buffer PyTorch's cache turns
    into constant tables and a non-trainable variable TF reads at every call), is a
    constant: what the model's code computed, never a weight to pair."""
    varying = set(graph.inputs)  # what depends on an input, in one pass in graph order
    for node in graph.nodes:
        if any(u in varying for u in node.inputs):
            varying.update(node.outputs)

    def to_trig(v: Value) -> bool:
        seen, stack = {v}, [v]
        while stack:
            u = stack.pop()
            readers = graph.consumers(u)
            if not readers or u in graph.outputs:
                return False
            for node in readers:
                if node.op in ("cos", "sin"):
                    continue
                if len(node.outputs) != 1 or any(w in varying for w in node.inputs):
                    return False
                if node.outputs[0] not in seen:
                    seen.add(node.outputs[0])
                    stack.append(node.outputs[0])
        return True

    return _as_constants(graph, weights, {
        name: v for name, v in graph.params.items()
        if v.dtype.startswith("float") and name in weights and to_trig(v)})


def _remap(node: Node, replaced: dict[Value, Value]) -> Node:
    if any(v in replaced for v in node.inputs):
        return node.replace(inputs=tuple(replaced.get(v, v) for v in node.inputs))
    return node


class _Changes(MutableMapping[str, np.ndarray]):
    """A model's weights with the changes canonicalization makes, the others read from the
    model's own mapping only when asked for (a spec's seeded weights are made lazily)."""

    def __init__(self, base: Mapping[str, np.ndarray]) -> None:
        self.base, self.changed = base, {}
        self.removed: set[str] = set()

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self.changed:
            return self.changed[key]
        if key in self.removed:
            raise KeyError(key)
        return self.base[key]

    def __setitem__(self, key: str, value: np.ndarray) -> None:
        self.changed[key] = value
        self.removed.discard(key)

    def __delitem__(self, key: str) -> None:
        if key not in self.changed and (key in self.removed or key not in set(self.base)):
            raise KeyError(key)
        self.changed.pop(key, None)
        self.removed.add(key)

    def __iter__(self) -> Iterator[str]:
        yield from (k for k in self.base if k not in self.removed and k not in self.changed)
        yield from self.changed

    def __len__(self) -> int:
        return sum(1 for _ in self)


def canonicalize_model(traced: TracedModel, keep_layout: Collection[str] = (),
                       keep_outputs: Collection[str] = ()) -> TracedModel:
    """``traced`` with its graph canonical and channels-last inputs/outputs made
    channels-first (their example inputs and outputs permuted to match); the inputs named in
    ``keep_layout`` keep their own layout (where the other side read as transposed what
    this one reads as it is: an einsum's operand), and the outputs named in ``keep_outputs``
    theirs."""
    weights = _Changes(traced.weights)
    graph = _integer_params_as_constants(traced.graph, weights)
    if traced.framework in INFERENCE_ONLY:
        graph = _unit_group_affines_as_constants(graph, weights)
    graph = canonicalize(_trig_tables_as_constants(graph, weights))
    param_layouts = {k: tuple(v) for k, v in traced.param_layouts.items()}
    param_pieces = dict(traced.param_pieces)
    param_sums = dict(traced.param_sums)
    for _ in range(4):
        before = graph
        graph, pieces, laid, retired = _fold_param_splits(
            graph, weights, param_pieces, param_layouts,
            shared=traced.framework in INFERENCE_ONLY)
        for name in retired:  # a piece split further: its blocks stand for it
            del param_pieces[name]
            param_layouts.pop(name, None)
        param_pieces.update(pieces)
        param_layouts.update(laid)
        graph, steps = _fold_param_layouts(graph, weights)
        graph, summed = fold_bias_sums(graph, weights)
        param_sums.update(summed)
        if not steps and graph is before:
            break
        for name, chain in steps.items():
            param_layouts[name] = param_layouts.get(name, ()) + chain
        graph = canonicalize(graph)
    state = getattr(traced.program, "state", frozenset()) if traced.program else frozenset()
    fixed = _fixed_floats_as_constants(graph, weights, state)
    if fixed is not graph:
        graph = canonicalize(fixed)
    graph = with_layer_attrs(graph, traced.layer_attrs)
    graph, in_layouts = _absorb_input_transposes(_hoist_to_inputs(graph, keep_layout),
                                                 keep_layout)
    graph, out_layouts = _absorb_output_transposes(graph, keep_outputs)
    if in_layouts or out_layouts:
        graph = canonicalize(graph)
        # an input taken channels-first while read as it was too: its transposes back,
        # sunk, may reach an output only now
        graph, more = _absorb_output_transposes(graph, keep_outputs)
        if more:
            out_layouts = {**out_layouts, **{k: _compose(out_layouts.get(k), p)
                                             for k, p in more.items()}}
            graph = canonicalize(graph)
    inputs = {k: np.transpose(a, in_layouts[k]) if k in in_layouts else a
              for k, a in traced.inputs.items()}
    outputs = traced.outputs
    if out_layouts:
        native = traced.outputs
        outputs = LazyOutputs(lambda: {
            k: np.transpose(a, np.argsort(out_layouts[k])) if k in out_layouts else a
            for k, a in native.items()}, list(native))
    kept = [k for k in weights if k in graph.params]
    changed = weights
    weights = LazyOutputs(lambda: {k: changed[k] for k in kept}, kept)  # read when read
    return dataclasses.replace(
        traced, graph=graph, inputs=inputs, outputs=outputs, weights=weights,
        param_layouts=param_layouts, param_pieces=param_pieces, param_sums=param_sums,
        input_layouts={**traced.input_layouts, **in_layouts},
        output_layouts={**traced.output_layouts, **out_layouts},
    )
