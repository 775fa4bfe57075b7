# sparkcdc: `make demo` runs a local demo changefeed, `make test` the whole test suite.
VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup demo test unit bench clean

setup:
	./scripts/setup.sh

demo: setup
	$(VENV)/bin/sparkcdc demo --dir ./demo-data --output ./demo-output

# -rfE lists every failure's reason at the end; --maxfail ends a run whose failures cascade (a
# broken machine, a dead shared server) while there is time to print them.
test: setup
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=15 -rfE --maxfail=25 tests

unit: setup
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/unit

bench: setup
	$(PY) bench/capture_bench.py

clean:
	rm -rf demo-data demo-output .pytest_cache
