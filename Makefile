# The README's two commands, on a fresh machine:
#   make paper [STUDY=default|smoke|gpu]   set up, run the study's pipeline, print where the paper is
#   make test                              set up (with the browser the JupyterLab test drives), run the tests

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STUDY ?= default
# setup reruns when the dependencies change, not on every call
STAMP := $(VENV)/.xsa-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# the offline CORE bundle beside the clone (as in CI), unless the caller chose one
ifeq ($(XSA_EVAL_BUNDLE),)
ifneq ($(wildcard ../shared/eval_bundle/core.yaml),)
export XSA_EVAL_BUNDLE := $(abspath ../shared/eval_bundle)
endif
endif

.PHONY: setup browser test paper

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -e '.[test]'
	touch $(STAMP)

# Debian's chromium for the JupyterLab test (Playwright cannot download its own browser offline)
browser:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; } \
		|| echo "warning: could not install chromium; the JupyterLab browser test will be skipped"

test: setup browser
	$(PY) -m pytest -q tests

paper: setup
	$(PY) -m xsa.pipeline --study $(STUDY)
