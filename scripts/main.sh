#!/usr/bin/env bash
# The main job on the bundled default task: plan it with the default searcher and show the plan
# and its per-rank cost, predicted by the committed model and measured on real FBGEMM kernels.
# --calibrate: each rank is timed beside stored ranks like it and put on the cost labels' host, so
# the measured column means the same on a busy machine as on a quiet one (a minute; without it,
# one reference divisor for the whole call, which a drifting host gets wrong by 20-30% per rank).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/shardplan run data/tasks/default.json -o out/default-plan.json --calibrate "$@"
