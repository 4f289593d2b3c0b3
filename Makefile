# gpusched — build, run and test. `make run` and `make test` work on a fresh
# Debian 12 machine: both install missing packages first.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

SOURCES = $(shell git ls-files -co --exclude-standard -- '*.h' '*.cc' 2>/dev/null)

.PHONY: all deps configure build run demo test unit format format-check asan bench clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# `make run` serves examples/quickstart.yaml: reference engines behind the
# gateway, on http://127.0.0.1:8080 (it prints a key and a curl line).
run: build
	@mkdir -p out
	$(BUILD)/gpusched serve --config examples/quickstart.yaml

# The simulators on the shipped samples (placement and serving reports).
demo: build
	@bash scripts/demo.sh $(BUILD)

unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

format:
	clang-format -i $(SOURCES)

format-check: deps
	@bad=$$(for f in $(SOURCES); do clang-format --dry-run --Werror $$f >/dev/null 2>&1 || echo $$f; done); \
	if [ -n "$$bad" ]; then echo "format-check: not clang-formatted (run 'make format'):"; echo "$$bad"; exit 1; fi; \
	echo "format-check: ok"

# ASan + UBSan build of the unit tests.
asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DGPUSCHED_SANITIZE=ON -DGPUSCHED_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target unit_tests
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -L unit

test: format-check unit asan
	@echo "make test: format check, unit and integration tests, ASan+UBSan unit tests all passed"

bench: build
	@bash bench/run_placement_bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
