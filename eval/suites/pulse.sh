#!/usr/bin/env bash
# PULSE (issue 6): the README's detection, ablation and decoding tables, on one CPU core.
# Every step resumes (labels, features, eval records are append-only JSONL): rerun to finish.
#   bash eval/suites/pulse.sh                       # SmolLM2-135M: detection tables and decoding
#   POLICY=gemma3-270m bash eval/suites/pulse.sh    # Gemma-3-270M: its own traces, labels, probes
#
# A probe reads the hidden states of the model that wrote the steps, so each backbone gets its own
# traces: SmolLM2 trains on TRAIN (default runs/labels-cpu: `pra label --recipe cpu`, 300 medmcqa-train questions);
# Gemma's training traces are labelled here (rollout teacher only, fewer questions: it runs at half
# SmolLM2's speed). Detection steps on evaluation sets are labelled with `pra probe label`, which marks
# them "purpose: detection": the probe never trains on them.
#
# Label: the issue's error is a step the teacher judged incorrect (LABEL=judge). SmolLM2 as judge
# judges no step incorrect (0 of the first 296 steps of runs/labels-cpu), so the CPU tables use the
# rollout teacher (a step whose 4 rollouts mostly miss the gold answer); LABEL=judge with a real judge.
# LABEL=goldprob: a step that did not raise SmolLM2's permutation-averaged gold probability, trained on
# the default agent's labels (runs/labels-goldprob: `pra label --recipe cpu-goldprob`); its held-out
# steps are labelled by the same teacher, and the run stops after the detection table.
set -eu
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
POLICY=${POLICY:-smollm2-135m-instruct}
LABEL=${LABEL:-rollout}
RECIPE=cpu
pra() { .venv/bin/pra "$@"; }
case $POLICY in
  smollm2-135m-instruct)        # 30 blocks; default interval 15:27
    OUT=runs/pulse; TRAIN=${TRAIN:-runs/labels-cpu/labels.jsonl}; N=${N:-100}; TEACHERS=judge,rollout
    EARLY=5:15; LATE=20:30
    if [ $LABEL = goldprob ]; then
      OUT=runs/pulse/goldprob; TRAIN=runs/labels-goldprob/labels.jsonl; TEACHERS=goldprob; RECIPE=cpu-goldprob
    fi ;;
  gemma3-270m)                  # 18 blocks; default interval 9:16
    OUT=runs/pulse/gemma3-270m; TRAIN=$OUT/labels-train/labels.jsonl; N=${N:-50}; TEACHERS=rollout
    EARLY=3:9; LATE=12:18
    mkdir -p $OUT
    pra label --recipe cpu --policy $POLICY --teachers rollout --limit ${N_TRAIN:-100} \
      --out $OUT/labels-train > $OUT/label-train.log 2>&1 ;;
  *) echo "POLICY: smollm2-135m-instruct or gemma3-270m" >&2; exit 2 ;;
esac
mkdir -p $OUT

# 1. Held-out steps: the policy's traces and labels on evaluation sets, in distribution (medmcqa-eval)
#    and out of it (mmlu-med), ~2-5 s per step.
for B in medmcqa-eval mmlu-med; do
  pra probe label --recipe $RECIPE --policy $POLICY --teachers $TEACHERS --benchmark $B --limit $N \
    --out $OUT/labels-$B > $OUT/label-$B.log 2>&1
done

# 2. Step features (hidden-state trajectories at every layer, token statistics): ~0.1 s per step.
pra probe features --policy $POLICY --labels $TRAIN --out $OUT/features-train.jsonl
for B in medmcqa-eval mmlu-med; do
  pra probe features --policy $POLICY --labels $OUT/labels-$B/labels.jsonl --out $OUT/features-$B.jsonl
done
TESTS="--test medmcqa-eval=$OUT/features-medmcqa-eval.jsonl --test mmlu-med=$OUT/features-mmlu-med.jsonl"

# 3. Probes: the default (the backbone's interval, last token, angle + magnitude), feature ablations,
#    three layer intervals, mean pooling. Seconds each.
train() { name=$1; shift; pra probe train --features $OUT/features-train.jsonl --label $LABEL --out $OUT/probe-$name.pt "$@"; }
train main
train angle --parts angle
train magnitude --parts magnitude
train early --layers $EARLY
train late --layers $LATE
train mean --pooling mean

# 4. Detection: AUROC, PR-AUC, F1 at the validation (Youden) threshold; baselines with the main probe.
rm -f $OUT/detection.jsonl
pra probe eval --probe $OUT/probe-main.pt --train-features $OUT/features-train.jsonl $TESTS --results $OUT/detection.jsonl
for name in angle magnitude early late mean; do
  pra probe eval --probe $OUT/probe-$name.pt --train-features $OUT/features-train.jsonl $TESTS \
    --results $OUT/detection.jsonl --no-baselines
done
pra probe table $OUT/detection.jsonl > $OUT/detection.md
cat $OUT/detection.md
[ $POLICY = smollm2-135m-instruct ] && [ $LABEL != goldprob ] || exit 0

# 5. Decoding on the permuted grid's sample (200 medmcqa-eval questions, one balanced rotation each:
#    chance exactly 1/4): PULSE (front, step), IRCoT, and PRA beam search with PULSE deciding when to
#    search (the shipped reward agent scores), each paired with the grid's cot-balanced run.
run() { out=$1; shift; pra eval --benchmark medmcqa-eval --policy $POLICY "$@" --sample 200 --seed 0 --permute balanced --out $OUT/$out > $OUT/$out.log 2>&1; }
run pulse-front --method pulse-front --search pulse:$OUT/probe-main.pt
run pulse-step --method pulse-step --search pulse:$OUT/probe-main.pt
run ircot --method ircot
run pra-pulse --recipe pra-cpu --search pulse:$OUT/probe-main.pt
GRID=eval/results/permuted/smollm2/medmcqa
pra compare $GRID/cot-balanced $OUT/pulse-front $OUT/pulse-step $OUT/ircot $GRID/pra-goldprob-always \
  $GRID/pra-goldprob-never $OUT/pra-pulse > $OUT/decoding.md
cat $OUT/decoding.md
