#!/usr/bin/env bash
# The whole GPU job, run on the lent GPU machine from the repository root, in stages so that each
# device call stays under its time limit:  bash scripts/gpu/job.sh install collect suite
#
# Carried in (prepared on CPU first; see data/profiles/README.md):
#   build/fbgemm-parts/part-*.tar.xz   fbgemm-gpu 1.6.0 in parts (scripts/gpu/fbgemm_parts.py pack)
#   build/wheels-gpu/*.whl             pydantic and its deps (the GPU image lacks them): pip download there
#   build/gpu-plans/*.json             the suite's plans (python bench/gpu_suite.py plan --profile <gpu>)
# Everything it writes goes to $OUT (default out/gpu): the fbgemm check, GPU identity, compute.parquet,
# the suite's results.
set -euo pipefail
OUT=${OUT:-out/gpu}
TARGET=${FBGEMM_TARGET:-/tmp/fbgemm}
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$TARGET${PYTHONPATH:+:$PYTHONPATH}"
PROFILE=${PROFILE:-$(python3 -c "import torch; print('h200' if 'H200' in torch.cuda.get_device_name(0) else 'h100')")}
for stage in "$@"; do
  case $stage in
    install)
      python3 scripts/gpu/fbgemm_parts.py unpack build/fbgemm-parts/part-*.tar.xz --target "$TARGET"
      if ls build/wheels-gpu/*.whl >/dev/null 2>&1; then
        python3 -m pip install --no-index --no-deps --target "$TARGET" build/wheels-gpu/*.whl
      fi
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.csv"
      python3 scripts/gpu/fbgemm_parts.py check | tee "$OUT/fbgemm-check.json" ;;
    collect)
      python3 -m shardplan.cli collect compute --profile "$PROFILE" --samples "${SAMPLES:-5000}" \
          --out "$OUT/compute.parquet" ;;
    suite)
      python3 bench/gpu_suite.py run --profile "$PROFILE" --plans build/gpu-plans --out "$OUT" ;;
    *) echo "unknown stage $stage (install, collect, suite)" >&2; exit 2 ;;
  esac
done
