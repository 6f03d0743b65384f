# specgraph: `make demo` runs the main job on a shipped example, `make test` runs the tests.
# Both create .venv with every dependency pinned (constraints.txt) on first use.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all bench venv clean browser

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[all,dev]'
	@# the HTML report inlines dagre (MIT, from npm): fetched once, checked against its sha512
	$(BIN)/python -m specgraph.assets
	touch $(STAMP)

# the HTML report's browser tests drive Debian's Chromium: installed where we are root
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends chromium chromium-driver >/dev/null; \
	else echo "the HTML report tests need chromium and chromium-driver: install them" \
		"(sudo apt-get install chromium chromium-driver) and run make test again" >&2; \
		exit 2; fi

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/specgraph show examples/xor/model_torch.py:correct
	@# exit 1 means "differences found", which is what this pair must show
	$(BIN)/specgraph diff examples/xor/model_torch.py:correct examples/xor/model_jax.py:forgot_activation || test $$? -eq 1
	@# the faithful port agrees in numbers too, forward and backward, over five input seeds
	$(BIN)/specgraph diff examples/xor/model_torch.py:correct examples/xor/model_jax.py:correct --seed 0-4
	@# and the numbers alone, structure ignored, find the forgotten activation
	$(BIN)/specgraph diff examples/xor/model_torch.py:correct examples/xor/model_jax.py:forgot_activation --numeric-only --no-backward || test $$? -eq 1
	@# the same pair as one offline HTML page: both graphs, the finding, equations, numbers
	$(BIN)/specgraph report examples/xor/model_torch.py:correct examples/xor/model_jax.py:forgot_activation -o xor-report.html || test $$? -eq 1

test: $(STAMP) browser
	$(BIN)/python -m pytest -q -n 2

test-all: $(STAMP) browser
	$(BIN)/python -m pytest -q -n 2 -m "slow or not slow"

bench: $(STAMP)
	$(BIN)/python -m bench.mutations --quiet
	$(BIN)/python -m bench.peers --quiet
	$(BIN)/python -m bench.align
	$(BIN)/python -m bench.trace
	$(BIN)/python -m bench.numeric
	$(BIN)/python -m bench.report

clean:
	rm -rf $(VENV) build dist *.egg-info
