#!/usr/bin/env bash
# The whole GPU job, run on the lent GPU machine from the repository root, in stages so that each
# device call stays under its time limit:  bash scripts/gpu/job.sh install collect train plan suite
#
# Carried in (prepared on CPU first; see docs/gpu.md):
#   build/fbgemm-parts/part-*.tar.xz   fbgemm-gpu 1.6.0 in parts (scripts/gpu/fbgemm_parts.py pack
#                                      --keep-arch 90: 78 MiB); a call can carry some of them ($PARTS) and
#                                      run `unpack` alone: a machine that stays warm keeps what was unpacked
#   build/wheels-gpu/*.whl             pydantic and its deps (the GPU image lacks them): pip download here
#   build/gpu-plans/*.json             the suite's plans (python bench/gpu_suite.py plan --profile <gpu>);
#                                      $PLANS names another folder (each chip's committed model plans its own)
# Everything it writes goes to $OUT (default out/gpu): the fbgemm check, GPU identity, compute.parquet,
# the suite's results. What must outlive one call (the cost data being collected) is kept in $STATE,
# which survives while the machine stays warm, and copied to $OUT at the end of each stage.
set -euo pipefail
OUT=${OUT:-out/gpu}
TARGET=${FBGEMM_TARGET:-/tmp/fbgemm}
STATE=${STATE:-/tmp/shardplan-gpu}
# the parts this call carries (a call can carry some and `unpack` them; `install` unpacks the rest)
PARTS=${PARTS:-build/fbgemm-parts}
PLANS=${PLANS:-build/gpu-plans}
mkdir -p "$OUT" "$STATE"
export PYTHONPATH="$PWD:$TARGET${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Tables come and go in sizes up to tens of GB, sample after sample: growable segments keep the
# caching allocator from fragmenting into an out-of-memory.
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
profile() { python3 -c "import torch; print('h200' if 'H200' in torch.cuda.get_device_name(0) else 'h100')"; }
for stage in "$@"; do
  case $stage in
    profile)
      profile ;;  # which GPU profile this machine is (lease.sh asks once for all its stages)
    unpack)
      python3 scripts/gpu/fbgemm_parts.py unpack "$PARTS"/part-*.tar.xz --target "$TARGET" ;;
    install)
      python3 scripts/gpu/fbgemm_parts.py unpack "$PARTS"/part-*.tar.xz --target "$TARGET"
      if ls build/wheels-gpu/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target "$TARGET" build/wheels-gpu/*.whl
      fi
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.csv"
      python3 scripts/gpu/fbgemm_parts.py check | tee "$OUT/fbgemm-check.json"
      # would a lean package (a third smaller) do? recorded for the next carry, never fatal
      if [ "${LEAN_CHECK:-1}" = 1 ]; then
        python3 scripts/gpu/fbgemm_parts.py lean-check --target "$TARGET" > "$OUT/fbgemm-lean-check.txt" 2>&1 \
          || echo "lean package failed its check (see fbgemm-lean-check.txt)"
      fi ;;
    collect)
      # ($COLLECT_ARGS: more of `collect compute`'s flags, e.g. a row-slice collection's
      # "--seed 2 --row-share 0.8 --row-splits 2,4,8,16 --min-shards 4", or sets with a data-parallel op at the
      # local batch beside the sharded shards, as TorchRec's ranks run: "--seed 3 --replica-share 1 --min-shards 4")
      python3 -m shardplan.cli collect compute --profile "${PROFILE:-$(profile)}" --samples "${SAMPLES:-5000}" \
          --max-seconds "${COLLECT_SECONDS:-480}" --out "$STATE/compute.parquet" ${COLLECT_ARGS:-}
      cp "$STATE/compute.parquet" "$OUT/" ;;
    collect-large)
      python3 -m shardplan.cli collect compute --profile "${PROFILE:-$(profile)}" --samples "${LARGE_SAMPLES:-300}" \
          --seed 1 --min-shards 16 --max-shards 30 --max-seconds "${COLLECT_SECONDS:-480}" \
          --out "$STATE/compute-large.parquet"
      cp "$STATE/compute-large.parquet" "$OUT/" ;;
    collect-ranks)
      # the carried plans' ranks timed as cost samples are (the collector's protocol, not the loop's): plan
      # ranks of this profile, and beside the suite's loop timings of the same ranks on the same machine
      # ($RANK_PLANS: folders in turn, the plans that matter most first; a plan timed in one is skipped in the
      # next. Each folder gets at most $RANKS_SECONDS: every plan's rows are written as it ends, so a stop
      # keeps all but the plan it cut.) Each collect-ranks stage of a job is a round of its own (the file's
      # `round` column: 0, 1, ...), so STAGES="collect-ranks suite collect-ranks" interleaves two of each.
      round=$(cat "$STATE/ranks-round" 2>/dev/null || echo 0)
      for dir in ${RANK_PLANS:-$PLANS}; do
        timeout "${RANKS_SECONDS:-600}" python3 -m shardplan.cli collect ranks --profile "${PROFILE:-$(profile)}" \
            --plans "$dir" --round "$round" --out "$STATE/compute-ranks.parquet" \
          || echo "collect-ranks on $dir stopped (rc $?)"
      done
      echo $((round + 1)) > "$STATE/ranks-round"
      cp "$STATE/compute-ranks.parquet" "$OUT/" ;;
    reference)
      # the profile's reference workload on this machine's device, before and after the other stages: the
      # host state (launch jitter) the GPU timings rode on, the figure --host-reference-ms takes
      { date -u +%FT%TZ; python3 -m shardplan.cli profiles --host-reference --profile "${PROFILE:-$(profile)}"; } \
        | tee -a "$OUT/host-reference.txt" ;;
    rank-parts)
      # plan ranks with data-parallel replicas (every TorchRec rank of the suite), each timed whole and each
      # batch's op alone in the same repetitions: which op the model misprices ($BATCH_PARTS_SRC: a plan-rank
      # file, by default the ranks the collect-ranks stage just timed; training never reads these rows)
      python3 -m shardplan.cli collect decompositions --by-batch --profile "${PROFILE:-$(profile)}" \
          --src "${BATCH_PARTS_SRC:-$STATE/compute-ranks.parquet}" --sets "${BATCH_PARTS_SETS:-240}" \
          --reps "${BATCH_PARTS_REPS:-5}" --max-seconds "${BATCH_PARTS_SECONDS:-300}" \
          --out "$STATE/compute-batch-parts.parquet"
      cp "$STATE/compute-batch-parts.parquet" "$OUT/" ;;
    train)
      # the GPU profile's model, trained here on the samples just collected (the searchers of the `plan`
      # stage need it on this machine); the committed model is trained again on CPU afterwards
      P=${PROFILE:-$(profile)}
      mkdir -p "data/profiles/$P"
      cp "$STATE/compute.parquet" "data/profiles/$P/compute.parquet"
      python3 -m shardplan.cli train --profile "$P" --epochs "${EPOCHS:-300}"
      cp "data/profiles/$P/compute-model.json" "$OUT/compute-model-in-call.json"
      cp "data/profiles/$P/compute-model-report.md" "$OUT/compute-model-report-in-call.md" ;;
    plan)
      # shardplan's plans, searched with the model of the `train` stage; TorchRec's and the heuristics'
      # plans came planned from the CPU machine (they need no GPU model)
      # (every task at once, one process and one thread each: the machine has 16 cores)
      OMP_NUM_THREADS=1 python3 bench/gpu_suite.py plan --profile "${PROFILE:-$(profile)}" \
          --searchers "${SEARCHERS:-neuroshard}" --suite "${SUITE:-data/tasks/gpu-bench}" --jobs "${PLAN_JOBS:-12}" \
          --plans "$PLANS" --out "$OUT"
      cp -r "$PLANS" "$OUT/gpu-plans" ;;
    suite|suite:*)
      # each suite stage of a job is a round of its own: $OUT/suite-1, suite-2, ... (STAGES="suite suite");
      # `suite:DIR` runs the plans in DIR instead of $PLANS (STAGES="suite suite:build/other-plans")
      n=1; while [ -e "$OUT/suite-$n" ]; do n=$((n + 1)); done
      dir=$PLANS; [ "$stage" = suite ] || dir=${stage#suite:}
      python3 bench/gpu_suite.py run --profile "${PROFILE:-$(profile)}" --plans "$dir" --out "$OUT/suite-$n" \
          --iterations "${ITERATIONS:-20}" ${SUITE_SECONDS:+--max-seconds "$SUITE_SECONDS"} ;;
    *) echo "unknown stage $stage (profile, unpack, install, reference, collect, collect-large, collect-ranks," \
            "rank-parts, train, plan, suite, suite:DIR)" >&2
       exit 2 ;;
  esac
done
