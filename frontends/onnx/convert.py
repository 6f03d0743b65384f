"""The walk over an ONNX graph for the ONNX frontend: converter state and its helpers.

Each value maps to an IR ``Value``, to a constant (an initializer that is no weight, or a
value the probe run computed from constants only: shape arithmetic, folded here), or to
an initializer read as a parameter in the layout its consumer asks for.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from specgraph.errors import TraceError
from specgraph.frontends._common.converter import NATIVE, BaseConverter, no_steps, swap_last_two
from specgraph.frontends._common.sources import display_path
from specgraph.ir import Graph, Value, prune

__all__ = ["Converter", "Dynamic", "ELEM_TYPES", "NUMPY_TYPES", "attributes", "f32"]

ELEM_TYPES = {  # ONNX element type -> IR dtype
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT16: "int16", onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.BOOL: "bool",
}
NUMPY_TYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
               "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8,
               "uint8": np.uint8, "bool": np.bool_}
_NUMPY_NAMES = {np.dtype(v): k for k, v in NUMPY_TYPES.items()}
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


class Dynamic(Exception):
    """A converter needed a constant (axes, pads, ...) that the model computes at run time."""


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


_SIGNATURE = re.compile(r"^(\w+): (\w+) target='([^']*)'(?: persistent=(\w+))?", re.M)
_SIGNATURE_KEY = "pkg.torch.export.ExportedProgram.graph_signature"
_FOLDED_KEY = "pkg.onnxscript.optimizer.folded_from"


def _exported_weights(model: onnx.ModelProto) -> dict[str, bool]:
    """Which initializers hold weights, as far as ``torch.onnx.export`` says.

    The exporter records torch.export's graph signature (parameters, buffers and constant
    tensors, each buffer persistent or not) and, for a tensor its optimizer folded, the
    names of every value it was computed from. A weight is a parameter or a persistent
    buffer (as the torch frontend takes them), or a tensor folded from one (a transposed
    kernel); a tensor folded from nothing trainable (rotary tables computed from
    ``arange``), a non-persistent buffer or a lifted constant is a constant. Initializers
    the metadata says nothing about are absent from the answer.
    """
    graph = model.graph
    text = next((p.value for p in graph.metadata_props if p.key == _SIGNATURE_KEY), None)
    if text is None:
        return {}
    weights: set[str] = set()
    known: set[str] = set()
    for placeholder, kind, target, persistent in _SIGNATURE.findall(text):
        known |= {placeholder, target}
        if kind == "PARAMETER" or kind == "BUFFER" and persistent != "False":
            weights |= {placeholder, target}
    answer = {name: name in weights for name in known}
    for info in (*graph.value_info, *graph.input, *graph.initializer):
        folded = next((p.value for p in info.metadata_props if p.key == _FOLDED_KEY), None)
        if folded is None or info.name in known:
            continue
        try:
            sources = ast.literal_eval(folded)
        except (ValueError, SyntaxError):
            continue
        if isinstance(sources, (list, tuple, set)):
            answer[info.name] = any(str(s) in weights for s in sources)
    return answer


# --- the walk ----------------------------------------------------------------------------
class Converter(BaseConverter):
    """Walks the ONNX graph in order and builds the IR, one converter call per node.

    Initializers that hold weights become parameters keyed by name, stored ``native`` or
    ``linear`` (the last two axes swapped: a Gemm ``transB`` weight [out, in] stored
    [in, out]).
    """

    LAYOUTS = {NATIVE: no_steps, "linear": swap_last_two}

    def __init__(self, model: onnx.ModelProto, values: dict[str, Any], reference: str,
                 converters: dict[str, Any]) -> None:
        super().__init__(reference)
        self.model = model
        self.values = values
        self.converters = converters
        self.opset = next((o.version for o in model.opset_import
                           if o.domain in ("", "ai.onnx")), 1)
        self.env: dict[str, Value] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.sequences: dict[str, list[Value]] = {}  # ONNX sequence values, item by item
        self.inits: dict[str, np.ndarray] = {}
        self.init_dtypes: dict[str, str] = {}
        self.node = onnx.NodeProto()
        self.attrs: dict[str, Any] = {}
        self._sort_initializers()

    def _sort_initializers(self) -> None:
        weight_slots = {n.input[i] for n in self.model.graph.node
                        for i in _WEIGHT_SLOTS.get(n.op_type, ()) if i < len(n.input)}
        exported = _exported_weights(self.model)
        for tensor in self.model.graph.initializer:
            array = numpy_helper.to_array(tensor)
            dtype = ELEM_TYPES.get(tensor.data_type, "")
            if dtype == "bfloat16":
                array = array.astype(np.float32)
            weight = exported.get(tensor.name)
            if weight is None:  # no word from the exporter: guess by its name and size
                weight = array.size > 1 and not _GENERATED_NAME.match(tensor.name)
            if dtype.startswith(("float", "bfloat")) and (tensor.name in weight_slots
                                                          or weight):
                self.inits[tensor.name] = array
                self.init_dtypes[tensor.name] = dtype
            else:
                self.consts[tensor.name] = array

    def convert(self, inputs: dict[str, np.ndarray]) -> tuple[Graph, dict[str, np.ndarray]]:
        graph = self.model.graph
        for name, array in inputs.items():
            info = next(i for i in graph.input if i.name == name)
            dtype = ELEM_TYPES[info.type.tensor_type.elem_type]
            self.env[name] = self.b.input(name, array.shape, dtype)
        for node in graph.node:
            self.visit(node)
        for out in graph.output:
            self.b.output(out.name, self.value(out.name))
        built = prune(self.b.build())
        return built, self.weights(built)

    def visit(self, node: onnx.NodeProto) -> None:
        self.node, self._where = node, None
        self.attrs = attributes(node)
        if self.fold(node) and node.op_type not in _KEEP_VISIBLE:
            return
        converter = self.converters.get(self.where()["origin"])
        try:
            result = self.opaque() if converter is None else converter(self, node)
        except Dynamic:
            result = self.opaque()
        results = result if isinstance(result, (tuple, list)) else (result,)
        for name, value in zip(node.output, results):
            if name and value is not None:
                self.env[name] = value
                known = self.values.get(name)
                if isinstance(value, Value) and isinstance(known, np.ndarray) and \
                        tuple(known.shape) == value.shape:
                    self.b.native(value, name)  # the model's own value of that name

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

    # --- the current node and the parameters, for the shared converter base ------------
    def locate(self) -> dict[str, str]:
        node = self.node
        meta = {p.key: p.value for p in node.metadata_props}
        origin = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        return {"scope": _scope(node, meta), "source": _source(meta), "origin": origin}

    def out(self, index: int = 0) -> tuple[tuple[int, ...], str]:
        return self.meta(self.node.output[index])

    def outs(self) -> list[tuple[tuple[int, ...], str]]:
        return [self.meta(name) for name in self.node.output if name]

    def param_spec(self, key: str) -> tuple[str, tuple[int, ...], str]:
        return (key, *self.meta(key))

    def native_array(self, key: str) -> np.ndarray:
        return self.inits[key]

    # --- helpers for converters ----------------------------------------------------------
    def at(self) -> str:
        where = self.where()
        return f"{self.reference}: {where['origin']} at {where['scope'] or '<model>'}: "

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
            return self.param(name, NATIVE)
        if name in self.consts:
            array = self.consts[name]
            self.env[name] = self.b.constant(array, self.meta(name)[1])
            return self.env[name]
        if name in self.sequences:
            raise TraceError(f"{self.at()}input {name!r} is a tensor sequence, which only "
                             "SequenceAt reads in specgraph; export the model without sequences")
        raise TraceError(f"{self.at()}input {name!r} is used before it is computed; sort the "
                         "model's nodes topologically (onnx.utils or the exporter)")

    def constant(self, data: Any, dtype: str) -> Value:
        """A new IR constant (e.g. an ONNX attribute turned into an operand)."""
        array = np.asarray(data, dtype=NUMPY_TYPES.get(dtype, np.float32))
        return self.b.constant(array, dtype)

    def opaque(self) -> tuple[Value | None, ...]:
        """The current node as an ``opaque`` node that keeps its op type."""
        inputs = [self.value(name) for name in self.node.input if name]
        it = iter(self.emit_opaque(inputs))
        return tuple(next(it) if name else None for name in self.node.output)

    def opaque_output(self, index: int) -> Value | None:
        """An extra output no canonical op computes (pooling indices, norm statistics)."""
        if index >= len(self.node.output) or not self.node.output[index]:
            return None
        return self.emit_opaque_output(self.value(self.node.input[0]), index)
