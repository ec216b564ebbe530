"""QueryLearner at m = 2–4 on teachers no part of its development saw: seeds 7600–7609.

    python runs/queries-to-eps/heldout_heads.py > runs/queries-to-eps/heldout_heads.txt

acceptance.py's `heads` part ran on seeds 7200–7209, four of which (7202, 7203, 7205, 7207) were looked
into after a first run and led to changes of the learner; this repeats that part, with QueryLearner's
defaults, d = 12, k = 4, an exact oracle, on ten random teachers per m that were drawn after the learner
was frozen. Relative error on 1000 fresh Boolean sequences; a fit counts when it is ≤ 1e-6.
"""
import numpy as np

import mhalearn

print("| m | teachers | error ≤ 1e-6 | largest error | queries (median) |")
print("| --- | --- | --- | --- | --- |")
for heads in (2, 3, 4):
    errors, queries = [], []
    for seed in range(7600, 7610):
        teacher = mhalearn.sample_teacher(heads, 12, rng=seed)
        oracle = mhalearn.QueryOracle(teacher)
        learner = mhalearn.QueryLearner(heads, random_state=seed).fit(oracle)
        X_test = mhalearn.boolean_inputs(1000, 4, 12, rng=np.random.default_rng([seed, 1]))
        errors.append(mhalearn.relative_error(learner.model_, teacher, X_test))
        queries.append(oracle.queries)
    print(f"| {heads} | {len(errors)} | {sum(e <= 1e-6 for e in errors)} | {max(errors):.2g} | "
          f"{int(np.median(queries))} |", flush=True)
