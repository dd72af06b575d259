# The two commands a newcomer needs: `make demo` and `make test`.
# Both install missing Debian packages first (scripts/install-deps.sh).
MAKEFLAGS += --no-print-directory
BUILD  ?= build
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE  ?= cmake
TRACES  = data/traces/resnet50_fp32.trace.csv.gz data/traces/gpt2_bf16_b16.trace.csv.gz \
          data/traces/gpt2m_generate.trace.csv.gz data/traces/leak_mlp.trace.csv.gz

.PHONY: all deps test-deps build demo test test-plain test-asan test-tsan bench format clean

all: build

deps:
	@sh scripts/install-deps.sh

build: deps
	@$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

demo: build
	@sh scripts/demo.sh $(BUILD)/bin/vram $(TRACES)

test: test-plain test-asan test-tsan

test-deps:
	@sh scripts/install-deps.sh --test

test-plain: test-deps build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	@$(CMAKE) -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DVRAM_SANITIZE=address >/dev/null
	@$(CMAKE) --build $(BUILD)-asan -j $(JOBS)
	@cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) -LE slow

test-tsan: deps
	@$(CMAKE) -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=Debug -DVRAM_SANITIZE=thread >/dev/null
	@$(CMAKE) --build $(BUILD)-tsan -j $(JOBS)
	@cd $(BUILD)-tsan && ctest --output-on-failure -j $(JOBS) -L threads

bench: build
	@sh scripts/bench.sh $(BUILD)/bin/vram $(TRACES)
	@$(BUILD)/tests/preload/bench_startup $(BUILD)/lib/libvram-preload.so \
	    $$(ls /usr/lib/*/libz.so.1 | head -n 1) 2000

format:
	@clang-format -i include/*.h src/*/*.[ch] tools/*/*.[ch] tests/*/*.[ch]

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
