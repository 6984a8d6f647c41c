#!/usr/bin/env bash
# Issue 2's README table: direct, cot, sc(k=4) for both embedded policies on the first 100 medmcqa-eval.
set -u
cd "$(dirname "$0")/../.."
for policy in smollm2-135m-instruct gemma3-270m; do
  for method in direct cot sc; do
    .venv/bin/pra eval --benchmark medmcqa-eval --method $method --policy $policy --limit 100 \
      --samples 4 --out runs/medmcqa100/$policy/$method > runs/medmcqa100-$policy-$method.log 2>&1
  done
done
