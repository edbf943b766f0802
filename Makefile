# The two set-up commands of the README are `make demo` and `make test`; each installs the
# pinned requirements first (a no-op when they are already there).
PYTHON ?= python3
PIP_FLAGS ?= -q --disable-pip-version-check

.PHONY: install demo test test-slow bench model

install:
	$(PYTHON) -m pip install $(PIP_FLAGS) -r requirements.txt
	$(PYTHON) -m pip install $(PIP_FLAGS) --no-deps -r requirements-nodeps.txt
	$(PYTHON) -m pip install $(PIP_FLAGS) --no-deps -e .

demo: install
	$(PYTHON) experiments/demo.py

# Both cores: one xdist worker each, a test file at a time (a file's module fixtures built once).
# make test: the suite less its slow tier (under 10 minutes on 2 cores); make test-slow: that
# tier (whole pipelines and multi-process runs); .ci/run runs both.
TEST_WORKERS ?= 2
test: install
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

test-slow: install
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m slow tests

# Per-query cost of every stage and method, scaling, training throughput (docs/PERFORMANCE.md).
bench: install
	$(PYTHON) benchmarks/bench_retrieval.py
	$(PYTHON) benchmarks/make_report.py

# Real CoLT models for MiniLM text features, trained on all 157 Div400 topics (resumable):
# work/models/div400-minilm-{colt-pairs-text-only,recommended,colt}, in that order
# (experiments/make_model.py; search.py and serve.py default to the recommended one).
# `make model ROWS=colt-pairs-text-only` builds that row alone (the one a captioned collection
# of your own can use): ROWS, comma-separated, goes to make_model.py --rows.
ROWS ?=
model: install
	@echo 'make model: building $(if $(ROWS),ROWS=$(ROWS),every row (make model ROWS=colt-pairs-text-only: only the row a captioned collection can use)) with experiments/make_model.py --rows (docs/COLLECTIONS.md)'
	$(PYTHON) experiments/make_model.py $(if $(ROWS),--rows=$(ROWS))
