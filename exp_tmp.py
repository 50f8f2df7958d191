import statistics, numpy as np, torch
from shardplan.formats import load_plan
from shardplan.cost.specs import rank_specs
from shardplan.cost.profiles import get_profile
from shardplan.execute.measure import time_rank, reference_ms
import shardplan, sys
from shardplan.cost.kernel import keep_freed_memory
torch.set_num_threads(1)
prof = get_profile("cpu-2c"); nom = reference_ms(prof)
for path in sys.argv[1:]:
    plan = load_plan(path)
    est = shardplan.estimator()
    pred = est.rank_compute(rank_specs(plan))
    specs = rank_specs(plan)
    for r, s in enumerate(specs):
        xs = [time_rank(s, plan.task.optimizer, plan.task.dtype, prof, nom) for _ in range(4)]
        tot = [x[0]+x[1] for x in xs]
        p = pred[r][0]+pred[r][1]
        gb = sum(x.rows*x.cols*4 for x in s)/2**30
        print(f"{path[-20:]} r{r} n={len(s):2d} GB={gb:.2f} pred={p:6.2f} meas_med={statistics.median(tot):6.2f} min={min(tot):6.2f} ratio={statistics.median(tot)/p:.2f} slow={[round(x[2],2) for x in xs]}")
