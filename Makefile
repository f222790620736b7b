# gpucluster.core — developer entry points. Every target sets up what it needs itself.
#   make lab        bring up the container lab (LAB_NODES=3, LAB_IMAGE=debian12 or debian13, with PyTorch; shared storage and
#                   the checkpoint backup) and run site.yml
#   make lab-down   remove exactly what the lab created
#   make ping       check every lab node answers over SSH as the admin user and becomes root
#   make shell      log in to a lab node over SSH (N=node1); sudo -i for a root shell
#   make test       yamllint, ansible-lint, ansible-test sanity, unit tests, promtool rule tests (make static, one job) beside the
#                   molecule scenarios, TEST_JOBS=3 jobs at a time, the longest scenario first (no job starts after a failure;
#                   prints "== HH:MM:SS stage NAME N s" after every stage and molecule scenario, and a line per molecule action)
#   make bench      3- and 6-node lab: converge / re-run / check timings, ratios, top 15 tasks; parser benchmarks
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# ansible-core 2.21 needs Python >= 3.12 on the controller; pyenv's 3.12 is used where the
# system python3 is older.
PYTHON ?= $(shell for p in $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.12.*/bin/python3 2>/dev/null | sort -V | tail -1) python3.12 python3.13 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { command -v $$p; break; }; done)
REQUIREMENTS := requirements/controller.txt requirements/dev.txt requirements/constraints.txt
# The venv is .venv in the checkout, rebuilt when a requirements file is newer than it. With
# VENV_CACHE=DIR (.ci/run sets it: CI starts from a fresh clone) it is DIR/venv-<hash of the
# requirements files and the interpreter>, made once and reused by every clone with the same
# requirements: installing them (the ansible package alone is 40,000 files) takes minutes.
VENV_CACHE ?=
ifneq ($(strip $(VENV_CACHE)),)
VENV := $(abspath $(VENV_CACHE))/venv-$(shell { cat $(REQUIREMENTS); echo "$(PYTHON)"; "$(PYTHON)" -VV; } 2>&1 | sha256sum | cut -c1-16)
VENV_DEPS :=
VENV_MODE := --cached
else
VENV ?= .venv
VENV_DEPS := $(REQUIREMENTS)
VENV_MODE :=
endif
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections
export PY_COLORS := 0
export ANSIBLE_FORCE_COLOR := 0

LAB_NODES ?= 3
LAB_IMAGE ?= debian12
export LAB_NODES LAB_IMAGE
# Molecule scenarios run by `make test`, two at a time (MOLECULE_JOBS=2, lab/molecule-all.sh); `make molecule SCENARIOS=default` runs one.
SCENARIOS ?= $(shell lab/scenarios.sh)
# Jobs at once in make test: the static checks and the molecule scenarios (lab/molecule-all.sh).
TEST_JOBS ?= 3
# pytest-xdist workers for the unit tests: one per CPU core of the machine. UNIT_DIST=loadscope sends each test
# module to one worker (a module fixture that runs a playbook runs once: -13 % CPU measured); not the default
# until the suite is proven independent of the order modules run in (docs/DEVELOPING.md).
UNIT_WORKERS ?= auto
UNIT_DIST ?= load
# Every stage says when it ended and how long it took (lab/stage.sh).
STAGE := lab/stage.sh

.PHONY: help venv docker images lab lab-down ping shell lint yamllint ansible-lint sanity units promtool static molecule test bench build clean

help:
	@sed -n 's/^#   //p' Makefile

$(VENV)/.stamp: $(VENV_DEPS)
	@test -n "$(PYTHON)" || { echo "make: no Python >= 3.12 found (ansible-core 2.21 needs it); install one or pass PYTHON=/path/to/python3.12" >&2; exit 1; }
	@$(STAGE) venv lab/venv.sh "$(PYTHON)" "$(VENV)" $(VENV_MODE)

venv: $(VENV)/.stamp

docker:
	@lab/ensure-docker.sh

# MOLECULE_LAB_IMAGE=debian13 runs the scenarios that read it (container_runtime, storage) on Debian 13.
MOLECULE_LAB_IMAGE ?= debian12
export MOLECULE_LAB_IMAGE
images: docker
	@$(STAGE) images lab/build-image.sh debian12 debian13 debian12-torch $(filter-out debian12-torch,$(MOLECULE_LAB_IMAGE)-torch)

# The lab's nodes carry PyTorch (validate.yml's smoke test, the example training job): LAB_IMAGE plus python3-torch.
lab: venv docker
	@lab/lab.sh image
	@lab/lab.sh up

lab-down: venv
	@lab/lab.sh down

ping: venv
	@lab/lab.sh ping

N ?= node1
shell: venv
	@lab/lab.sh shell $(N)

yamllint: venv
	@$(STAGE) yamllint yamllint --strict .

ansible-lint: venv
	@$(STAGE) ansible-lint ansible-lint --profile production --strict

lint: yamllint ansible-lint

sanity: venv
	@$(STAGE) sanity lab/ansible-test.sh sanity

promtool: venv
	@PYTHON=$(BIN)/python ANSIBLE_PLAYBOOK=$(BIN)/ansible-playbook $(STAGE) promtool tests/monitoring/promtool.sh

units: venv
	@$(STAGE) units pytest -q -n $(UNIT_WORKERS) --dist $(UNIT_DIST) tests/unit

molecule: venv images
	@lab/molecule-all.sh $(SCENARIOS)

# The static checks, one after the other (make test runs them as one job beside the scenarios).
static: lint sanity units promtool

# The longest scenario (default) starts at once, the static checks beside it, then the other
# scenarios as jobs end (TEST_JOBS at a time): the static checks no longer delay the whole lab.
test: venv images
	@MOLECULE_JOBS=$(TEST_JOBS) lab/molecule-all.sh $(firstword $(SCENARIOS)) @static $(wordlist 2,99,$(SCENARIOS))

bench: venv docker
	@bench/run.sh

build: venv
	ansible-galaxy collection build --force --output-path build/

clean:
	rm -rf build tests/output .pytest_cache
