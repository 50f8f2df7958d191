#!/usr/bin/env bash
# Issue 2's last bar on a host fit to measure: TorchRec's plans of an unseen suite, every rank timed beside
# labelled stored ranks like it (neighbour calibration) in RUNS independent runs, then pooled: the committed
# model, and each candidate named in $CANDIDATES, against each rank's median over the runs.
#
#   bash scripts/unseen-check.sh PROFILE SUITE [RUNS]       e.g. cpu-2c-xeon data/tasks/unseen-d 2
#
# Run it on the host of PROFILE's labels (`shardplan profiles --probe` says whether this one runs them as
# labelled) and nothing else meanwhile: the two cores are the instrument. Each run waits up to $WAIT_FIT
# minutes (default 30) before each task for the host to reproduce its labels in $FIT_STREAK probes in a row
# (default 2: a spell, not a blip), probes again after the task and measures it again where the host did not
# stay fit through it, and exits 3 when it does not come (nothing of that run is pooled yet). The tasks it
# measured are kept (bench/plan_accuracy.py resumes):
# the same call with STAMP set to the stopped run's stamp (its file name's YYYYMMDDTHHMM) goes on from them,
# and keeps a run that was whole.
# A stopped gated run's partial file (bench/results/*.partial.json, git-ignored) is worth committing with
# `git add -f`: on a guest seldom fit (a tenth of the probes, 2026-11-29) its tasks are scarce, and a clone on
# another machine resumes from it.
# The gate assumes a host fit in spells. On one whose fit probes are chance blips (the cpu-2c-nested guest on
# 2026-12-01: a probe 8 s after a fit one passed 12% of the time, any probe 11%) it starts almost nothing and
# selects nothing: ten minutes of bench/probe_bracket.py first says which kind of host this is.
# FIRST (comma-separated task names, e.g. unseen-d-14,unseen-d-23): measured in every run before any run
# measures the rest (plan_accuracy.py --tasks), so the ranks an earlier pool missed are timed thrice first.
# About 25 minutes a run of `unseen-d` on the Xeon; every run's results file stays under bench/results/ with
# the machine's state in it.
#
# CANDIDATES (default: the banded candidates of session 40 and the committed model's nearest rivals):
# folders under data/profiles/PROFILE/candidates/ to score on the same runs, and then, with the committed
# model, on every committed gated run of the suite pooled (bench/unseen_score.py; runs named `-gated-calibrated-`).
#
# MISSES: plan ranks "TASK_FILE:RANK,RANK" then timed again in turns beside their calibration neighbours
# (bench/rank_drift.py --neighbours 6): on cpu-2c-xeon by default the committed model's four unseen-c misses
# and unseen-a-07 rank 2, which every banded candidate misses (docs/cost-model.md, "The set context's bound").
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:?usage: unseen-check.sh PROFILE SUITE [RUNS]}
suite=${2:?usage: unseen-check.sh PROFILE SUITE [RUNS]}
runs=${3:-2}
name=$(basename "$suite")
stamp=${STAMP:-$(date -u +%Y%m%dT%H%M)}
.venv/bin/shardplan profiles --probe | tail -2
measure() {  # measure RUN [plan_accuracy.py options...]: one gated, calibrated run (resumed where it stopped)
  # one core for the timing, the allocator kept from returning memory mid-timing (the labels' protocol)
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \
    .venv/bin/python bench/plan_accuracy.py --suite "$suite" --profile "$profile" --rounds 2 --visits 4 \
      --calibrate --wait-fit "${WAIT_FIT:-30}" --fit-streak "${FIT_STREAK:-2}" --fit-after --name "$@"
}
# "gated": calibrated against labels that passed the quiet gate only (since session 66); the bar's runs
# before it pooled a neighbour set that could hold failed ones, so the two are pooled apart
run_name() { echo "plan-accuracy-$profile-$name-gated-calibrated-$stamp-$1"; }
if [ -n "${FIRST:-}" ]; then
  for i in $(seq 1 "$runs"); do measure "$(run_name "$i")" --tasks "$FIRST"; done
fi
files=()
done_run() {  # a run whose results are written and that left no partial file is whole: a resumed check skips it
  [ -f "bench/results/$1.csv" ] && [ ! -f "bench/results/$1.partial.json" ]
}
for i in $(seq 1 "$runs"); do
  if done_run "$(run_name "$i")"; then echo "$(run_name "$i"): measured already; kept"
  else measure "$(run_name "$i")"; fi
  files+=("bench/results/$(run_name "$i").csv")
done
.venv/bin/shardplan profiles --probe | tail -2
.venv/bin/python bench/plan_accuracy_runs.py --suite "$suite" --profile "$profile" --measured cal_ms \
  --runs "${files[@]}" --name "plan-accuracy-runs-$profile-$name-cal_ms-${runs}runs-$stamp"
default_candidates="context-totals-banded context-totals-banded-hot-mixes context-totals-banded-crowded-mixes hot-mixes"
models=()
for c in ${CANDIDATES:-$default_candidates}; do
  model="data/profiles/$profile/candidates/$c/compute-model.json"
  [ -f "$model" ] || { echo "no candidate $model; skipped"; continue; }
  models+=("$model")
  .venv/bin/python bench/plan_accuracy_runs.py --suite "$suite" --profile "$profile" --measured cal_ms \
    --runs "${files[@]}" --model "$model" --name "plan-accuracy-runs-$profile-$name-cal_ms-${runs}runs-$stamp-$c"
done
# Every committed gated run of this suite, the new ones among them, pooled per instrument: the committed model
# and the candidates above side by side (bench/unseen_score.py; without --suites, once every suite has gated
# runs, the bar's one count).
.venv/bin/python bench/unseen_score.py --profile "$profile" --name "$profile-$name-$stamp" --models "${models[@]}" \
  --suites "$suite" --runs-glob 'plan-accuracy-{profile}-{suite}-gated-calibrated-*.csv'
xeon_misses="data/tasks/unseen-c/unseen-c-04.json:1,2 data/tasks/unseen-c/unseen-c-05.json:3
  data/tasks/unseen-c/unseen-c-06.json:0 data/tasks/unseen-a/unseen-a-07.json:2"
[ "$profile" = cpu-2c-xeon ] && default_misses=$xeon_misses || default_misses=""
for miss in ${MISSES-$default_misses}; do
  task=${miss%%:*} ranks=${miss##*:}
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \
    .venv/bin/python bench/rank_drift.py --task "$task" --ranks "$ranks" --profile "$profile" --neighbours 6 \
      --name "rank-drift-$(basename "$task" .json)-r${ranks//,/-}-$stamp"
done
