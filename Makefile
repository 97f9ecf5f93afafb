# kvserve developer entry points. `make run` and `make test` work on a fresh Debian machine:
# they install missing packages (scripts/install-deps.sh), configure, build, then serve/test.
JOBS ?= $(shell nproc)
MODEL ?= ../shared/models/stories260K.gguf
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))

.PHONY: all deps configure build test run story bench asan tsan clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

HOST ?= 127.0.0.1
PORT ?= 8080

# Serves the default model on 127.0.0.1:8080 (the server prints a curl example when ready).
run: build
	./$(BUILD_DIR)/bin/kvserve serve -m $(MODEL) --host $(HOST) --port $(PORT)

# Tells a story on stdout, no server.
story: build
	./$(BUILD_DIR)/bin/kvserve generate -m $(MODEL) -p "Once upon a time" -n 200 --echo

bench: build
	./$(BUILD_DIR)/bin/kvserve bench -m $(MODEL)

# Sanitizer build + tests (AddressSanitizer + UBSan).
asan:
	@$(MAKE) test PRESET=asan

# ThreadSanitizer build + tests (races between the engine, HTTP and pool threads; tests/tsan.supp).
tsan:
	@$(MAKE) test PRESET=tsan

clean:
	rm -rf build build-debug build-asan build-tsan
