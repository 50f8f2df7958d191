#!/usr/bin/env bash
# The whole GPU job inside one device call of at most 10 minutes: job.sh's stages ($STAGES; by default
#   install -> collect -> train -> plan -> suite) under one deadline, then everything they wrote bundled
#   into one file (the device tool brings back at most 8 files).
#
#   bash scripts/gpu/lease.sh RESULTS_DIR      (on the GPU machine, after the earlier parts were unpacked)
#
# The stages' budgets are job.sh's variables (COLLECT_SECONDS, EPOCHS, SUITE_SECONDS, ...). A stage that
# fails does not stop the ones that do not need it: the suite runs the plans carried from the CPU
# machine even when the train or plan stage fails. DEADLINE_S bounds the whole job, so that the bundle
# is written before the call's limit.
set -uo pipefail
RESULTS=${1:?usage: lease.sh RESULTS_DIR}
export OUT=${WORK_OUT:-/tmp/gpuout}
mkdir -p "$OUT" "$RESULTS"
export PROFILE=${PROFILE:-$(bash scripts/gpu/job.sh profile)}
start=$(date +%s)
# STAGES: job.sh's stages in order (the first run's: install, collect, train, plan, suite; with the
# committed h200 model a later lease can skip train and plan and carry every searcher's plans instead).
# `install` failing ends the job; `plan` runs only after `train` succeeded when both are listed.
export STAGES=${STAGES:-install collect train plan suite}
timeout "${DEADLINE_S:-550}" bash -c '
  set -uo pipefail
  trained=1
  for stage in $STAGES; do
    case $stage in
      install) bash scripts/gpu/job.sh install || exit 3 ;;
      train) bash scripts/gpu/job.sh train || trained=0 ;;
      plan) [ "$trained" = 1 ] && bash scripts/gpu/job.sh plan ;;
      *) bash scripts/gpu/job.sh "$stage" ;;
    esac
  done
' > "$OUT/log.txt" 2>&1
rc=$?
echo "job rc $rc after $(( $(date +%s) - start )) s on $PROFILE" >> "$OUT/log.txt"
for f in compute.parquet compute-large.parquet compute-ranks.parquet compute-batch-parts.parquet; do  # collected, even if cut short
  cp "${STATE:-/tmp/shardplan-gpu}/$f" "$OUT/" 2>/dev/null
done
tar -czf "$RESULTS/gpu-results.tgz" -C "$OUT" .
# the log without progress bars, for the call's output
tr '\r' '\n' < "$OUT/log.txt" | grep -v -E '[0-9]+it/s|s/it|it \[' | tail -60
exit $rc
