"""ONNX frontend: an ``.onnx`` file (or a ``ModelProto``) onto the shared IR, run in onnxruntime.

A file carries no example inputs, so ``trace_file`` makes seeded ones from the graph's input
types (see ``make_inputs``). The model runs twice in onnxruntime on CPU: once as is, for
the outputs users get, and once with optimizations off and every intermediate value as an
extra output; that second run gives each value's exact static shape (ONNX shape inference
mis-sizes some ceil-mode pools) and the values of shape computations, which are folded into
constants. Initializers become graph parameters under their own names, in canonical layout
(a Gemm weight with ``transB=1`` is stored ``[in, out]``). ``scope`` comes from the PyTorch
exporter's ``pkg.torch.onnx.name_scopes`` metadata, else from node names such as
``/encoder/layer.0/MatMul``; ``source`` from ``pkg.torch.onnx.stack_trace``. Each ONNX
operator has a small converter in ``specgraph.frontends.onnx.ops``; one none knows becomes
``opaque``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
from onnx import numpy_helper

from specgraph.errors import FactoryError, TraceError
from specgraph.ir import GraphBuilder, Value, prune
from specgraph.model import TracedModel
from specgraph.ops import OPAQUE
from specgraph.frontends._common.sources import display_path

__all__ = ["trace_file", "trace_model", "make_inputs", "accepts", "FRAMEWORK"]

FRAMEWORK = "onnx"

_DTYPES = {
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT16: "int16", onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.BOOL: "bool",
}
_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
          "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8,
          "uint8": np.uint8, "bool": np.bool_}
_NUMPY_NAMES = {np.dtype(v): k for k, v in _NUMPY.items()}
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_FRAMEWORK_FILE = re.compile(r"[/\\](?:site|dist)-packages[/\\](?:torch|onnxscript|onnx)[/\\]")
# Inputs in these slots hold weights: an initializer there is a parameter whatever its size.
# names exporters give to tensors they made up (masks, folded constants), not to weights
_GENERATED_NAME = re.compile(r"^(val_\d+|_val_\d+|onnx::|_tensor_constant|const_|/.*Constant)")

_WEIGHT_SLOTS = {
    "Gemm": (1, 2), "MatMul": (0, 1), "Conv": (1, 2), "ConvTranspose": (1, 2),
    "BatchNormalization": (1, 2, 3, 4), "LayerNormalization": (1, 2),
    "GroupNormalization": (1, 2), "InstanceNormalization": (1, 2), "RMSNormalization": (1,),
    "PRelu": (1,), "Gather": (0,),
}
# Outputs of these depend only on the shapes (or the dtype) of the inputs listed as ``()``.
_SHAPE_ONLY = {"Shape": (), "Size": (), "CastLike": (0,), "EyeLike": ()}
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli"}
# Constant-computable ops that stay visible as nodes where a non-constant op reads them.
_KEEP_VISIBLE = {"ConstantOfShape", "Range"}
_ORT_QUIET = 3


class Dynamic(Exception):
    """A converter needed a constant (axes, pads, ...) that the model computes at run time."""


def accepts(model: Any) -> bool:
    return isinstance(model, onnx.ModelProto)


# --- loading -----------------------------------------------------------------------------
def trace_file(path: Path, *, reference: str, inputs: Mapping[str, Any] | None = None
               ) -> TracedModel:
    """Trace the ONNX model in ``path`` into a TracedModel.

    External data is read only from files inside the model's own folder. Example inputs are
    made by ``make_inputs`` unless ``inputs`` gives some of them by input name.

    Raises:
        TraceError: the file is no valid ONNX model, its external data lies outside its
            folder, or onnxruntime cannot run it (one sentence).
    """
    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # protobuf raises its own DecodeError, files raise OSError
        raise TraceError(f"{reference} is not a valid ONNX model: {_first_line(err)}; "
                         "export it again or pass the right file") from err
    if not model.HasField("graph") or model.ir_version == 0 or not model.graph.output:
        raise TraceError(f"{reference} is not a valid ONNX model: it has no graph with "
                         "outputs; export it again or pass the right file")
    _load_external_data(model, path.parent, reference)
    return _trace(model, dict(inputs or {}), reference)


def trace_model(model: Any, example_inputs: Any = None, *, reference: str = "<model>"
                ) -> TracedModel:
    """Trace an in-memory ``onnx.ModelProto`` (what a factory returns) into a TracedModel.

    Args:
        model: the model, with its tensors inline.
        example_inputs: a tuple of arrays in graph-input order, a dict by input name, one
            array, or None for seeded random inputs.
        reference: the model reference, for messages.
    """
    if not accepts(model):
        raise FactoryError(f"{reference}: expected an onnx.ModelProto, got "
                           f"{type(model).__name__}")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in _tensors(model.graph)):
        raise TraceError(f"{reference}: the model keeps tensors in external files; load it "
                         "with onnx.load(path) or pass the .onnx path instead")
    return _trace(model, _named_inputs(model, example_inputs, reference), reference)


def _named_inputs(model: onnx.ModelProto, given: Any, reference: str) -> dict[str, Any]:
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return dict(given)
    items = list(given) if isinstance(given, (tuple, list)) else [given]
    names = _user_inputs(model)
    if len(items) > len(names):
        raise FactoryError(f"{reference}: {len(items)} example inputs for a model with "
                           f"{len(names)} inputs ({', '.join(names)}); pass one per input")
    return dict(zip(names, items))


def _tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Every tensor stored in ``graph``: initializers and attributes, subgraphs included."""
    found = list(graph.initializer)
    found += [t for s in graph.sparse_initializer for t in (s.values, s.indices)]
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                found.append(attr.t)
            found.extend(attr.tensors)
            for sub in [attr.g] * attr.HasField("g") + list(attr.graphs):
                found.extend(_tensors(sub))
    return found


def _load_external_data(model: onnx.ModelProto, folder: Path, reference: str) -> None:
    """Read external tensor data, only from files inside ``folder`` (hostile paths refused)."""
    root = folder.resolve()
    for tensor in _tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        target = _confined(root, info.get("location", ""), tensor.name, reference)
        offset, length = int(info.get("offset") or 0), info.get("length")
        size = target.stat().st_size
        end = size if length is None else offset + int(length)
        if offset < 0 or end > size:
            raise TraceError(f"{reference}: external data of tensor {tensor.name!r} reaches "
                             f"past the end of {target.name}; export the model again")
        with open(target, "rb") as handle:
            handle.seek(offset)
            tensor.raw_data = handle.read(end - offset)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _confined(root: Path, location: str, tensor: str, reference: str) -> Path:
    posix, windows = PurePosixPath(location), PureWindowsPath(location)
    escapes = (not location or posix.is_absolute() or windows.is_absolute()
               or bool(windows.drive) or ".." in posix.parts or ".." in windows.parts)
    try:
        target = (root / location).resolve()
    except (OSError, ValueError):  # a loop of links, a NUL byte
        escapes = True
    if escapes or not target.is_relative_to(root):
        raise TraceError(
            f"{reference}: tensor {tensor!r} keeps its data in {location!r}, outside the "
            "model's folder; specgraph reads external data only from files next to the model "
            "(relative paths without '..' or links leading out)")
    if not target.is_file():
        raise TraceError(f"{reference}: external data file {location!r} of tensor {tensor!r} "
                         "does not exist next to the model; copy it there")
    return target


# --- example inputs and onnxruntime ------------------------------------------------------
def _user_inputs(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def make_inputs(model: onnx.ModelProto, given: Mapping[str, Any] | None = None, *,
                   reference: str = "<model>", seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for ``model``: ``given`` ones by name, seeded random ones for the rest.

    Symbolic or unknown dimensions (``batch``, ``sequence``) become 1. Floating inputs are
    standard normal; booleans and integer inputs whose name contains ``mask`` are all ones;
    an integer input that indexes an initializer table (``Gather``, e.g. token ids) lies in
    ``[0, rows)`` of the smallest such table; other integers lie in ``[0, 8)``.
    """
    given = dict(given or {})
    rng = np.random.default_rng(seed)
    graph = model.graph
    out: dict[str, np.ndarray] = {}
    by_name = {i.name: i for i in graph.input}
    for name in _user_inputs(model):
        dtype, dims = _input_type(by_name[name], reference)
        if name in given:
            out[name] = np.asarray(given.pop(name)).astype(_NUMPY[dtype], copy=False)
        elif dtype.startswith("float"):
            out[name] = rng.standard_normal(dims).astype(_NUMPY[dtype])
        elif dtype == "bool" or "mask" in name.lower():
            out[name] = np.ones(dims, dtype=_NUMPY[dtype])
        else:
            high = _table_rows(graph, name) or 8
            out[name] = rng.integers(0, high, size=dims).astype(_NUMPY[dtype])
    if given:
        raise FactoryError(f"{reference}: the model has no input {sorted(given)[0]!r}; its "
                           f"inputs are {', '.join(_user_inputs(model)) or 'none'}")
    return out


def _input_type(info: onnx.ValueInfoProto, reference: str) -> tuple[str, list[int]]:
    tensor = info.type.tensor_type
    if not info.type.HasField("tensor_type") or tensor.elem_type not in _DTYPES:
        raise TraceError(f"{reference}: input {info.name!r} is not a tensor of a supported "
                         "dtype; specgraph traces models whose inputs are numeric tensors")
    dtype = _DTYPES[tensor.elem_type]
    if dtype == "bfloat16":
        raise TraceError(f"{reference}: input {info.name!r} is bfloat16, which NumPy cannot "
                         "feed to onnxruntime; export the model with float32 inputs")
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
            for d in tensor.shape.dim]
    return dtype, dims


def _table_rows(graph: onnx.GraphProto, name: str) -> int | None:
    tables = {t.name: t.dims[0] for t in graph.initializer if len(t.dims) >= 1}
    rows = [tables[n.input[0]] for n in graph.node if n.op_type == "Gather"
            and len(n.input) > 1 and n.input[1] == name and n.input[0] in tables]
    return min(rows) if rows else None


def _session(model: onnx.ModelProto, optimize: bool, reference: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = _ORT_QUIET
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as err:
        raise TraceError(f"{reference}: onnxruntime cannot load the model: "
                         f"{_first_line(err)}; check it with onnx.checker.check_model") from err


def _run(session: ort.InferenceSession, inputs: dict[str, np.ndarray], reference: str
         ) -> dict[str, Any]:
    try:
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, inputs)))
    except Exception as err:
        raise TraceError(f"{reference}: onnxruntime failed to run the model on its example "
                         f"inputs: {_first_line(err)}; pass inputs that fit the model") from err


def _probe(model: onnx.ModelProto, inputs: dict[str, np.ndarray], reference: str
           ) -> dict[str, Any]:
    """Every value the top-level graph computes, from one unoptimized onnxruntime run."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in known:
                probe.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    return _run(_session(probe, False, reference), inputs, reference)


def _trace(model: onnx.ModelProto, given: dict[str, Any], reference: str) -> TracedModel:
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    inputs = make_inputs(model, given, reference=reference)
    outputs = _run(_session(model, True, reference), inputs, reference)
    values = _probe(model, inputs, reference)
    from specgraph.frontends.onnx import shape_ops  # noqa: F401  (fills the table)
    from specgraph.frontends.onnx.ops import CONVERTERS

    converter = _Converter(model, values, reference, CONVERTERS)
    graph, weights = converter.convert(inputs)
    outs = {name: np.asarray(outputs[name]) for name in graph.output_names}
    return TracedModel(graph, weights, inputs, outs, FRAMEWORK, reference, native=model)


# --- scope and source --------------------------------------------------------------------
def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return " ".join(text[0].split()).rstrip(".:") if text else type(err).__name__


def _scope(node: onnx.NodeProto, meta: dict[str, str]) -> str:
    """The module path: the exporter's name scopes, else a TorchScript-style node name."""
    scopes = meta.get("pkg.torch.onnx.name_scopes")
    if scopes:
        try:
            names = ast.literal_eval(scopes)
        except (ValueError, SyntaxError):
            names = []
        if isinstance(names, list) and len(names) >= 2:
            return str(names[-2])
    if node.name.startswith("/"):
        return ".".join(p for p in node.name.split("/")[1:-1] if p)
    return ""


def _source(meta: dict[str, str]) -> str:
    frames = _FRAME.findall(meta.get("pkg.torch.onnx.stack_trace", ""))
    for file, line in reversed(frames):
        if not _FRAMEWORK_FILE.search(file):
            return f"{display_path(file)}:{line}"
    return ""


def f32(value: float) -> float:
    """A float32 attribute as the shortest decimal that rounds to it (1e-05, not 9.99e-06)."""
    return float(str(np.float32(value)))


def attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values (strings decoded, tensors as arrays)."""
    out: dict[str, Any] = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif attr.type == onnx.AttributeProto.FLOAT:
            value = f32(value)
        elif attr.type == onnx.AttributeProto.FLOATS:
            value = [f32(v) for v in value]
        out[attr.name] = value
    return out


# --- the walk ----------------------------------------------------------------------------
class _Converter:
    """Walks the ONNX graph in order and builds the IR, one converter call per node."""

    def __init__(self, model: onnx.ModelProto, values: dict[str, Any], reference: str,
                 converters: dict[str, Any]) -> None:
        self.model = model
        self.values = values
        self.reference = reference
        self.converters = converters
        self.opset = next((o.version for o in model.opset_import
                           if o.domain in ("", "ai.onnx")), 1)
        self.b = GraphBuilder(reference)
        self.env: dict[str, Value] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.sequences: dict[str, list[Value]] = {}  # ONNX sequence values, item by item
        self.inits: dict[str, np.ndarray] = {}
        self.init_dtypes: dict[str, str] = {}
        self.layouts: dict[str, str] = {}
        self.param_values: dict[str, Value] = {}
        self.relayouts: dict[tuple[str, str], Value] = {}
        self.node = onnx.NodeProto()
        self.attrs: dict[str, Any] = {}
        self._where: dict[str, str] = {}
        self._sort_initializers()

    def _sort_initializers(self) -> None:
        weight_slots = {n.input[i] for n in self.model.graph.node
                        for i in _WEIGHT_SLOTS.get(n.op_type, ()) if i < len(n.input)}
        for tensor in self.model.graph.initializer:
            array = numpy_helper.to_array(tensor)
            dtype = _DTYPES.get(tensor.data_type, "")
            if dtype == "bfloat16":
                array = array.astype(np.float32)
            generated = bool(_GENERATED_NAME.match(tensor.name))
            if dtype.startswith(("float", "bfloat")) and (
                    tensor.name in weight_slots or array.size > 1 and not generated):
                self.inits[tensor.name] = array
                self.init_dtypes[tensor.name] = dtype
            else:
                self.consts[tensor.name] = array

    def convert(self, inputs: dict[str, np.ndarray]):
        graph = self.model.graph
        for name, array in inputs.items():
            info = next(i for i in graph.input if i.name == name)
            dtype = _DTYPES[info.type.tensor_type.elem_type]
            self.env[name] = self.b.input(name, array.shape, dtype)
        for node in graph.node:
            self.visit(node)
        for out in graph.output:
            self.b.output(out.name, self.value(out.name))
        built = prune(self.b.build())
        weights = {k: v for k, v in self.weights().items() if k in built.params}
        return built, weights

    def visit(self, node: onnx.NodeProto) -> None:
        self.node = node
        self.attrs = attributes(node)
        meta = {p.key: p.value for p in node.metadata_props}
        origin = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        self._where = {"scope": _scope(node, meta), "source": _source(meta), "origin": origin}
        if self.fold(node) and node.op_type not in _KEEP_VISIBLE:
            return
        converter = self.converters.get(origin)
        try:
            result = self.opaque() if converter is None else converter(self, node)
        except Dynamic:
            result = self.opaque()
        results = result if isinstance(result, (tuple, list)) else (result,)
        for name, value in zip(node.output, results):
            if name and value is not None:
                self.env[name] = value

    def fold(self, node: onnx.NodeProto) -> bool:
        """Take the node's outputs as constants if it reads only constants (or shapes)."""
        if node.op_type in _NEVER_FOLD or node.domain not in ("", "ai.onnx"):
            return False
        data = _SHAPE_ONLY.get(node.op_type, range(len(node.input)))
        if not all(node.input[i] in self.consts for i in data if node.input[i]):
            return False
        outs = [name for name in node.output if name]
        if not all(isinstance(self.values.get(name), np.ndarray) for name in outs):
            return False
        for name in outs:
            self.consts[name] = self.values[name]
        return True

    # --- helpers for converters ----------------------------------------------------------
    def at(self) -> str:
        where = self._where
        return f"{self.reference}: {where['origin']} at {where['scope'] or '<model>'}: "

    def where(self) -> dict[str, str]:
        """``scope``, ``source`` and ``origin`` of the current node, for ``GraphBuilder``."""
        return dict(self._where)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, index: int) -> str:
        """The name of input ``index``, or "" where it is absent (optional inputs)."""
        return self.node.input[index] if index < len(self.node.input) else ""

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        """Shape and dtype of a value by ONNX name (from the probe run or the IR)."""
        if name in self.env:
            return self.env[name].shape, self.env[name].dtype
        array = self.values.get(name, self.consts.get(name, self.inits.get(name)))
        if not isinstance(array, np.ndarray):
            raise TraceError(f"{self.at()}value {name!r} is not a tensor onnxruntime computed; "
                             "specgraph traces tensor values only")
        dtype = self.init_dtypes.get(name) or _NUMPY_NAMES.get(array.dtype)
        if dtype is None:
            raise TraceError(f"{self.at()}value {name!r} has dtype {array.dtype}, which "
                             "specgraph does not support")
        return tuple(int(s) for s in array.shape), dtype

    def shape(self, name: str) -> tuple[int, ...]:
        return self.meta(name)[0]

    def out(self, index: int = 0) -> tuple[tuple[int, ...], str]:
        return self.meta(self.node.output[index])

    def is_param(self, name: str) -> bool:
        return name in self.inits

    def const(self, name: str) -> np.ndarray | None:
        """The constant value of input ``name`` ("" gives None); raises Dynamic otherwise."""
        if not name:
            return None
        if name in self.consts:
            return self.consts[name]
        if name in self.inits:
            return self.inits[name]
        raise Dynamic(name)

    def value(self, name: str) -> Value:
        """The IR value of an ONNX value (initializers as parameters in native layout)."""
        if name in self.env:
            return self.env[name]
        if name in self.inits:
            return self.param(name, "native")
        if name in self.consts:
            array = self.consts[name]
            self.env[name] = self.b.constant(array, self.meta(name)[1])
            return self.env[name]
        if name in self.sequences:
            raise TraceError(f"{self.at()}input {name!r} is a tensor sequence, which only "
                             "SequenceAt reads in specgraph; export the model without sequences")
        raise TraceError(f"{self.at()}input {name!r} is used before it is computed; sort the "
                         "model's nodes topologically (onnx.utils or the exporter)")

    def param(self, name: str, layout: str) -> Value:
        """Initializer ``name`` as a parameter in ``layout`` (``native`` or ``linear``: the
        last two axes swapped, e.g. a Gemm ``transB`` weight [out, in] stored [in, out])."""
        if name not in self.param_values:
            shape, dtype = self.meta(name)
            self.layouts[name] = layout
            self.param_values[name] = self.b.param(name, _layout_shape(shape, layout), dtype)
        return self.relayout(self.param_values[name], self.layouts[name], layout, name)

    def relayout(self, value: Value, have: str, want: str, key: str) -> Value:
        if have == want:
            return value
        if (key, want) not in self.relayouts:
            perm = tuple(range(value.rank - 2)) + (value.rank - 1, value.rank - 2)
            self.relayouts[(key, want)] = self.b.add(
                "transpose", [value], {"perm": perm}, dtype=value.dtype,
                shape=_layout_shape(value.shape, "linear"), **self._where)
        return self.relayouts[(key, want)]

    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, *,
             out: tuple[Sequence[int], str] | None = None) -> Value:
        """Add one IR node for the current ONNX node (shape of its first output unless given)."""
        shape, dtype = out if out is not None else self.out(0)
        return self.b.add(op, list(inputs), attrs, shape=shape, dtype=dtype, **self._where)

    def emit_multi(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any]) -> tuple:
        metas = [self.meta(name) for name in self.node.output if name]
        return self.b.add_multi(op, list(inputs), attrs, outputs=metas, **self._where)

    def constant(self, data: Any, dtype: str) -> Value:
        """A new IR constant (e.g. an ONNX attribute turned into an operand)."""
        array = np.asarray(data, dtype=_NUMPY.get(dtype, np.float32))
        return self.b.constant(array, dtype)

    def opaque(self) -> Any:
        """The current node as an ``opaque`` node that keeps its op type."""
        inputs = [self.value(name) for name in self.node.input if name]
        names = [name for name in self.node.output if name]
        outs = self.b.add_multi(OPAQUE, inputs, {"target": self._where["origin"]},
                                outputs=[self.meta(n) for n in names], **self._where)
        it = iter(outs)
        return tuple(next(it) if name else None for name in self.node.output)

    def opaque_output(self, index: int) -> Value | None:
        """An extra output no canonical op computes (pooling indices, norm statistics)."""
        name = self.node.output[index] if index < len(self.node.output) else ""
        if not name:
            return None
        shape, dtype = self.meta(name)
        target = f"{self._where['origin']}[{index}]"
        return self.b.add(OPAQUE, [self.value(self.node.input[0])], {"target": target},
                          shape=shape, dtype=dtype, **self._where)

    def weights(self) -> dict[str, np.ndarray]:
        out = {}
        for name, layout in self.layouts.items():
            array = self.inits[name]
            out[name] = np.swapaxes(array, -1, -2).copy() if layout == "linear" else array
        return out


def _layout_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    if layout == "linear":
        return shape[:-2] + (shape[-1], shape[-2])
    return shape
