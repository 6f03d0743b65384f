"""The JSON Schema of the spec language: built from the op vocabulary, shipped as
``spec.schema.json`` (``specgraph schema`` prints it, editors complete from it), and checked
against every spec before its meaning is, each error mapped back to ``file:line:col``.

The shipped file is what ``build()`` returns, written out (``tests/spec/test_schema.py`` holds
them equal; ``pytest --update-goldens`` rewrites it).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from specgraph.spec.reader import Document, Path
from specgraph.spec.shapes import MAX_SIZE
from specgraph.spec.vocabulary import (ACTIVATIONS, BLOCK_FIELDS, SPEC_OPS, STATEMENT_FIELDS,
                                       attributes)

__all__ = ["build", "shipped", "text", "validate", "FILE"]

FILE = "spec.schema.json"
_UNSPECIFIED = "unspecified"
MAX_STATEMENTS = 4096

_IDENTIFIER = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 64}
_EXPRESSION = {"type": "string", "minLength": 1, "maxLength": 400,
               "description": "arithmetic over dims and hyper names: d_model / heads"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _any(*choices: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"anyOf": list(choices), **extra}


def _kind(kind: str, choices: tuple[str, ...], optional: bool) -> dict[str, Any]:
    """The schema of one attribute's value."""
    if kind == "int":
        out = _any({"type": "integer"}, _ref("expression"))
    elif kind == "float":
        out = _any({"type": "number"}, _ref("expression"))
    elif kind == "bool":
        out = _any({"type": "boolean"}, {"const": _UNSPECIFIED})
    elif kind == "str":
        out = {"enum": [*choices, _UNSPECIFIED]} if choices else {"type": "string"}
    elif kind == "ints":
        out = _ref("ints")
    elif kind == "sizes":
        out = {"type": "object", "propertyNames": _ref("identifier"),
               "additionalProperties": _ref("integer"), "maxProperties": 32}
    else:  # floats
        out = {"type": "array", "items": {"type": "number"}, "maxItems": 64}
    return _any(out, {"type": "null"}) if optional else out


def _op_clause(op: str) -> dict[str, Any]:
    attrs = attributes(op)
    keys = sorted({*STATEMENT_FIELDS, op, *attrs})
    return {"if": {"required": [op]},
            "then": {"properties": {k: _kind(*v) for k, v in attrs.items()},
                     "propertyNames": {"enum": keys}}}


def _statement_keys() -> dict[str, Any]:
    """Every key a statement or block may have (what each op allows: ``_op_clause``)."""
    all_attrs = sorted({a for op in SPEC_OPS for a in attributes(op)})
    return {
        "name": {"type": "string", "minLength": 1, "maxLength": 200,
                 "pattern": r"^[A-Za-z0-9_.{}+\-*/%() ]+$",
                 "description": "the statement's name: its scope and how later statements "
                                "refer to it; {i} is a repeat index"},
        "layers": {**_ref("layers"), "description": "a block: its statements, in order"},
        "repeat": {**_ref("integer"), "description": "the block runs this many times, each "
                   "iteration reading the previous one's output"},
        "index": {**_IDENTIFIER, "description": "the repeat index's name (default i)"},
        "in": {**_ref("reference"), "description": "the name each iteration reads: the outer "
               "value for the first, the previous iteration's output after"},
        "out": {**_ref("reference"), "description": "the statement whose value leaves the "
                "block (default: the last)"},
        "unspecified": {"type": "boolean", "description": "the paper leaves this part open: "
                        "it runs, but nothing in it is checked"},
        "params": {"type": "object", "propertyNames": _ref("identifier"),
                   "additionalProperties": _ref("shape"), "maxProperties": 8,
                   "description": "parameter shapes by role (weight, bias, ...)"},
        "activation": {"enum": [*ACTIVATIONS, _UNSPECIFIED],
                       "description": "an activation applied to the result"},
        "equation": {"type": "string", "minLength": 1, "maxLength": 400,
                     "description": "the paper's equation in sympy syntax"},
        "tolerance": _ref("tolerance"),
        "param_count": {**_ref("integer"), "description": "parameters the paper states"},
        **{op: {**_ref("inputs"), "description": f"the op {op}, and the names it reads"}
           for op in SPEC_OPS},
        **{a: {} for a in all_attrs if a not in SPEC_OPS},
    }


def build() -> dict[str, Any]:
    """The schema, as data."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "specgraph paper spec",
        "description": "A model as a paper states it: sizes, inputs and named statements "
                       "over specgraph's canonical ops. Only what is stated is checked.",
        "type": "object",
        "required": ["inputs", "layers"],
        "additionalProperties": False,
        "properties": {
            "version": {"const": 1},
            "paper": {"type": "object", "additionalProperties": False, "properties": {
                "title": {"type": "string"}, "url": {"type": "string"},
                "section": {"type": ["string", "number"]},
                "authors": {"type": "string"}}},
            "dims": {"type": "object", "propertyNames": _ref("identifier"),
                     "additionalProperties": _ref("size"), "maxProperties": 64,
                     "description": "named dimensions and the example sizes a run uses"},
            "hyper": {"type": "object", "propertyNames": _ref("identifier"),
                      "additionalProperties": _ref("number"),
                      "maxProperties": 256,
                      "description": "hyperparameters: numbers or expressions over earlier "
                                     "ones"},
            "inputs": {"type": "object", "propertyNames": _ref("identifier"),
                       "minProperties": 1, "maxProperties": 64,
                       "additionalProperties": _any(_ref("shape"), _ref("input"))},
            "layers": _ref("layers"),
            "outputs": _any({"type": "array", "items": _ref("reference"), "minItems": 1,
                             "maxItems": 64},
                            {"type": "object", "propertyNames": _ref("identifier"),
                             "additionalProperties": _ref("reference"), "minProperties": 1,
                             "maxProperties": 64}),
            "tolerance": _ref("tolerance"),
            "param_count": _ref("integer"),
            "implementations": {
                "type": "array", "maxItems": 64,
                "description": "the implementations this spec checks (file.py:factory or a "
                               ".onnx file, relative to the spec's folder), and whether each "
                               "satisfies it; the pytest plugin runs them",
                "items": _any({"type": "string", "minLength": 1},
                              {"type": "object", "required": ["model"],
                               "additionalProperties": False, "properties": {
                                   "model": {"type": "string", "minLength": 1},
                                   "expect": {"enum": ["satisfied", "differs"]},
                                   "codes": {"type": "array", "items": {"type": "string"}},
                                   "says": {"type": "string"},
                                   "accept": {
                                       "type": "array", "maxItems": 256,
                                       "description": "known differences its check "
                                       "accepts, as --accept takes them: CODE:WHERE, WHERE "
                                       "a statement's name or a scope of the model (shell "
                                       "wildcards)",
                                       "items": {"type": "string", "minLength": 1,
                                                 "maxLength": 400}}}})},
        },
        "$defs": _definitions(),
    }


def _definitions() -> dict[str, Any]:
    block = {"if": {"required": ["layers"]},
             "then": {"propertyNames": {"enum": list(BLOCK_FIELDS)}}}
    return {
        "identifier": _IDENTIFIER,
        "expression": _EXPRESSION,
        "size": {"type": "integer", "minimum": 1, "maximum": MAX_SIZE},
        "integer": _any({"type": "integer"}, _ref("expression")),
        "ints": _any({"type": "integer"}, {"type": "string", "maxLength": 400},
                     {"type": "array", "items": _ref("integer"), "maxItems": 32}),
        "shape": _any({"type": "string", "maxLength": 400},
                      {"type": "array", "items": _ref("integer"), "maxItems": 16},
                      {"type": "integer"},
                      description="sizes separated by spaces: \"B T d_model\""),
        "input": {"type": "object", "required": ["shape"], "additionalProperties": False,
                  "properties": {
                      "shape": _ref("shape"),
                      "dtype": {"enum": ["float32", "float64", "float16", "bfloat16",
                                         "int64", "int32", "bool"]},
                      "range": {"type": "array", "items": _ref("integer"),
                                "minItems": 2, "maxItems": 2,
                                "description": "[low, high) of an integer input"}}},
        "reference": {"type": "string", "minLength": 1, "maxLength": 200},
        "inputs": _any(_ref("reference"),
                       {"type": "array", "items": _ref("reference"), "maxItems": 64}),
        "number": _any({"type": "number"}, _ref("expression")),
        "bound": _any({"type": "number", "minimum": 0}, _ref("expression")),
        "tolerance": _any(_ref("bound"),
                          {"type": "object", "additionalProperties": False,
                           "minProperties": 1, "properties": {
                               "rtol": _ref("bound"), "atol": _ref("bound")}},
                          description="relative tolerance, or rtol and atol"),
        "layers": {"type": "array", "minItems": 1, "maxItems": MAX_STATEMENTS,
                   "items": _ref("statement")},
        "statement": {"type": "object", "required": ["name"],
                      "additionalProperties": False, "properties": _statement_keys(),
                      "allOf": [block, *(_op_clause(op) for op in SPEC_OPS)]},
    }


def text() -> str:
    """The schema as JSON text (what ``spec.schema.json`` holds)."""
    return json.dumps(build(), indent=1, sort_keys=False) + "\n"


@cache
def shipped() -> dict[str, Any]:
    """The schema shipped with the package."""
    return json.loads(resources.files("specgraph.spec").joinpath(FILE).read_text("utf-8"))


@cache
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(shipped())


def validate(doc: Document) -> None:
    """Check ``doc`` against the schema; raise the first error, by position in the file, as
    a SpecError at its ``file:line:col``."""
    errors = list(_validator().iter_errors(doc.data))
    if not errors:
        return
    leaves = [_leaf(e) for e in errors]
    first = min(leaves, key=lambda e: (_place(doc, e), len(e.absolute_path)))
    path, key, message = _explain(first, doc)
    raise doc.error(path, message, key=key)


def _leaf(error: Any) -> Any:
    """The error to report: inside an anyOf, the deepest error of the branches if it lies
    deeper than the anyOf itself (the branch that fits the value's type), else the anyOf."""
    while error.context:
        deepest = max(error.context, key=lambda e: len(e.absolute_path))
        if len(deepest.absolute_path) <= len(error.absolute_path):
            break
        error = deepest
    return error


def _place(doc: Document, error: Any) -> tuple[int, int]:
    path, key, _ = _explain(error, doc)
    return doc.where(path, key=key)


def _where(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def _describe(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, (int, float)):
        return f"{value!r} (a number)"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"{shown!r} (text)"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


_TYPES = {"integer": "a whole number", "number": "a number", "string": "text",
          "boolean": "true or false", "array": "a list", "object": "a mapping",
          "null": "empty"}


def _expected(schema: Any) -> str:
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _expected(shipped()["$defs"][schema["$ref"].rpartition("/")[2]])
        if "anyOf" in schema:
            words = [_expected(s) for s in schema["anyOf"]]
            return " or ".join(dict.fromkeys(w for w in words if w))
        if "enum" in schema:
            return "one of " + ", ".join(map(str, schema["enum"][:12])) + \
                (", ..." if len(schema["enum"]) > 12 else "")
        if "const" in schema:
            return repr(schema["const"])
        kind = schema.get("type")
        if isinstance(kind, list):
            return " or ".join(_TYPES.get(k, k) for k in kind)
        if kind == "string" and "description" in schema and "arithmetic" in \
                schema["description"]:
            return "an expression such as d_model / heads"
        return _TYPES.get(kind, "")
    return ""


def _explain(error: Any, doc: Document) -> tuple[Path, bool, str]:
    """(path, whether the position is the key's, one sentence) for a jsonschema error."""
    path: Path = tuple(error.absolute_path)
    where, value, kind = _where(path), error.instance, error.validator
    if "propertyNames" in error.schema_path:  # a key, checked as a value of its own
        return _key_error(value, _at(doc.data, path), path, where)
    if kind in ("type", "anyOf"):
        return path, False, (f"{where} is {_describe(value)}; write "
                             f"{_expected(error.schema)}")
    if kind == "required":
        missing = [k for k in error.validator_value if k not in value]
        return path, False, (f"{where} has no {missing[0]}; add {missing[0]}: "
                             + ("(a list of statements)" if missing[0] == "layers" else "..."))
    if kind == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        extra = next(k for k in value if k not in known)
        from specgraph.spec.expr import suggest

        if len(path) >= 2 and path[-2] == "layers":
            return (*path, extra), True, (
                f"{extra!r} is no op and no key of a statement{suggest(extra, SPEC_OPS)}; a "
                "statement names one op of specgraph's vocabulary (linear, conv, layer_norm, "
                "attention, ...: `specgraph schema` lists them) with the names it reads")
        return (*path, extra), True, (
            f"{extra!r} is not a key of {where}{suggest(extra, known)}; the keys here: "
            f"{', '.join(known[:20])}{', ...' if len(known) > 20 else ''}")
    if kind in ("enum", "const"):
        return path, False, f"{where} is {_describe(value)}; write {_expected(error.schema)}"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = "at least" if "inimum" in kind else "at most"
        return path, False, f"{where} is {value!r}; it must be {bound} {error.validator_value:,}"
    if kind in ("minItems", "maxItems", "minProperties", "maxProperties", "minLength",
                "maxLength"):
        return path, False, (f"{where} is {_describe(value)}; {kind} is "
                             f"{error.validator_value:,}: "
                             + ("give more" if kind.startswith("min") else "shorten it"))
    if kind == "pattern":
        return path, False, (f"{where} is {_describe(value)}; a name starts with a letter or _ "
                             "and holds letters, digits and _ (statement names also . and "
                             "{i})")
    return path, False, f"{where}: {error.message}; fix it against `specgraph schema`"


def _at(data: Any, path: Path) -> Any:
    for part in path:
        data = data[part]
    return data


def _key_error(bad: str, mapping: Any, path: Path, where: str) -> tuple[Path, bool, str]:
    from specgraph.spec.expr import suggest

    keys = list(mapping) if isinstance(mapping, dict) else []
    op = next((k for k in keys if k in SPEC_OPS), None)
    if path and path[-1] in ("dims", "hyper", "inputs", "params", "sizes", "outputs"):
        return (*path, bad), True, (f"{bad!r} in {where} is not a name; a name starts with a "
                                    "letter or _ and holds letters, digits and _")
    if "layers" in keys or op is None:
        return (*path, bad), True, (f"{bad!r} is not a key of a block{suggest(bad, BLOCK_FIELDS)}"
                                    f"; a block (a statement with layers:) takes "
                                    f"{', '.join(BLOCK_FIELDS)}, and names no op itself")
    allowed = [*attributes(op)]
    return (*path, bad), True, (
        f"{bad!r} is not an attribute of {op}{suggest(bad, allowed)}; {op} takes "
        f"{', '.join(allowed) or 'no attributes'} (and {', '.join(STATEMENT_FIELDS[1:])})")
