# gpusched — build, run and test. `make run` and `make test` work on a fresh
# Debian 12 machine: both install missing packages first.
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
# Seconds each fuzz target runs: `make fuzz` (FUZZ_SECONDS=3600 for an
# hour each) and the smoke run of `make test`.
FUZZ_SECONDS ?= 300
FUZZ_SMOKE_SECONDS ?= 20
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

SOURCES = $(shell git ls-files -co --exclude-standard -- '*.h' '*.cc' 2>/dev/null)

.PHONY: all deps configure build run demo ha-demo test unit format format-check asan asan-build fuzz fuzz-smoke tsan bench clean

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

# A local HA installation: 3-member etcd, three instances, HAProxy in front,
# and traffic; kill an instance and watch (docs/ha.md). Ctrl-C stops it all.
ha-demo: build
	@bash scripts/ha-demo.sh $(BUILD)

unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

format:
	clang-format -i $(SOURCES)

format-check: deps
	@bad=$$(for f in $(SOURCES); do clang-format --dry-run --Werror $$f >/dev/null 2>&1 || echo $$f; done); \
	if [ -n "$$bad" ]; then echo "format-check: not clang-formatted (run 'make format'):"; echo "$$bad"; exit 1; fi; \
	echo "format-check: ok"

# The sanitizer builds use clang (libFuzzer; TSan), -O0 with line tables
# (half the compile time of -O1; the suite must stay under 45 minutes).
SAN_CMAKE = -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	-DGPUSCHED_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug \
	-DCMAKE_CXX_FLAGS_DEBUG="-O0 -gline-tables-only" $(CMAKE_ARGS)

# ASan + UBSan build of the unit tests and the fuzz targets (fuzz/).
asan-build: deps
	cmake -S . -B $(ASAN_BUILD) $(SAN_CMAKE) -DGPUSCHED_SANITIZE=ON -DGPUSCHED_FUZZ=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target unit_tests fuzzers

asan: asan-build
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -L unit

# Every fuzz target for FUZZ_SECONDS; a crash fails and leaves the input in
# $(ASAN_BUILD)/fuzz-artifacts/ (fuzz/README.md).
fuzz: asan-build
	cd $(ASAN_BUILD) && FUZZ_SECONDS=$(FUZZ_SECONDS) ctest --output-on-failure -j $(JOBS) -L fuzz

fuzz-smoke: asan-build
	cd $(ASAN_BUILD) && FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) ctest --output-on-failure -j $(JOBS) -L fuzz

# ThreadSanitizer build of the tests of everything with threads (label
# "threads"): zero reports, or the test fails.
tsan: deps
	cmake -S . -B $(TSAN_BUILD) $(SAN_CMAKE) -DGPUSCHED_TSAN=ON
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target thread_tests
	cd $(TSAN_BUILD) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure -j $(JOBS) -L threads

test: format-check unit asan fuzz-smoke tsan
	@echo "make test: format check, unit and integration tests, ASan+UBSan unit tests, fuzz smoke, TSan tests all passed"

bench: build
	@bash bench/run_placement_bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
