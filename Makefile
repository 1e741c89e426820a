# voxd — developer entry points. `make run` and `make test` work on a fresh Debian 12 machine.

BUILD_DIR ?= build
ASAN_BUILD_DIR ?= build-asan
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VOICE ?= voices/en-slt
# What `make run` serves: VOICE and the other bundled voices.
SERVE_VOICES ?= $(VOICE) $(filter-out $(VOICE),voices/en-slt voices/en-demo voices/zh-demo)
TEXT ?= Hello from voxd. This voice was taught by a voice built from a real person's recordings, and it runs on your CPU.

# What tools/mandarin_lexicon.py builds data/zh from (a test checks the data is what it builds);
# defined before DEB_PACKAGES, whose := expands it where it is written.
ZH_DATA_PACKAGES := python3-jieba golang-github-mozillazg-go-pinyin-dev rime-data-terra-pinyin \
	rime-data-luna-pinyin opencc

DEB_PACKAGES := build-essential cmake pkg-config git \
	libopenblas-dev libespeak-ng-dev espeak-ng-data libsndfile1-dev libicu-dev \
	nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev \
	libbenchmark-dev python3 python3-numpy python3-torch python3-yaml sox libcpp-httplib-dev \
	libboost1.81-dev libavcodec-dev libavutil-dev ffmpeg liblzma-dev libkissfft-dev \
	libopencc-dev chromium fonts-wqy-microhei libsoxr-dev festival festvox-us-slt-hts \
	$(ZH_DATA_PACKAGES)

HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: all deps build test test-asan run hello bench format clean zh-data

all: build

# Installs only when a package is missing, so every target can depend on it cheaply. Node.js and
# npm (for the OpenAI SDK test) come from Debian unless a node with npm is already installed
# (another distribution's nodejs conflicts with Debian's npm).
deps:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	  echo "installing Debian packages: nodejs npm"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm; \
	fi
	@if dpkg-query -W -f='$${Status}\n' $(DEB_PACKAGES) 2>/dev/null | grep -qv 'install ok installed' \
	    || ! dpkg-query -W $(DEB_PACKAGES) >/dev/null 2>&1; then \
	  echo "installing Debian packages: $(DEB_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(DEB_PACKAGES); \
	fi

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# GPU tests (ctest label "gpu") run only on the GPU machine, through scripts/gpu-pack.sh here
# and scripts/gpu-check.py there.
test: build
	cd $(BUILD_DIR) && ctest -LE gpu --output-on-failure -j $(JOBS)

# The C++ under AddressSanitizer and UndefinedBehaviorSanitizer: no CUDA backend (its tests need
# a GPU; `make test` builds and plans it), no Python-only tests (label python) and no browser
# test (label browser): `make test` runs those.
test-asan: deps
	cmake -S . -B $(ASAN_BUILD_DIR) -DCMAKE_BUILD_TYPE=Debug -DVOXD_SANITIZE=ON -DVOXD_BUILD_BENCH=OFF \
	  -DVOXD_CUDA=OFF
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && ctest -LE 'gpu|python|browser' --output-on-failure -j $(JOBS)

# Serves $(SERVE_VOICES) on http://$(HOST):$(PORT) (on the GPU when there is one, else the CPU)
# until Ctrl-C; `voxd serve --help` and docs/server.md list the settings.
run: build
	@echo "voxd serve on http://$(HOST):$(PORT): open it in a browser, or try (in another terminal):"
	@echo "  curl -sS http://$(HOST):$(PORT)/v1/audio/speech -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\": \"tts-1\", \"input\": \"Hello from voxd.\", \"voice\": \"$(notdir $(VOICE))\", \"response_format\": \"wav\"}' -o hello.wav"
	@echo "  curl -sS http://$(HOST):$(PORT)/v1/audio/speech -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\": \"tts-1\", \"input\": \"今天天气真好。\", \"voice\": \"zh-demo\", \"response_format\": \"wav\"}' -o nihao.wav"
	@echo "  $(BUILD_DIR)/src/cli/voxd monitor --url http://$(HOST):$(PORT)"
	$(BUILD_DIR)/src/cli/voxd serve $(foreach voice,$(SERVE_VOICES),--voice $(voice)) --host $(HOST) --port $(PORT)

# Speaks a sentence with $(VOICE) to out/hello.wav, no server.
hello: build
	@mkdir -p out
	$(BUILD_DIR)/src/cli/voxd --log-level info synth --voice $(VOICE) --text "$(TEXT)" --out out/hello.wav
	@echo "wrote out/hello.wav"

bench: build
	$(BUILD_DIR)/bench/voxd_bench --voice $(VOICE)

# Rebuilds the Mandarin lexicon (data/zh) from the Debian packages it is made of.
zh-data: deps
	/usr/bin/python3 tools/mandarin_lexicon.py --out data/zh

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu')

clean:
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR)
