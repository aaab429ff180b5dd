# Everything installs itself: a fresh machine needs only python3, make and the package registries.
PYTHON ?= python3
VENV := .venv
VENV_LATEST := .venv-latest
VENV_DEMO := .venv-demo
UV := $(VENV)/bin/uv
PY := $(VENV)/bin/python
PY_LATEST := $(VENV_LATEST)/bin/python
PYTEST_ARGS ?=
TORCH ?= torch==2.13.0

.PHONY: install install-latest install-demo browser lint typecheck test test-ref test-latest test-long demo bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV) || (rm -rf $(VENV) && $(PYTHON) -m venv $(VENV))
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check uv
	# torch's CPU build first, through pip (the extra `semantic-minilm` needs torch; asked for through uv it
	# would be a CUDA build of several GB).
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(TORCH)
	$(UV) pip install --python $(PY) --quiet --compile-bytecode -e '.[dev,cli,english,semantic,semantic-minilm]' 'pydantic-ai-slim==2.62.0'
	$(PY) -m compileall -q eventlog search capability eventlog_cli
	touch $@

$(VENV_LATEST)/.installed: pyproject.toml $(VENV)/.installed
	$(PYTHON) -m venv --without-pip $(VENV_LATEST)
	$(VENV)/bin/python -m pip --python $(PY_LATEST) install --quiet --disable-pip-version-check $(TORCH)
	# Only pydantic-ai-slim is moved to its newest release: a blanket --upgrade would replace the CPU torch
	# installed above with a CUDA build of several GB (the constraint pins it where pip put it).
	echo '$(TORCH)' > $(VENV_LATEST)/torch-constraint.txt
	$(UV) pip install --python $(PY_LATEST) --quiet --upgrade-package pydantic-ai-slim --compile-bytecode \
		--constraint $(VENV_LATEST)/torch-constraint.txt -e '.[test,cli,english,semantic,semantic-minilm]' pydantic-ai-slim
	touch $@

install: $(VENV)/.installed
install-latest: $(VENV_LATEST)/.installed

# The web viewer's tests (tests/web) drive Debian's Chromium through Playwright's Python package,
# never a browser Playwright downloads itself; installed here (as root) when it is missing.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get install -y chromium chromium-driver || (apt-get update && apt-get install -y chromium chromium-driver)

browser: $(CHROMIUM)

LINTED := $(wildcard eventlog search capability eventlog_cli tests bench examples)

lint: install
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

# Twice: against pydantic-ai-slim 2.62.0 (pyproject's settings, which leave out what needs a newer
# release), and against the newest release (pyright-latest.json: everything, the conversation store
# and the examples included).
typecheck: install install-latest
	$(VENV)/bin/basedpyright eventlog search capability eventlog_cli
	$(VENV)/bin/basedpyright -p pyright-latest.json --pythonpath $(PY_LATEST)

# The whole suite on pydantic-ai-slim as the reference pins it (2.62.0), with the reference installed.
test-ref: install browser
	$(PY) -c 'import pydantic_ai, importlib.metadata as m; print("pydantic-ai-slim", m.version("pydantic-ai-slim"))'
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The newest pydantic-ai-slim, on the tests whose outcome depends on pydantic-ai (the rest use
# it at most to build a message, and run in test-ref): the capabilities (tests/capability, the
# chat app example's HTTP tests included: they need 2.68+ and skip on the reference's pin),
# search and recall (tests/search), the README's and docs/guide.md's blocks and the tour
# (tests/docs), messages stored and read back byte for byte and replayed (the conformance,
# migration and streaming tests of tests/log), the CLI's views of recorded and durable runs (every
# part kind of every message included), its search and re-execution, the demo, and the viewer's
# message pages and validator, and the fault-injection mix (tests/faults/test_faults.py), whose
# saver role keeps conversations with EventLogConversationStore only there. Tests that need the
# reference skip.
# `make test-latest LATEST_TESTS=tests` runs the whole suite on it.
LATEST_TESTS ?= tests/capability tests/search tests/docs \
	tests/log/test_log_conformance.py tests/log/test_log_migration.py tests/log/test_log_streaming.py \
	tests/cli/test_cli_browse.py tests/cli/test_cli_demo.py tests/cli/test_cli_durable.py tests/cli/test_cli_entries.py \
	tests/cli/test_cli_search.py tests/cli/test_cli_rerun.py tests/cli/test_cli_deep_json.py tests/cli/test_cli_outline.py \
	tests/web/test_web_app.py tests/web/test_web_verify.py tests/web/test_web_deep_json.py tests/web/test_web_outline.py \
	tests/faults/test_faults.py
test-latest: install-latest browser
	$(PY_LATEST) -c 'import importlib.metadata as m; print("pydantic-ai-slim", m.version("pydantic-ai-slim"))'
	$(PY_LATEST) -m pytest -q $(LATEST_TESTS) $(PYTEST_ARGS)

test: lint typecheck test-ref test-latest

# The long crash and fuzz loops (minutes): a few hundred damaged-store trials each for the two fuzz tests,
# and the fault-injection mixes of tests/faults for four minutes each.
test-long: install
	EVENTLOG_LONG=1 $(PY) -m pytest -q --timeout=3600 tests/log/test_log_properties.py tests/log/test_log_lmdb.py tests/log/test_log_damage.py tests/cli/test_cli_fuzz.py tests/faults $(PYTEST_ARGS)

# The demo needs only the package and its `cli` extra: a venv of its own (about 160 MB, seconds to
# install), not the development environment (torch, the reference, the test tools: gigabytes).
$(VENV_DEMO)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_DEMO) || (rm -rf $(VENV_DEMO) && $(PYTHON) -m venv $(VENV_DEMO))
	$(VENV_DEMO)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[cli]'
	touch $@

install-demo: $(VENV_DEMO)/.installed

demo: install-demo
	$(VENV_DEMO)/bin/eventlog demo

# Each script measures this project and the reference in one run and prints the ratios
# (bench_commit_cost breaks this project's overhead per agent run down instead);
# drop --quick for the full sizes (bench_search: about 15 minutes; bench_capability: the
# reference alone takes hours at 1,600 exchanges, so its full run is best given --no-reference).
# bench_conversation_store (about 2 minutes; --postgres adds PostgreSQL) needs pydantic-ai-slim 2.66+,
# so it runs on .venv-latest.
bench: install install-latest
	$(PY) bench/bench_log.py --quick
	$(PY) bench/bench_capability.py --quick
	$(PY) bench/bench_commit_cost.py --reps 1
	$(PY) bench/bench_search.py --quick
	$(PY_LATEST) bench/bench_conversation_store.py

clean:
	rm -rf $(VENV) $(VENV_LATEST) $(VENV_DEMO) .pytest_cache .ruff_cache .hypothesis
