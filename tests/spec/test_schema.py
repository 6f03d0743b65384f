"""The JSON Schema of the spec language: shipped as built, a valid schema, printed by
``specgraph schema``, accepting every example and rejecting malformed specs."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from specgraph.cli import main
from specgraph.spec import schema

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "specgraph" / "spec" / schema.FILE
EXAMPLES = sorted((ROOT / "examples" / "specs").glob("*.yaml"))


def test_the_shipped_schema_is_the_built_one(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--update-goldens"):
        SHIPPED.write_text(schema.text(), encoding="utf-8")
    assert SHIPPED.read_text(encoding="utf-8") == schema.text(), \
        "spec.schema.json is stale: run pytest --update-goldens and review the diff"


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(schema.shipped())


def test_specgraph_schema_prints_it(capsys) -> None:
    assert main(["schema"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out) == schema.shipped()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_accepted_and_carries_the_modeline(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# yaml-language-server: $schema=../../specgraph/spec/"
                           "spec.schema.json\n")
    modeline = (path.parent / text.split("$schema=")[1].split("\n")[0]).resolve()
    assert modeline == SHIPPED
    jsonschema.Draft202012Validator(schema.shipped()).validate(yaml.safe_load(text))


MALFORMED = {
    "no layers": "inputs: {x: B}\n",
    "a number for layers": "inputs: {x: B}\nlayers: 3\n",
    "a statement without a name": "inputs: {x: '2'}\nlayers:\n  - {relu: x}\n",
    "a size that is text": "dims: {B: two}\ninputs: {x: B}\nlayers:\n  - {name: a, relu: x}\n",
    "a size of zero": "dims: {B: 0}\ninputs: {x: B}\nlayers:\n  - {name: a, relu: x}\n",
    "an unknown top-level key": "input: {x: '2'}\ninputs: {x: '2'}\nlayers:\n"
                                "  - {name: a, relu: x}\n",
    "an unknown op": "inputs: {x: '2'}\nlayers:\n  - {name: a, rleu: x}\n",
    "an attribute of another op": "inputs: {x: '2'}\nlayers:\n  - {name: a, relu: x, eps: 1}\n",
    "a choice that does not exist": "inputs: {x: '2'}\nlayers:\n"
                                    "  - {name: a, gelu: x, approximate: sigmoid}\n",
    "an activation that does not exist": "inputs: {x: '2'}\nlayers:\n"
                                         "  - {name: a, linear: x, out: 2, activation: nope}\n",
    "a boolean as a repeat count": "inputs: {x: '2'}\nlayers:\n  - name: a\n    repeat: true\n"
                                   "    layers: [{name: b, relu: x}]\n",
    "a block key on a statement": "inputs: {x: '2'}\nlayers:\n  - {name: a, relu: x, in: x}\n",
    "an op key on a block": "inputs: {x: '2'}\nlayers:\n"
                            "  - {name: a, relu: x, layers: [{name: b, relu: x}]}\n",
    "a dtype that does not exist": "inputs: {x: {shape: '2', dtype: float8}}\nlayers:\n"
                                   "  - {name: a, relu: x}\n",
    "a negative tolerance": "inputs: {x: '2'}\ntolerance: -1\nlayers:\n  - {name: a, relu: x}\n",
    "a name that is not one": "inputs: {'x y': '2'}\nlayers:\n  - {name: a, relu: x}\n",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_the_schema_rejects_malformed_specs(case: str) -> None:
    validator = jsonschema.Draft202012Validator(schema.shipped())
    assert list(validator.iter_errors(yaml.safe_load(MALFORMED[case])))


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_the_loader_says_where_the_schema_fails(case: str) -> None:
    from specgraph.errors import SpecError
    from specgraph.spec import loads

    with pytest.raises(SpecError, match=r"^m\.yaml:\d+:\d+: \S"):
        loads(MALFORMED[case], name="m.yaml")
