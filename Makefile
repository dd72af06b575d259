# SPDX-License-Identifier: MIT
# The two commands a newcomer needs: `make demo` and `make test`. Both
# install missing Debian packages first (scripts/install-deps.sh); `make
# demo` only those the build needs.
#
#   make install [PREFIX=/usr/local] [DESTDIR=]   build and install (cmake/Install.cmake)
#   make uninstall [DESTDIR=]                     remove what `make install` installed
#   make package                                  build-package/packages/*_<version>_<arch>.deb
#   make fuzz [FUZZ_SECONDS=300]                  each libFuzzer target that long (docs/INTERNALS.md)
MAKEFLAGS += --no-print-directory
BUILD  ?= build
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE  ?= cmake
FUZZ_SECONDS ?= 300
PREFIX ?= /usr/local
DESTDIR ?=
TRACES  = data/traces/resnet50_fp32.trace.csv.gz data/traces/gpt2_bf16_b16.trace.csv.gz \
          data/traces/gpt2m_generate.trace.csv.gz data/traces/leak_mlp.trace.csv.gz

.PHONY: all deps test-deps package-deps build demo test test-plain test-asan test-tsan \
        install uninstall package bench fuzz fuzz-deps format clean

all: build

deps:
	@sh scripts/install-deps.sh

# The install prefix is compiled into the Slurm plug-in (its default
# preload=) and decides the library directory, so it is a build setting.
build: deps
	@$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

demo: build
	@sh scripts/demo.sh $(BUILD)/bin/vram $(TRACES)

# The three runs one after the other, each timed; the times are printed at
# the end, also when one fails (the ones that ran).
test:
	@t0=$$(date +%s); rc=0; \
	$(MAKE) test-plain || rc=1; t1=$$(date +%s); \
	if [ $$rc -eq 0 ]; then $(MAKE) test-asan || rc=1; fi; t2=$$(date +%s); \
	if [ $$rc -eq 0 ]; then $(MAKE) test-tsan || rc=1; fi; t3=$$(date +%s); \
	echo "make test: plain $$((t1 - t0)) s, ASan+UBSan $$((t2 - t1)) s, TSan $$((t3 - t2)) s," \
	     "$$((t3 - t0)) s in all$$( [ $$rc -eq 0 ] || echo '; FAILED' )"; \
	exit $$rc

test-deps:
	@sh scripts/install-deps.sh --test

package-deps:
	@sh scripts/install-deps.sh --package

fuzz-deps:
	@sh scripts/install-deps.sh --fuzz

# The fuzz targets built with clang's libFuzzer (ASan+UBSan) in $(BUILD)-fuzz,
# each run FUZZ_SECONDS from its corpus (tests/fuzz/run_fuzzers.sh); what
# they find is kept in $(BUILD)-fuzz/corpus and artifacts.
fuzz: fuzz-deps
	@sh tests/fuzz/run_fuzzers.sh "$(CURDIR)" "$(CURDIR)/$(BUILD)-fuzz" $(FUZZ_SECONDS)

# Built for /usr, as the Debian package is: the install test (label
# "install") packages this build and installs the package.
test-plain: test-deps
	@$(MAKE) build PREFIX=/usr
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	@$(CMAKE) -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DVRAM_SANITIZE=address >/dev/null
	@$(CMAKE) --build $(BUILD)-asan -j $(JOBS)
	@cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) -LE slow

test-tsan: deps
	@$(CMAKE) -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=Debug -DVRAM_SANITIZE=thread >/dev/null
	@$(CMAKE) --build $(BUILD)-tsan -j $(JOBS)
	@cd $(BUILD)-tsan && ctest --output-on-failure -j $(JOBS) -L threads

# DESTDIR stages the files elsewhere (for packagers); without it, as root,
# ldconfig makes the new libvram.so.0 known to the dynamic linker.
install: build
	@DESTDIR="$(DESTDIR)" $(CMAKE) --install $(BUILD)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then ldconfig; fi

uninstall:
	@test -f $(BUILD)/install_manifest.txt || { echo "vram: nothing installed from $(BUILD)" >&2; exit 1; }
	@sed 's|^|$(DESTDIR)|' $(BUILD)/install_manifest.txt | xargs -d '\n' rm -f --
	@if [ "$$(id -u)" -eq 0 ]; then ldconfig; fi

# A build of its own under /usr, with the man pages and the Slurm plug-in
# required, so that the packages are complete whatever the main build has,
# and with Debian's build flags (dpkg-buildflags, every hardening option:
# stack protector, _FORTIFY_SOURCE, relro and bind-now) as a Debian
# package is built. The packages: cmake/Package.cmake.
package: package-deps
	@DEB_BUILD_MAINT_OPTIONS=hardening=+all; export DEB_BUILD_MAINT_OPTIONS; \
	CFLAGS="$$(dpkg-buildflags --get CFLAGS) $$(dpkg-buildflags --get CPPFLAGS)" \
	LDFLAGS="$$(dpkg-buildflags --get LDFLAGS)" \
	$(CMAKE) -S . -B $(BUILD)-package -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_INSTALL_PREFIX=/usr -DVRAM_MAN=ON -DVRAM_REQUIRE_SLURM=ON >/dev/null
	@$(CMAKE) --build $(BUILD)-package -j $(JOBS)
	@$(CMAKE) --build $(BUILD)-package --target deb

# Every timing: replay speed, the allocator's host-time targets, the
# preload library's start-up and hook costs, the monitor, the exporter under
# hostile local users. Measured and printed, never part of `make test`.
bench: build
	@sh scripts/bench.sh $(BUILD)/bin/vram $(TRACES)
	@sh tests/cli/check_targets.sh --timing $(BUILD)/bin/vram . || true
	@$(BUILD)/tests/preload/bench_startup $(BUILD)/lib/libvram-preload.so.0 \
	    $$(ls /usr/lib/*/libz.so.1 | head -n 1) 2000
	@sh scripts/bench_hooks.sh $(BUILD) || true
	@$(BUILD)/tests/bench_monitor $(BUILD)/bin/vram
	@sh scripts/bench_exporter.sh $(BUILD)/bin/vram || true

format:
	@clang-format -i include/*.h src/*/*.[ch] tools/*/*.[ch] tests/*/*.[ch]

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-package $(BUILD)-fuzz
