#!/usr/bin/env bash
# Issue 4's README rows: PRA with the untrained SmolLM2 backbone as reward agent, always- and
# never-search, embedded CPU recipe (B=2, b=2, 3 steps, two passages per search), first 50 medmcqa-eval.
set -u
cd "$(dirname "$0")/../.."
for search in always never; do
  .venv/bin/pra eval --recipe pra-cpu --limit 50 --search $search \
    --out runs/medmcqa50/smollm2-135m-instruct/pra-untrained-$search > runs/medmcqa50-pra-$search.log 2>&1
done
