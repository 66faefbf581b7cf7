# xjit: the two commands a new user needs are `make demo` and `make test`.
PYTHON ?= python3
# One CMake build serves the Python package (editable install), the C++ tests and the tools.
BUILD_DIR := build/py
JOBS ?= $(shell nproc)
FUZZ_GRAPHS ?= 20000

.PHONY: setup build test test-cpp test-ir test-python demo fuzz bench format clean

setup:
	@bash scripts/setup.sh

build: setup
	@$(PYTHON) -m pip install -q --no-build-isolation -e . \
	  -Cbuild-dir=$(BUILD_DIR) -Ccmake.build-type=RelWithDebInfo 2>&1 | grep -v "Running pip as the 'root' user" || true
	@test -f $(BUILD_DIR)/tools/xjit-opt || { echo "build failed"; exit 1; }

test: build
	@$(MAKE) --no-print-directory test-cpp test-ir test-python

test-cpp:
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

test-ir:
	$(PYTHON) -c "import lit.main; lit.main.main()" -sv tests/ir -Dxjit_build_dir=$(abspath $(BUILD_DIR))

test-python:
	XJIT_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q tests/python

demo: build
	@bash examples/ir_demo.sh $(BUILD_DIR)

fuzz: build
	$(BUILD_DIR)/tools/xjit-fuzz --graphs=$(FUZZ_GRAPHS) --seed=1

# bench/requirements.txt: matplotlib for the charts (transformers is already there from setup).
bench: build
	@$(PYTHON) -c "import matplotlib" 2>/dev/null || $(PYTHON) -m pip install -q -r bench/requirements.txt
	$(PYTHON) bench/run.py

format:
	clang-format-19 -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf build build-*
