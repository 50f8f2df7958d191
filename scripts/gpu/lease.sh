#!/usr/bin/env bash
# The whole GPU job inside one device call of at most 10 minutes:
#   install -> collect -> train -> plan -> suite, under one deadline, then everything it wrote bundled
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
export PROFILE=${PROFILE:-$(python3 -c "import torch; print('h200' if 'H200' in torch.cuda.get_device_name(0) else 'h100')")}
start=$(date +%s)
timeout "${DEADLINE_S:-550}" bash -c '
  set -uo pipefail
  job() { bash scripts/gpu/job.sh "$@"; }
  if [ "${INSTALL:-1}" = 1 ]; then job install || exit 3; fi
  job collect
  job train && job plan
  job suite
' > "$OUT/log.txt" 2>&1
rc=$?
echo "job rc $rc after $(( $(date +%s) - start )) s on $PROFILE" >> "$OUT/log.txt"
cp "${STATE:-/tmp/shardplan-gpu}/compute.parquet" "$OUT/" 2>/dev/null  # what was collected, even if cut short
tar -czf "$RESULTS/gpu-results.tgz" -C "$OUT" .
# the log without progress bars, for the call's output
tr '\r' '\n' < "$OUT/log.txt" | grep -v -E '[0-9]+it/s|s/it|it \[' | tail -60
exit $rc
