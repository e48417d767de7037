# asr-transformer: `make recipe` runs the default recipe end to end, `make test` the tests.
PYTHON ?= python3
VENV   ?= .venv
STAMP  := $(VENV)/.installed

.PHONY: install test recipe clean

install: $(STAMP)

# Re-installs only when the project's dependencies change.
$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

test: install
	$(VENV)/bin/python -m pytest tests

recipe: install
	$(MAKE) -C recipes/synthetic ASR=$(abspath $(VENV))/bin/asr

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
