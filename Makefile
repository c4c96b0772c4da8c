# The README's two commands, on a fresh machine:
#   make paper [STUDY=default|smoke|gpu]   set up, run the study's pipeline, print where the paper is
#   make test                              set up (with the browser the JupyterLab test drives), run the tests
# and two more:
#   make report [STUDY=...]                the paper from the committed records alone (trains nothing)
#   make reproduce RUN=<run id>            retrain one committed run and compare it with its record
#   make lab                               JupyterLab on the notebooks
#   make study STUDY=robust                train an adaptive study until it declares no more runs
#   make gpu-study [GPU_STUDY=d12-test]    a GPU study on one 8-GPU node: data, torchrun, evaluations, paper

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STUDY ?= default
# values from the command line reach the shell as environment variables, quoted where they are used,
# never pasted into the command text (RUN='x; touch F' is a run id that does not exist, not a command)
export STUDY RUN LEAVE_OUT
# setup reruns when the dependencies change, not on every call
STAMP := $(VENV)/.xsa-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# the offline CORE bundle beside the clone (as in CI), unless the caller chose one
ifeq ($(XSA_EVAL_BUNDLE),)
ifneq ($(wildcard ../shared/eval_bundle/core.yaml),)
export XSA_EVAL_BUNDLE := $(abspath ../shared/eval_bundle)
endif
endif

.PHONY: setup browser pdftools tcmalloc test paper study report reproduce gpu-study lab

setup: $(STAMP)

# torch as pyproject.toml pins it (never a bare `torch`: pip would resolve it to whatever build its
# index serves), installed before the rest so that pip keeps it: its CUDA build where nvidia-smi lists
# a GPU (TORCH_CUDA_INDEX: the build for the node's driver), the CPU build otherwise; setup says which.
TORCH_PIN := $(shell sed -n 's/^ *"\(torch==[0-9][0-9.]*\)",.*/\1/p' pyproject.toml)
TORCH_CUDA_INDEX ?= https://download.pytorch.org/whl/cu128
export TORCH_CUDA_INDEX

$(STAMP): pyproject.toml
	@test -n "$(TORCH_PIN)" || { echo "setup: no torch==<version> pin found in pyproject.toml" >&2; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then \
		echo "setup: nvidia-smi lists a GPU: installing the CUDA build of $(TORCH_PIN) from $$TORCH_CUDA_INDEX"; \
		$(PY) -m pip install '$(TORCH_PIN)' --index-url "$$TORCH_CUDA_INDEX"; \
	else \
		echo "setup: no GPU (nvidia-smi lists none): installing the CPU build of $(TORCH_PIN)"; \
		$(PY) -m pip install '$(TORCH_PIN)'; \
	fi
	$(PY) -m pip install -e '.[test]'
	@$(PY) -c 'import torch; print("setup: installed torch", torch.__version__, "(CUDA " + torch.version.cuda + " build)" if torch.version.cuda else "(CPU build)")'
	touch $(STAMP)

# Debian's chromium: the paper's PDF engine (its headless print of the HTML) and the JupyterLab test's
# browser (Playwright cannot download its own offline)
browser:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; } \
		|| echo "warning: could not install chromium; no PDF of the paper, and the JupyterLab browser test will be skipped"

# Debian's tcmalloc: the CPU study preloads it (faster allocation, the same arithmetic; recorded as
# ld_preload in each run's provenance). Without it the study runs with glibc malloc, more slowly.
tcmalloc:
	@ls /usr/lib/*/libtcmalloc_minimal.so.4 >/dev/null 2>&1 || { $(SUDO) apt-get update && $(SUDO) apt-get install -y libtcmalloc-minimal4; } \
		|| echo "warning: could not install libtcmalloc-minimal4; training runs with glibc malloc (slower, same numbers)"

# poppler's pdftoppm and pdftotext: the test that reads the PDF's pages (skipped without them)
pdftools:
	@command -v pdftoppm >/dev/null || { $(SUDO) apt-get update && $(SUDO) apt-get install -y poppler-utils; } \
		|| echo "warning: could not install poppler-utils; the PDF layout test will be skipped"

test: setup browser pdftools
	$(PY) -m pytest -q tests

# The CPU study runs as SHARDS one-thread processes (two single-thread trainings beat one two-thread
# training on a 2-core CPU), with tcmalloc preloaded where the system has it (faster, same numbers);
# a GPU study runs as one process.
SHARDS ?= $(if $(filter gpu,$(STUDY)),1,2)
THREADS ?= $(if $(filter 1,$(SHARDS)),,1)
export SHARDS THREADS
TCMALLOC = $(firstword $(wildcard /usr/lib/*/libtcmalloc_minimal.so.4))
WORK_ENV = env $${THREADS:+OMP_NUM_THREADS="$$THREADS"} $(if $(TCMALLOC),LD_PRELOAD=$(TCMALLOC))
PIPELINE := $(PY) -m xsa.pipeline --study "$$STUDY"
SHARD = $(WORK_ENV) $(PIPELINE) --stages train evaluate diagnostics throughput --shard

# a count from the command line is checked before the shell does arithmetic with it:
# $(call COUNT,NAME) stops the recipe unless $$NAME is a whole number (empty where allowed: COUNT_OR_EMPTY)
COUNT = case "$$$(1)" in ''|*[!0-9]*) echo "$(1)='$$$(1)' is not a whole number" >&2; exit 2;; esac
COUNT_OR_EMPTY = case "$$$(1)" in *[!0-9]*) echo "$(1)='$$$(1)' is not a whole number" >&2; exit 2;; esac
# a count that must be at least 1 (SHARDS=0 makes a pass of no shards, and `make study` would pass forever)
POSITIVE = $(call COUNT,$(1)); test "$$$(1)" -ge 1 2>/dev/null || { echo "$(1)='$$$(1)' must be at least 1" >&2; exit 2; }

# the shards of one pass over the study's runs, in parallel
SHARDS_PASS = $(call POSITIVE,SHARDS); $(call COUNT_OR_EMPTY,THREADS); \
	pids=""; for k in $$(seq 0 $$((SHARDS - 1))); do \
		echo "$(SHARD) $$k/$$SHARDS"; $(SHARD) $$k/$$SHARDS & pids="$$pids $$!"; \
	done; status=0; for p in $$pids; do wait $$p || status=1; done; test $$status = 0

paper: setup tcmalloc browser
	@$(call POSITIVE,SHARDS); $(call COUNT_OR_EMPTY,THREADS)
	$(PIPELINE) --stages validation data
	@$(SHARDS_PASS)
	$(PIPELINE) --stages paper

# an adaptive study (xsa/studies/rules.py, e.g. STUDY=robust) declares more runs as its records land:
# passes over it until every declared run is trained (a failing pass stops it; rerun to resume)
study: setup tcmalloc
	@$(call POSITIVE,SHARDS); $(call COUNT_OR_EMPTY,THREADS)
	$(PIPELINE) --stages validation data
	@until $(PIPELINE) --status; do $(SHARDS_PASS) || exit 1; done

# retrain one committed run from scratch (one thread, as the study) and compare val bpb and weights
reproduce: setup tcmalloc
	@test -n "$$RUN" || { echo "usage: make reproduce RUN=<run id> (a folder of results/runs)"; exit 2; }
	$(if $(TCMALLOC),LD_PRELOAD=$(TCMALLOC)) OMP_NUM_THREADS=1 $(PY) -m xsa.reproduce --run "$$RUN"

# the paper stage alone: tables, figures and paper from the records results/ holds (every run of the
# study whole, or LEAVE_OUT="<run id> ..." named on purpose; INTERIM=1 while the robustness study
# still trains). LEAVE_OUT is split into run ids with globbing off.
report: setup browser
	set -f; $(PIPELINE) --stages paper $${LEAVE_OUT:+--leave-out $$LEAVE_OUT} $(if $(INTERIM),--interim)

# The gpu study on one GPU node (8 x H100 or H200): its data (sized for what d24's rows read), the
# four runs one after the other, each over every GPU with torchrun (xsa/gpu_study.py; a run stopped
# part-way resumes), then CORE, SFT, ChatCORE, diagnostics and throughput as one pipeline shard per
# GPU (the trained runs are found done and skipped), then the paper. NGPU=<n> and DEVICE_BATCH=<rows>
# (e.g. 8 for d24-nanochat on 80 GB) where the defaults do not fit. GPU_STUDY=d12-test tests the scale
# study's d12 prediction instead: d12 pairs until its precision rule stops (xsa/studies/scale.py).
# GPU_STUDY, NGPU and DEVICE_BATCH reach the shell as environment variables, quoted, never as command text;
# NGPU defaults to the GPUs nvidia-smi lists. The GPUs are checked first (torch's CUDA build sees NGPU of
# them and runs on each: xsa.gpu_study --check), and every training and stage command is told
# --device cuda, so a torch that sees no GPU (a driver older than its CUDA build) stops the recipe at
# once, in one line, instead of training on the CPU.
GPU_STUDY ?= gpu
export GPU_STUDY NGPU DEVICE_BATCH
GPU_PIPELINE := $(PY) -m xsa.pipeline --study "$$GPU_STUDY"
gpu-study: setup
	@n="$${NGPU:-$$(nvidia-smi -L 2>/dev/null | wc -l)}"; NGPU=$$n; $(call COUNT,NGPU); $(call COUNT_OR_EMPTY,DEVICE_BATCH); \
	test "$$n" -ge 1 || { echo "gpu-study: no GPU visible (nvidia-smi -L lists none; set NGPU=<n>)"; exit 2; }; \
	set -e; $(PY) -m xsa.gpu_study --study "$$GPU_STUDY" --nproc "$$n" --check; \
	$(GPU_PIPELINE) --device cuda --stages validation data; \
	$(PY) -m xsa.gpu_study --study "$$GPU_STUDY" --nproc "$$n" $${DEVICE_BATCH:+--device-batch-size "$$DEVICE_BATCH"}; \
	pids=""; for k in $$(seq 0 $$((n - 1))); do \
		echo "CUDA_VISIBLE_DEVICES=$$k $(GPU_PIPELINE) --device cuda --stages train evaluate diagnostics throughput --shard $$k/$$n"; \
		CUDA_VISIBLE_DEVICES=$$k $(GPU_PIPELINE) --device cuda --stages train evaluate diagnostics throughput --shard $$k/$$n & pids="$$pids $$!"; \
	done; status=0; for p in $$pids; do wait $$p || status=1; done; test $$status = 0; \
	$(GPU_PIPELINE) --stages paper

# JupyterLab on the notebooks (as root, as in containers, it needs --allow-root or it exits at once)
lab: setup
	$(VENV)/bin/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)
