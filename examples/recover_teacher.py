"""
Recovering a planted teacher with SculptLearner
===============================================

Plant a two-head teacher, learn it with SculptLearner and print the phase table.

    python examples/recover_teacher.py
"""

import mhalearn

teacher = mhalearn.sample_teacher(heads=2, dim=8, rng=0)
print("teacher:", teacher, "non-degenerate:", mhalearn.nondegeneracy(teacher).ok)

X, Y = mhalearn.make_dataset(teacher, samples=2000, length=8, rng=1)
learner = mhalearn.SculptLearner(heads=2, random_state=0).fit(X, Y, teacher=teacher)

print(mhalearn.format_phase_table(learner.report_))
X_test = mhalearn.boolean_inputs(4000, 8, 8, rng=2)
print(f"relative test error: {mhalearn.relative_error(learner.model_, teacher, X_test):.3e}")
print(f"head-matched parameter error: {mhalearn.parameter_error(learner.model_, teacher)['total']:.3e}")
