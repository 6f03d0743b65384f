"""A quiet terminal: frameworks' start-up lines and libraries' deprecation warnings kept
off it, everything else (real errors) passed on."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from specgraph.terminal import NOISE, quiet_frameworks

ROOT = Path(__file__).resolve().parent.parent

STARTUP = [  # as TensorFlow 2.21 writes them on a machine without a GPU
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795455293.908191   20045 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors",
    "I0000 00:00:1795455293.909415   20045 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "I0000 00:00:1795455294.245692   20045 cpu_feature_guard.cc:227] This TensorFlow binary "
    "is optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
    "E0000 00:00:1795455298.336231   20045 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "W1023 14:03:22.123456 12345 some_op.cc:12] a C++ warning",
    "TensorFlow and JAX classes are deprecated and will be removed in Transformers v5. We "
    "recommend migrating to PyTorch classes or pinning your version of Transformers.",
]
REAL = [
    "E0000 00:00:1795455298.336231   20045 kernel.cc:52] INVALID_ARGUMENT: shapes differ",
    "Traceback (most recent call last):",
    "RuntimeError: weights file missing",
    "specgraph: error: model reference 'm.py:f': the factory raised OSError",
    "UserWarning: the model's own warning",
]


@pytest.mark.parametrize("line", STARTUP)
def test_startup_lines_are_noise(line: str) -> None:
    assert NOISE.match(line.encode())


@pytest.mark.parametrize("line", REAL)
def test_real_lines_are_not_noise(line: str) -> None:
    assert not NOISE.match(line.encode())


@pytest.mark.skipif(os.name != "posix", reason="the descriptor filter is POSIX only")
def test_the_filter_drops_noise_and_passes_the_rest_in_order(capfd) -> None:
    with quiet_frameworks():
        for line in [STARTUP[0], REAL[0], STARTUP[1], REAL[1]]:
            os.write(2, line.encode() + b"\n")
        os.write(2, b"a prompt without newline")
    _, err = capfd.readouterr()
    assert err == f"{REAL[0]}\n{REAL[1]}\na prompt without newline"


def test_deprecation_and_future_warnings_are_quiet_others_are_not() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_frameworks():
            warnings.warn("old", DeprecationWarning, stacklevel=1)
            warnings.warn("soon", FutureWarning, stacklevel=1)
            warnings.warn("look", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["look"]


KERAS = '''
import sys
import numpy as np
import keras


def make():
    print("the factory speaks", file=sys.stderr)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu")])
    return model, (np.ones((2, 3), np.float32),)
'''


def test_show_on_a_keras_model_keeps_tensorflows_startup_off_stderr(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    path = tmp_path / "keras_model.py"
    path.write_text(KERAS)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "specgraph", "show", f"{path}:make"],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "relu" in proc.stdout
    for said in ("oneDNN custom operations", "Could not find cuda drivers",
                 "cpu_feature_guard", "absl::InitializeLog", "cuInit", "deprecated",
                 "Warning"):
        assert said not in proc.stderr, proc.stderr
    assert proc.stderr == "the factory speaks\n"  # the user's own line still shows


def test_control_characters_in_names_do_not_reach_the_terminal() -> None:
    from specgraph.terminal import strip_controls

    hostile = "fc\x1b]0;title\x07\r\x1b[2Jok\x00\x9b\u2028"
    assert strip_controls(hostile) == "fc?]0;title???[2Jok???"
    assert strip_controls("a\tb\nc") == "a\tb\nc"
    assert strip_controls("\x1b[1mbold\x1b[0m", color=True) == "\x1b[1mbold\x1b[0m"
    assert strip_controls("\x1b[1mbold\x1b[0m") == "?bold?"


def test_the_text_report_strips_control_characters_from_names(capsys, tmp_path) -> None:
    import pytest

    pytest.importorskip("torch")
    from specgraph.cli import main

    model = tmp_path / "names.py"
    model.write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.add_module('fc\\x1b]0;pwned\\x07\\rX', torch.nn.Linear(2, 3))\n"
        "    def forward(self, x):\n"
        "        return torch.relu(getattr(self, 'fc\\x1b]0;pwned\\x07\\rX')(x))\n"
        "def f():\n"
        "    return Net(), (torch.ones(4, 2),)\n")
    assert main(["show", f"{model}:f"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "fc?]0;pwned??X" in out


def test_the_last_print_before_the_filter_stops_is_not_lost(monkeypatch) -> None:
    """The stderr filter's reader waited, found nothing, and then saw that it was told to
    stop: a print written and flushed in between (the user's last words before an error,
    on a busy machine) was dropped. It stops only after a wait begun once it was told."""
    import select
    import threading

    from specgraph import terminal

    read, write = os.pipe()
    out_read, out_write = os.pipe()
    stop = threading.Event()
    real, calls = select.select, []

    def late(*args):
        calls.append(1)
        if len(calls) == 1:  # the wait times out; meanwhile the last print, then stop
            os.write(write, b"module prints\n")
            os.close(write)
            stop.set()
            return [], [], []
        return real(*args)

    monkeypatch.setattr(terminal.select, "select", late)
    terminal._pump(read, out_write, stop)
    os.close(out_write)
    assert os.read(out_read, 100) == b"module prints\n"
    os.close(read)
    os.close(out_read)
