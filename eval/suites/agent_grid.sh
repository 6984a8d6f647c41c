#!/usr/bin/env bash
# Issue 5's grid: the shipped reward agent against the untrained backbone, CoT and SC (k = B x b = 4) on
# the first 50 medmcqa-eval and MedQA questions, for the policy it was trained on (SmolLM2) and an unseen
# one (Gemma-3-270M). Two queues, one per policy, one core each; the most telling runs first. Every run
# resumes: rerun this script to finish the grid. (medmcqa-eval CoT/SC come from cpu_session.sh's first
# 100: `python -m eval.summarize ... --first 50`.)
set -u
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
AGENT=${AGENT:-pra-smollm2-cpu}
run() { out=$1; shift; .venv/bin/pra eval "$@" --limit 50 --out runs/$out > runs/$(echo $out | tr / -).log 2>&1; }
pra() { b=$1 p=$2 name=$3; shift 3; run ${b%-eval}50/$p/$name --benchmark $b --recipe pra-cpu --policy $p "$@"; }
P=smollm2-135m-instruct
G=gemma3-270m
U="--reward-agent $P"          # the untrained backbone as reward agent
(
pra medmcqa-eval $P pra-trained-always --reward-agent $AGENT --search always
pra medqa $P pra-trained-always --reward-agent $AGENT --search always
pra medqa $P pra-untrained-always $U --search always
pra medmcqa-eval $P pra-trained-never --reward-agent $AGENT --search never
pra medqa $P pra-trained-never --reward-agent $AGENT --search never
run medqa50/$P/cot --benchmark medqa --method cot --policy $P
run medqa50/$P/sc --benchmark medqa --method sc --samples 4 --policy $P
) &
(
pra medmcqa-eval $G pra-trained-always --reward-agent $AGENT --search always
pra medmcqa-eval $G pra-untrained-always $U --search always
pra medqa $G pra-trained-always --reward-agent $AGENT --search always
pra medqa $G pra-untrained-always $U --search always
pra medmcqa-eval $G pra-trained-never --reward-agent $AGENT --search never
pra medqa $G pra-trained-never --reward-agent $AGENT --search never
run medqa50/$G/cot --benchmark medqa --method cot --policy $G
run medqa50/$G/sc --benchmark medqa --method sc --samples 4 --policy $G
) &
wait
