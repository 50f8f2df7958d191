#!/usr/bin/env bash
# Create the project-local virtual environment .venv/ and install shardplan into it.
# The order matters: the CPU torch wheel first; FBGEMM's CPU build; TorchRec without its
# dependency on the GPU fbgemm-gpu package (2.7 GB, and it would overwrite the CPU one);
# then TorchRec's other needs and shardplan itself. Idempotent: skipped when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.shardplan-setup
want=$(cat scripts/setup.sh pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
  "${pip[@]}" torch==2.13.0
  "${pip[@]}" fbgemm-gpu-cpu==1.8.0
  "${pip[@]}" --no-deps torchrec==1.8.0
  "${pip[@]}" tensordict torchmetrics==1.0.3 tqdm pyre-extensions
  "${pip[@]}" -e ".[test]"
  echo "$want" > "$stamp"
fi
