# gpucluster.core — developer entry points. Every target sets up what it needs itself.
#   make lab        bring up the container lab (LAB_NODES=3, LAB_IMAGE=debian12) and run site.yml
#   make lab-down   remove exactly what the lab created
#   make ping       check every lab node answers over SSH as the admin user and becomes root
#   make shell      log in to a lab node over SSH (N=node1); sudo -i for a root shell
#   make test       yamllint, ansible-lint, ansible-test sanity, unit tests, promtool rule tests, molecule (stops at the first failure)
#   make bench      3- and 6-node lab: converge / re-run / check timings, ratios, top 15 tasks; parser benchmarks
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
# ansible-core 2.21 needs Python >= 3.12 on the controller; pyenv's 3.12 is used where the
# system python3 is older.
PYTHON ?= $(shell for p in $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.12.*/bin/python3 2>/dev/null | sort -V | tail -1) python3.12 python3.13 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { command -v $$p; break; }; done)
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections
export PY_COLORS := 0
export ANSIBLE_FORCE_COLOR := 0

LAB_NODES ?= 3
LAB_IMAGE ?= debian12
export LAB_NODES LAB_IMAGE
# Molecule scenarios run by `make test`, in order; `make molecule SCENARIOS=default` runs one.
SCENARIOS ?= $(shell lab/scenarios.sh)

.PHONY: help venv docker images lab lab-down ping shell lint yamllint ansible-lint sanity units promtool molecule test bench build clean

help:
	@sed -n 's/^#   //p' Makefile

$(VENV)/.stamp: requirements/controller.txt requirements/dev.txt requirements/constraints.txt
	@test -n "$(PYTHON)" || { echo "make: no Python >= 3.12 found (ansible-core 2.21 needs it); install one or pass PYTHON=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements/dev.txt
	touch $@

venv: $(VENV)/.stamp

docker:
	@lab/ensure-docker.sh

images: docker
	@lab/build-image.sh debian12 debian13

lab: venv docker
	@lab/build-image.sh $(LAB_IMAGE)
	@lab/lab.sh up

lab-down: venv
	@lab/lab.sh down

ping: venv
	@lab/lab.sh ping

N ?= node1
shell: venv
	@lab/lab.sh shell $(N)

yamllint: venv
	yamllint --strict .

ansible-lint: venv
	ansible-lint --profile production --strict

lint: yamllint ansible-lint

sanity: venv
	@lab/ansible-test.sh sanity

promtool: venv
	tests/monitoring/promtool.sh

units: venv
	pytest -q -n 2 tests/unit

molecule: venv images
	@for s in $(SCENARIOS); do echo "=== molecule test -s $$s"; molecule test -s $$s || exit 1; done

test: lint sanity units promtool molecule

bench: venv docker
	@bench/run.sh

build: venv
	ansible-galaxy collection build --force --output-path build/

clean:
	rm -rf build tests/output .pytest_cache
