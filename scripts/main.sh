#!/usr/bin/env bash
# The main job on the bundled default task: plan it with the default searcher and show the plan
# and its per-rank cost, predicted by the committed model and measured on real FBGEMM kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/shardplan run data/tasks/default.json -o out/default-plan.json "$@"
