import shardplan, time
from shardplan.execute.dlrm_loop import run_loop
from shardplan.formats import load_plan
p = load_plan("out/default-plan.json")
t0=time.time(); r = run_loop(p, "cpu-2c", shardplan.estimator(), iterations=20)
print(time.time()-t0)
d=r.to_dict(); print({k: d[k] for k in ["dense_ms","rank_fwd_ms","rank_bwd_ms","rank_comm_ms","predicted_rank_ms","iteration_ms","samples_per_s"]}); print(r.losses[:3], r.losses[-3:])
