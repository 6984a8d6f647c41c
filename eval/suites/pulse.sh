#!/usr/bin/env bash
# PULSE (issue 6): the README's detection and decoding tables on SmolLM2-135M, on one CPU core.
# Every step resumes (labels, features, eval records are append-only JSONL): rerun to finish.
#
# Needs runs/labels-cpu/labels.jsonl from `pra label --recipe cpu` (training steps, medmcqa-train).
# Detection steps on evaluation sets are labelled with `pra probe label`, which marks them
# "purpose: detection": the probe never trains on them.
#
# Label: the issue's error is a step the teacher judged incorrect (LABEL=judge). SmolLM2 as judge
# judges no step incorrect (0 of the first 296 steps of runs/labels-cpu), so the CPU tables use the
# rollout teacher (a step whose 4 rollouts mostly miss the gold answer); LABEL=judge with a real judge.
set -eu
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
P=smollm2-135m-instruct
LABEL=${LABEL:-rollout}
OUT=runs/pulse
N=${N:-100}          # evaluation questions per detection set / decoding run
mkdir -p $OUT
pra() { .venv/bin/pra "$@"; }

# 1. Held-out steps: traces and labels on evaluation sets (in and out of distribution), ~6 s per step.
for B in medmcqa-eval mmlu-med; do
  pra probe label --recipe cpu --benchmark $B --limit $N --out $OUT/labels-$B > $OUT/label-$B.log 2>&1
done

# 2. Step features (hidden-state trajectories at every layer, token statistics): ~0.1 s per step.
pra probe features --policy $P --labels runs/labels-cpu/labels.jsonl --out $OUT/features-train.jsonl
for B in medmcqa-eval mmlu-med; do
  pra probe features --policy $P --labels $OUT/labels-$B/labels.jsonl --out $OUT/features-$B.jsonl
done
TESTS="--test medmcqa-eval=$OUT/features-medmcqa-eval.jsonl --test mmlu-med=$OUT/features-mmlu-med.jsonl"

# 3. Probes: the default (layers 15:27, last token, angle + magnitude), feature ablations, three
#    layer intervals, mean pooling. Seconds each.
train() { name=$1; shift; pra probe train --features $OUT/features-train.jsonl --label $LABEL --out $OUT/probe-$name.pt "$@"; }
train main
train angle --parts angle
train magnitude --parts magnitude
train early --layers 5:15
train late --layers 20:30
train mean --pooling mean

# 4. Detection: AUROC, PR-AUC, F1 at the validation (Youden) threshold; baselines with the main probe.
pra probe eval --probe $OUT/probe-main.pt --train-features $OUT/features-train.jsonl $TESTS --results $OUT/detection.jsonl
for name in angle magnitude early late mean; do
  pra probe eval --probe $OUT/probe-$name.pt --train-features $OUT/features-train.jsonl $TESTS \
    --results $OUT/detection.jsonl --no-baselines
done
pra probe table $OUT/detection.jsonl > $OUT/detection.md

# 5. Decoding on medmcqa-eval: PULSE (front, step), IRCoT, and PRA beam search with PULSE deciding
#    when to search (the shipped reward agent scores), next to CoT from the main grid.
run() { out=$1; shift; pra eval --benchmark medmcqa-eval --policy $P "$@" --out $OUT/$out > $OUT/$out.log 2>&1; }
run pulse-front --method pulse-front --search pulse:$OUT/probe-main.pt --limit $N
run pulse-step --method pulse-step --search pulse:$OUT/probe-main.pt --limit $N
run ircot --method ircot --limit $N
run pra-pulse --recipe pra-cpu --search pulse:$OUT/probe-main.pt --limit 50
.venv/bin/python -m eval.summarize runs/medmcqa100/$P/cot $OUT/pulse-front $OUT/pulse-step $OUT/ircot \
  --first $N > $OUT/decoding.md
.venv/bin/python -m eval.summarize runs/medmcqa50/$P/pra-untrained-always runs/medmcqa50/$P/pra-untrained-never \
  $OUT/pra-pulse --first 50 >> $OUT/decoding.md
cat $OUT/detection.md $OUT/decoding.md
