"""
Recovering a planted teacher with SculptLearner
===============================================

Plant a two-head teacher (d = 12, k = 4: the regime where Chen & Li's body
carries the span), learn it with SculptLearner, print the phase table — which
route gave the span, which refit moved Ŵ_Σ — and compare the paper's own
output with the polished one, with the held-out certificate.

    python examples/recover_teacher.py
"""

import mhalearn

teacher = mhalearn.sample_teacher(heads=2, dim=12, rng=0)
print("teacher:", teacher, "non-degenerate:", mhalearn.nondegeneracy(teacher).ok)

X, Y = mhalearn.make_dataset(teacher, samples=30_000, length=4, rng=1)
observer = mhalearn.TeacherObserver(teacher)  # evaluation watches from outside: the fit is the same without it
learner = mhalearn.SculptLearner(heads=2, random_state=0).fit(X, Y, callback=observer)

print(learner.report_.table())
print("against the teacher:")
print(observer.table())
X_test = mhalearn.boolean_inputs(4000, 4, 12, rng=2)
paper = mhalearn.relative_error(learner.least_squares_model_, teacher, X_test)
polished = mhalearn.relative_error(learner.model_, teacher, X_test)
print(f"span from the {learner.report_.route} route")
print(f"relative test error: paper's output {paper:.3e}, after our L-BFGS polish {polished:.3e}")
print(f"head-matched parameter error: {mhalearn.parameter_error(learner.model_, teacher)['total']:.3e}")
