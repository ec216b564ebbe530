"""Refit the first probe of every stored queries-to-eps search with the code checked out; compare.

    python runs/queries-to-eps/check_sweep_at_head.py      # fits: ~5 minutes beside other jobs

Prints each search whose first probe now asks a different number of queries, or reaches the other
verdict (error <= eps or not), and the counts of same, different and refused (2m > d) probes.
"""
import json

from mhalearn import QueryOracle, relative_error
from mhalearn.evaluation import plant_instance
from mhalearn.experiments.queries_to_eps import cell_learner, oversample_for
from mhalearn.experiments.store import ResultStore

with ResultStore("runs/queries-to-eps/queries-to-eps.db", readonly=True) as store:
    rows = store.rows("queries-to-eps")
same = differ = skipped = 0
for row in rows:
    probe = json.loads(row["probe_log"])[0]
    if probe["refused"]:
        skipped += 1
        continue
    cell = {key: row[key] for key in ("family", "dim", "length", "noise", "heads", "distinct", "eps", "budget", "seed")}
    teacher, _, _, X_test = plant_instance(heads=cell["heads"], dim=cell["dim"], length=cell["length"], samples=1,
                                           family=cell["family"], seed=cell["seed"])
    learner = cell_learner(cell, oversample_for(cell, probe["budget"]) or 1.0)
    learner.fit(QueryOracle(teacher, noise=cell["noise"], rng=cell["seed"]))
    error = relative_error(learner.model_, teacher, X_test)
    ok = learner.report_.queries == probe["queries"] and (error <= cell["eps"]) == (probe["error"] <= cell["eps"])
    same += ok
    differ += not ok
    if not ok:
        print("differs", cell, probe["queries"], learner.report_.queries, probe["error"], error, flush=True)
print(json.dumps({"same": same, "differ": differ, "refused": skipped}))
