# The two set-up commands: `make demo` and `make test`. Both create the virtualenvs on first use.
PYTHON ?= python3
VENV ?= .venv
CHECKOV_VENV ?= .venv-checkov
DOCS_VENV ?= .venv-docs
PY := $(VENV)/bin/python

.PHONY: demo test synth check charts worker-demo bench wheel image docs clean

$(VENV)/.installed: requirements.txt requirements-dev.txt policies/requirements.txt worker/requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install -q -r requirements-checkov.txt
	touch $@

# The documentation site's tools (mkdocs, material, mkdocstrings): a virtualenv of their own, so .venv stays light.
$(DOCS_VENV)/.installed: requirements-docs.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q --upgrade pip
	$(DOCS_VENV)/bin/python -m pip install -q -r requirements-docs.txt
	touch $@

## demo: the offline synth, the policy check and the deploy rehearsal on its plan, and the worker on synthetic slides
## (no cloud)
demo: $(VENV)/.installed
	$(PY) -m components charts pull --if-missing
	$(PY) -m components synth --stack dev --out out
	@echo
	$(PY) -m policies check out/plan.json
	@echo
	$(PY) -m components rehearse --plan out/plan.json
	@echo
	$(PY) -m worker demo --out out/demo

# Test files run on PYTEST_WORKERS processes (pytest-xdist; whole files per worker, so a module's fixtures are
# built once); PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2

# The IAM evaluator's test oracle (tests/oracle/iam-simulate/README.md): an npm package, installed from its lock.
IAM_ORACLE := tests/oracle/iam-simulate
$(IAM_ORACLE)/node_modules/.installed: $(IAM_ORACLE)/package-lock.json
	npm ci --prefix $(IAM_ORACLE) --no-audit --no-fund
	touch $@

# pyright, pinned, for tests/test_types.py (mypy is pinned in requirements-dev.txt): an npm package, from its lock.
PYRIGHT_DIR := tools/pyright
$(PYRIGHT_DIR)/node_modules/.installed: $(PYRIGHT_DIR)/package-lock.json
	npm ci --prefix $(PYRIGHT_DIR) --no-audit --no-fund
	touch $@

## test: every test (about 5 minutes on 2 cores)
test: $(VENV)/.installed $(CHECKOV_VENV)/.installed $(DOCS_VENV)/.installed $(IAM_ORACLE)/node_modules/.installed \
		$(PYRIGHT_DIR)/node_modules/.installed
	CHECKOV=$(CURDIR)/$(CHECKOV_VENV)/bin/checkov $(PY) -m pytest $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

synth: $(VENV)/.installed
	$(PY) -m components charts pull --if-missing
	$(PY) -m components synth --stack dev --out out

check: synth
	$(PY) -m policies check out/plan.json

## charts: fill the chart cache the synth renders from with the pinned charts (online); CHARTS=DIR picks the cache
charts: $(VENV)/.installed
	$(PY) -m components charts pull $(if $(CHARTS),--charts $(CHARTS))

bench: $(VENV)/.installed
	$(PY) -m worker bench --quick

## wheel: the one distribution (components as gpuburst, the pack as gpuburst.policy, the worker recipe) into .whl/;
## needs only $(PYTHON)'s pip (no virtualenv is made), and works after any earlier build or `pip install .` here
wheel:
	rm -rf .whl/gpuburst-*.whl  # setup.py empties build/lib's package itself, so nothing an earlier build left lingers
	$(PYTHON) -m pip wheel -q --no-deps -w .whl .

## image: build worker/Dockerfile (docker buildx, podman or buildah), smoke-test it on CMU-1, print its layer sizes.
## BASE_IMAGE=REF (default: the catalogue's WORKER_BASE_IMAGE), CA_BUNDLE=FILE|none (pip's CA, a build secret),
## IMAGE_ARGS (e.g. --standin-base offline, --no-cache); stdlib only: no virtualenv needed (see scripts/build_image.py)
image:
	$(PYTHON) scripts/build_image.py $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) \
		$(if $(CA_BUNDLE),--ca-bundle $(CA_BUNDLE)) $(IMAGE_ARGS)

## docs: the documentation site (guides, and the API reference generated from the docstrings), built offline and
## strictly into site/ (docs/about-these-docs.md); `$(DOCS_VENV)/bin/mkdocs serve` serves it with live reload
docs: $(DOCS_VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf out .pytest_cache site
