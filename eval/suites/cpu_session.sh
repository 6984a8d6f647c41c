#!/usr/bin/env bash
# The README's measured tables: two queues, one per policy, each on one core (two processes with two
# threads each on two shared cores stall each other). Every run resumes: rerun this script to finish.
set -u
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
run() { out=$1; shift; .venv/bin/pra eval --benchmark medmcqa-eval "$@" --out runs/$out > runs/$(echo $out | tr / -).log 2>&1; }
P=smollm2-135m-instruct
G=gemma3-270m
(
run medmcqa100/$P/direct --method direct --policy $P --limit 100
run medmcqa100/$P/cot --method cot --policy $P --limit 100
run medmcqa50/$P/pra-untrained-always --recipe pra-cpu --limit 50 --search always
run medmcqa50/$P/pra-untrained-never --recipe pra-cpu --limit 50 --search never
run medmcqa100/$P/sc --method sc --samples 4 --policy $P --limit 100
run medmcqa100/$P/rag --method rag --rag-docs 3 --policy $P --limit 100
run medmcqa100/$P/rag-sc --method rag-sc --samples 4 --rag-docs 3 --policy $P --limit 100
) &
(
run medmcqa100/$G/direct --method direct --policy $G --limit 100
run medmcqa100/$G/cot --method cot --policy $G --limit 100
run medmcqa100/$G/sc --method sc --samples 4 --policy $G --limit 100
) &
wait
