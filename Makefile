# npuops.fleet — the two commands for a fresh machine are `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/build/collections
export NPUOPS_LAB_DIR ?= /tmp/npuops-lab

.PHONY: bootstrap test unit lint mypy sanity integration faults molecule demo bench simulate lab-up lab-down lab-status build ee clean docs

bootstrap:
	@scripts/bootstrap.sh

# one rotation of two of the lab tests and one cached real-package test (tests/integration/rotation.py)
test: bootstrap
	@NPUOPS_IT_ROTATION=$${NPUOPS_IT_ROTATION:-2} NPUOPS_REALPKG=$${NPUOPS_REALPKG:-auto} scripts/test.sh

unit: bootstrap
	@scripts/test.sh unit

lint: bootstrap
	@scripts/test.sh lint

# mypy over plugins/ alone (also a step of `make lint`; [tool.mypy] in pyproject.toml)
mypy: bootstrap
	@scripts/test.sh mypy

sanity: bootstrap
	@scripts/test.sh sanity

integration: bootstrap
	@NPUOPS_IT_ROTATION=1 scripts/test.sh integration

# every fault-injection case on the lab (docs/docsite/rst/faults_and_resuming.rst, "Fault injection"); CI runs a rotating subset
faults: bootstrap
	@FAULTS_CASES=$${FAULTS_CASES:-all} scripts/test.sh faults

molecule: bootstrap
	@eval "$$(tests/lab/labctl env)" && scripts/test.sh molecule

demo: bootstrap
	@scripts/demo.sh

bench: bootstrap
	@scripts/bench.sh

# the window over a mixed fleet of scratch hosts, batches vs rolling, and one admission decision at
# 1,000 and 10,000 Nodes (docs/docsite/rst/scale.rst, "Benchmarks"); results in build/bench/fleet-*.json, admission-snapshot.json
.PHONY: bench-fleet
bench-fleet: bootstrap
	@scripts/bench.sh --fleet

# a discrete-event model, not a measurement: one window at 1,000-20,000 nodes and 1-8 controllers from the
# costs measured in build/bench/ (docs/docsite/rst/scale.rst, "Scale beyond one control node (model)"); no lab;
# results in build/bench/window-sim.json and window-sim.md
simulate: bootstrap
	@python bench/window_sim.py

lab-up: bootstrap
	@tests/lab/labctl up

lab-down:
	@tests/lab/labctl down

lab-status:
	@tests/lab/labctl status

# the execution environment image (ee/build.py: local Debian trixie base, pinned requirements, this
# collection), tagged by the hash of its inputs and reused while they are unchanged
ee: bootstrap
	@.venv/bin/python ee/build.py

# the docsite (docs/docsite: guides, and a page per module, plugin and role) as HTML in
# build/docsite/build/html (antsibull-docs + Sphinx, pinned in requirements-docs.txt; warnings fail it)
docs: bootstrap
	@scripts/docs.sh

build: bootstrap
	@mkdir -p build && ansible-galaxy collection build --force --output-path build .

clean:
	rm -rf build .pytest_cache .ruff_cache tests/output

# real Debian NVIDIA packages built by real DKMS (tests/lab/realpkg/README.md): mirror, image, smoke check
.PHONY: realpkg-lab test-realpkg
# the three real-package window tests (tests/integration/test_realpkg.py) on the lab; `make test` runs one whose image is cached
test-realpkg: bootstrap
	@scripts/test.sh realpkg

realpkg-lab:
	@python3 tests/lab/realpkg/mirror.py && python3 tests/lab/realpkg/image.py && python3 tests/lab/realpkg/smoke.py
