"""The pytest plugin: ``*.spec.yaml`` files that list implementations are collected, one test
each, passing when the implementation is as listed; a malformed spec fails its collection
with the ``file:line:col`` sentence."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODELS = '''
import torch
from torch import nn


def _make(act):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), act(), nn.Linear(16, 4)), (torch.randn(3, 8),)


def relu():
    return _make(nn.ReLU)


def gelu():
    return _make(nn.GELU)
'''

SPEC = '''
inputs: {x: "B 8"}
dims: {B: 2}
layers:
  - {name: fc1, linear: x, out: 16, activation: relu}
  - {name: fc2, linear: fc1, out: 4}
implementations:
  - models.py:relu
  - {model: models.py:gelu, expect: differs, codes: [op-mismatch], says: "computes gelu"}
  - models.py:gelu
'''


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # the plugin loaded by name alone: an installed copy's entry point would load it twice
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "specgraph.pytest_plugin",
                           "-p", "no:cacheprovider", "-q", "-rf", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)


def test_spec_files_become_one_test_per_implementation(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    (tmp_path / "mlp.spec.yaml").write_text(textwrap.dedent(SPEC), encoding="utf-8")
    (tmp_path / "bad.spec.yaml").write_text("inputs: {x: \"8\"}\nlayers:\n  - {name: a, "
                                            "relu: y}\n", encoding="utf-8")
    run = _pytest(tmp_path, "--continue-on-collection-errors")
    out = run.stdout
    assert run.returncode == 1, out
    assert "1 failed, 2 passed, 1 error" in out
    assert "models.py:gelu is listed as it satisfies mlp.spec.yaml, but:" in out
    assert "[op-mismatch] the implementation computes gelu where the spec computes relu" in out
    assert "spec: mlp.spec.yaml:5:37" in out
    assert re.search(r"bad\.spec\.yaml:3:\d+: y is not defined before this statement", out)
    assert "Traceback" not in out


ACCEPTING = '''
inputs: {x: "B 8"}
dims: {B: 2}
layers:
  - {name: fc1, linear: x, out: 16, activation: relu}
  - {name: fc2, linear: fc1, out: 4}
implementations:
  - {model: models.py:gelu, accept: ["op-mismatch:fc1"]}
  - {model: models.py:gelu, accept: ["op-mismatch:fc2"]}
'''


def test_an_implementations_accept_lets_its_known_difference_pass(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(MODELS, encoding="utf-8")
    (tmp_path / "mlp.spec.yaml").write_text(textwrap.dedent(ACCEPTING), encoding="utf-8")
    run = _pytest(tmp_path, "-rP", "--junitxml", str(tmp_path / "out.xml"))
    out = run.stdout
    assert run.returncode == 1, out
    assert "1 failed, 1 passed" in out
    # the passing test names what it accepted, and by which rule at which line
    assert "Captured accepted call" in out
    assert "accepted by op-mismatch:fc1 (mlp.spec.yaml:8:38)" in out
    assert "[op-mismatch] the implementation computes gelu where the spec computes relu" in out
    xml = (tmp_path / "out.xml").read_text(encoding="utf-8")
    assert '<property name="accepted" value="[op-mismatch] the implementation computes' in xml
