"""The CLI's contract on every exit path: 2 for the user's mistake, 3 for a specgraph bug,
130 when interrupted, one sentence on stderr, a traceback only with --debug, and with
``--format json`` one JSON document on stdout whatever happens, with nothing the user's
code prints ahead of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import specgraph.check
import specgraph.summary
from specgraph.cli import main

pytest.importorskip("torch")

XOR = "examples/xor/model_torch.py:correct"

MODELS = '''
import sys
import torch

print("importing the user's file")


class Chatty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 3)

    def forward(self, x):
        print("hello from forward")
        return torch.relu(self.fc(x))


def chatty():
    print("hello from the factory")
    torch.manual_seed(0)
    return Chatty(), (torch.ones(4, 2),)


def raises():
    raise RuntimeError("weights file missing")


def exits():
    sys.exit(3)
'''


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _error(out: str) -> dict:
    data = json.loads(out)
    assert set(data) == {"error"}
    return data["error"]


@pytest.mark.parametrize("command", ["show", "diff"])
def test_a_factory_that_raises_is_exit_2_and_a_json_error(capsys, models, command) -> None:
    args = [f"{models}:raises"] if command == "show" else [XOR, f"{models}:raises"]
    code, out, err = _run(capsys, command, *args, "--format", "json")
    assert code == 2
    error = _error(out)
    assert error["kind"] == "input" and error["exit_code"] == 2
    assert error["command"] == command
    assert "the factory raised RuntimeError: weights file missing" in error["message"]
    assert err == "importing the user's file\nspecgraph: error: " + error["message"] + "\n"
    code, out, err = _run(capsys, command, *args)
    assert (code, out) == (2, "") and "Traceback" not in err


@pytest.mark.parametrize("command", ["show", "diff"])
def test_what_the_users_code_prints_goes_to_stderr(repo_root, capsys, models, command) -> None:
    args = [f"{models}:chatty"] if command == "show" else [f"{models}:chatty"] * 2
    code, out, err = _run(capsys, command, *args, "--format", "json")
    assert code == 0
    json.loads(out)  # stdout is the report alone
    for said in ("importing the user's file", "hello from the factory", "hello from forward"):
        assert said not in out
        assert said in err


def test_native_writes_to_stdout_go_to_stderr_too(capfd, models, monkeypatch) -> None:
    import os

    def chatty_trace(*args, **kwargs):
        os.write(1, b"native code says hi\n")
        raise specgraph.errors.TraceError("stop here")

    import specgraph.loading

    monkeypatch.setattr(specgraph.loading, "trace", chatty_trace)
    code = main(["show", f"{models}:chatty", "--format", "json"])
    out, err = capfd.readouterr()
    assert code == 2 and _error(out)["message"] == "stop here"
    assert "native code says hi" in err


@pytest.mark.parametrize("command", ["show", "diff"])
def test_an_internal_error_is_exit_3_and_names_itself_a_bug(repo_root, capsys, monkeypatch,
                                                            command) -> None:
    def broken(*args, **kwargs):
        raise IndexError("tuple index out of range")

    monkeypatch.setattr(specgraph.check, "diff", broken)
    monkeypatch.setattr(specgraph.summary, "summarize", broken)
    args = [XOR] if command == "show" else [XOR, XOR]
    code, out, err = _run(capsys, command, *args)
    assert (code, out) == (3, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"specgraph: internal error: specgraph {command} failed with "
                          "IndexError: tuple index out of range (last step: ")
    assert "this is a bug in specgraph" in err
    assert "rerun with --debug for the traceback and report it" in err
    code, out, err = _run(capsys, command, *args, "--format", "json")
    error = _error(out)
    assert code == 3 and error["kind"] == "internal" and error["exit_code"] == 3
    assert "IndexError: tuple index out of range" in error["message"]


def test_debug_shows_the_traceback_and_keeps_the_exit_code(repo_root, capsys,
                                                           monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise KeyError("lost")

    monkeypatch.setattr(specgraph.check, "diff", broken)
    code, out, err = _run(capsys, "diff", XOR, XOR, "--debug", "--format", "json")
    assert code == 3 and _error(out)["kind"] == "internal"
    assert "Traceback (most recent call last)" in err and "KeyError: 'lost'" in err
    assert err.rstrip().splitlines()[-1].startswith("specgraph: internal error: ")


def test_debug_shows_the_traceback_of_the_users_mistake(capsys, models) -> None:
    code, _, err = _run(capsys, "show", f"{models}:raises", "--debug")
    assert code == 2 and "Traceback" in err and "RuntimeError: weights file missing" in err


@pytest.mark.parametrize("argv", [
    ["show", XOR, "--format", "json", "--bogus"],
    ["show", "--format=json"],
    ["diff", XOR, "--form", "json", "--seed", "x"],
    ["diff", XOR, XOR, "--format", "json", "--no-numeric", "--numeric-only"],
])
def test_usage_errors_with_format_json_are_json(capsys, argv) -> None:
    code, out, err = _run(capsys, *argv)
    error = _error(out)
    assert code == 2 and error == {"kind": "usage", "message": error["message"],
                                   "exit_code": 2, "command": argv[0]}
    assert error["message"] and f"specgraph: error: {error['message']}" in err
    assert err.startswith("usage: specgraph ")


def test_usage_errors_without_json_leave_stdout_empty(capsys) -> None:
    code, out, err = _run(capsys, "diff", XOR, XOR, "--bogus")
    assert (code, out) == (2, "") and "unrecognized arguments: --bogus" in err


def test_interrupted_is_130(repo_root, capsys, monkeypatch) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(specgraph.check, "diff", interrupted)
    code, out, err = _run(capsys, "diff", XOR, XOR, "--format", "json")
    assert code == 130 and _error(out)["kind"] == "interrupted"
    assert err == "specgraph: interrupted\n"


def test_a_factory_that_calls_sys_exit_is_the_users_mistake(capsys, models) -> None:
    code, out, err = _run(capsys, "show", f"{models}:exits", "--format", "json")
    assert code == 2 and "the factory exits called sys.exit(3)" in _error(out)["message"]
    assert err.endswith("specgraph: error: " + _error(out)["message"] + "\n")


HOSTILE = '''
import sys
import torch


class Stop(BaseException):
    pass


class Net(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.fc = torch.nn.Linear(2, 3)
        self.how = how

    def forward(self, x):
        print("forward prints")
        if self.how == "exit":
            sys.exit(0)
        if self.how == "base":
            raise Stop("stopped in forward")
        return torch.relu(self.fc(x))


def fine():
    return Net("fine"), (torch.ones(4, 2),)


def factory_exits():
    print("factory prints")
    sys.exit(0)


def factory_stops():
    print("factory prints")
    raise Stop("stopped in the factory")


def forward_exits():
    return Net("exit"), (torch.ones(4, 2),)


def forward_stops():
    return Net("base"), (torch.ones(4, 2),)
'''


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    path = tmp_path / "hostile.py"
    path.write_text(HOSTILE)
    return path


@pytest.mark.parametrize("command", ["show", "diff"])
@pytest.mark.parametrize("factory, said", [
    ("factory_exits", "the factory factory_exits called sys.exit(0)"),
    ("factory_stops", "the factory factory_stops raised Stop (a BaseException): stopped in "
                      "the factory"),
    ("forward_exits", "the model, while specgraph traced it, called sys.exit(0)"),
    ("forward_stops", "the model, while specgraph traced it, raised Stop (a BaseException): "
                      "stopped in forward"),
])
def test_user_code_that_exits_or_raises_a_base_exception_is_exit_2(capsys, hostile, command,
                                                                   factory, said) -> None:
    args = [f"{hostile}:{factory}"] if command == "show" else [f"{hostile}:fine",
                                                                f"{hostile}:{factory}"]
    code, out, err = _run(capsys, command, *args, "--format", "json")
    error = _error(out)  # stdout is the error object alone: no prints ahead of it
    assert code == 2 and error["kind"] == "input" and said in error["message"]
    assert "prints" in err and "Traceback" not in err
    assert err.endswith("specgraph: error: " + error["message"] + "\n")
    code, out, err = _run(capsys, command, *args)
    assert (code, out) == (2, "") and said in err


@pytest.mark.parametrize("top", ["print('module prints')\nimport sys\nsys.exit(0)\n",
                                 "print('module prints')\nraise GeneratorExit('odd')\n"])
def test_a_model_file_that_exits_on_import_is_exit_2_in_a_real_process(tmp_path,
                                                                        top) -> None:
    """Through a real process, where sys.exit(0) would otherwise end it with 0 and no
    output: stdout holds only the JSON error, stderr the user's print and one sentence."""
    path = tmp_path / "exits.py"
    path.write_text(top + "def f():\n    pass\n")
    root = Path(__file__).resolve().parent.parent
    for command in (["show", f"{path}:f"], ["diff", f"{path}:f", f"{path}:f"]):
        proc = subprocess.run([sys.executable, "-m", "specgraph", *command, "--format",
                               "json"], capture_output=True, text=True, cwd=root)
        assert proc.returncode == 2, proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert error["kind"] == "input" and f"importing {path}" in error["message"]
        assert "module prints" in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stderr.count("specgraph: error:") == 1


def test_the_installed_command_exits_3_on_an_internal_error(tmp_path: Path) -> None:
    """Through a real process: the exit status, stderr's one sentence, stdout's JSON."""
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\nimport specgraph.check\n"
        "def broken(*a, **k):\n    raise IndexError('tuple index out of range')\n"
        "specgraph.check.diff = broken\n"
        "from specgraph.cli import main\nsys.exit(main())\n")
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(script), "diff", XOR, XOR, "--no-numeric",
                           "--format", "json"], capture_output=True, text=True, cwd=root)
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["error"]["kind"] == "internal"
    assert proc.stderr.count("specgraph: internal error:") == 1 and "Traceback" not in \
        proc.stderr


@pytest.mark.parametrize("option, value, said", [
    ("--rtol", "nan", "'nan': a tolerance is a finite number from 0"),
    ("--rtol", "inf", "'inf': a tolerance is a finite number from 0"),
    ("--rtol", "-1", "'-1': a tolerance is a finite number from 0"),
    ("--atol", "nan", "'nan': a tolerance is a finite number from 0"),
    ("--atol", "-1e-9", "'-1e-9': a tolerance is a finite number from 0"),
    ("--atol", "-inf", "'-inf': a tolerance is a finite number from 0"),
    ("--seed", "0-100000000000", "seeds are numbers from 0 to 4294967295"),
    ("--seed", "0-4000000000", "'0-4000000000' names 4,000,000,001 seeds; at most 10,000"),
    ("--seed", "0-5000,0-5000", "names 10,002 seeds; at most 10,000 run in one call"),
    ("--seed", "9-3", "names no seed"),
    ("--batch", "100000000000", "100,000,000,000 examples: a batch holds from 1 to 65,536"),
    ("--batch", "0", "0 examples: a batch holds from 1 to 65,536 examples"),
    ("--repeat", "0", "--repeat runs every layer from 1 to 1,000 times"),
])
def test_options_out_of_range_are_refused_with_one_sentence(capsys, option, value,
                                                            said) -> None:
    code, out, err = _run(capsys, "diff", XOR, XOR, f"{option}={value}", "--format", "json")
    error = _error(out)
    assert code == 2 and error["kind"] == "usage" and said in error["message"]
    assert f"argument {option}: " in error["message"]


def test_the_largest_allowed_seed_list_and_batch_parse() -> None:
    from specgraph.cli import MAX_BATCH, MAX_SEEDS, _parser

    args = _parser().parse_args(["diff", XOR, XOR, "--seed", f"0-{MAX_SEEDS - 1}",
                                 "--batch", str(MAX_BATCH), "--rtol", "0", "--atol", "1e-3"])
    assert len(args.seed) == MAX_SEEDS and args.batch == MAX_BATCH
    assert (args.rtol, args.atol) == (0.0, 1e-3)


@pytest.mark.parametrize("target", ["report.txt", "report.txt/sub"])
def test_repro_onto_a_file_is_refused_before_anything_runs(capsys, tmp_path, hostile,
                                                           target) -> None:
    (tmp_path / "report.txt").write_text("keep me")
    repro = tmp_path / target
    code, out, err = _run(capsys, "diff", f"{hostile}:fine", f"{hostile}:fine", "--repro",
                          str(repro), "--format", "json")
    error = _error(out)
    assert code == 2 and error["message"].startswith(f"--repro {repro}: ")
    assert "--repro names a folder" in error["message"]
    assert "forward prints" not in err  # refused before either model ran
    assert (tmp_path / "report.txt").read_text() == "keep me"
