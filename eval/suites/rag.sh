#!/usr/bin/env bash
# Issue 3's README rows: RAG and RAG+SC (k=4) for SmolLM2 on the same first 100 medmcqa-eval questions.
set -u
cd "$(dirname "$0")/../.."
for method in rag rag-sc; do
  .venv/bin/pra eval --benchmark medmcqa-eval --method $method --policy smollm2-135m-instruct --limit 100 \
    --samples 4 --rag-docs 3 --out runs/medmcqa100/smollm2-135m-instruct/$method > runs/medmcqa100-$method.log 2>&1
done
