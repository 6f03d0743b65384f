"""Shared test settings: golden files (``--update-goldens`` rewrites them for review);
property tests draw the same examples on every run (a suite that passes once passes on a
clean clone); ``SPECGRAPH_EXPLORE=1`` draws new ones each run, to look for failures."""

from __future__ import annotations

import os
import re
from pathlib import Path

# run by pytest-xdist (``make test``: two workers, one per core), each worker keeps to one
# thread of its own: the frameworks' thread pools would otherwise take every core in every
# worker. Set before any test module imports a framework.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                 "TF_NUM_INTEROP_THREADS"):
        os.environ.setdefault(_var, "1")
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                       "intra_op_parallelism_threads=1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("SPECGRAPH_EXPLORE") else "fixed")

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = Path(__file__).resolve().parent / "goldens"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true",
                     help="rewrite golden files from the current output (review the diff)")


# float32 rounding noise (errors below 1e-4 of scale, exact zeros) differs with the CPU's
# kernels (AVX2 or AVX-512, its BLAS): goldens hold it as written, comparisons mask it
_NOISE = re.compile(r"(?<![\w.])(?:0\.0(?![\d.])|0\.0+e[+-]00|\d(?:\.\d+)?e-(?:0[5-9]|[1-9]\d))(?!\w)")


# and a layer of several outputs reports its worst output, which noise may pick
_SCALE = re.compile(r'"scale": [-+.\de]+')


def steady(text: str) -> str:
    """``text`` with every number of float rounding noise written ``~0``."""
    return _NOISE.sub("~0", _SCALE.sub('"scale": ~', text))


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """``golden(name, text)`` compares text with tests/goldens/name (or rewrites it), the
    numbers of float rounding noise masked on both sides (``steady``)."""
    update = request.config.getoption("--update-goldens")

    def check(name: str, text: str) -> None:
        path = GOLDENS / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.exists(), f"no golden file {path}; run pytest --update-goldens"
        want = path.read_text(encoding="utf-8")
        assert steady(text) == steady(want), f"output differs from {path}"

    return check


@pytest.fixture
def repo_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the repository root, so source paths print relative to it."""
    monkeypatch.chdir(ROOT)
    return ROOT
