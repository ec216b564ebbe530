"""
Recovering a planted teacher with SculptLearner
===============================================

Plant a two-head teacher (d = 12, k = 4), learn it with SculptLearner from
100 000 sequences, print the phase table — which route gave the span, which
refit moved Ŵ_Σ — and compare the unpolished output with the polished one.
The unpolished output is the paper's only when ``report_.route`` is
``"body"``; the script says which route it was.

    python examples/recover_teacher.py
"""

import mhalearn

teacher = mhalearn.sample_teacher(heads=2, dim=12, rng=0)
print("teacher:", teacher, "non-degenerate:", mhalearn.nondegeneracy(teacher).ok)

X, Y = mhalearn.make_dataset(teacher, samples=100_000, length=4, rng=1)
observer = mhalearn.TeacherObserver(teacher)  # evaluation watches from outside: the fit is the same without it
learner = mhalearn.SculptLearner(heads=2, random_state=0).fit(X, Y, callback=observer)

print(learner.report_.table())
print("against the teacher:")
print(observer.table())
X_test = mhalearn.boolean_inputs(4000, 4, 12, rng=2)
paper = mhalearn.relative_error(learner.least_squares_model_, teacher, X_test)
polished = mhalearn.relative_error(learner.model_, teacher, X_test)
unpolished = "the paper's output" if learner.report_.route == "body" else "our moment route's unpolished output"
print(f"span from the {learner.report_.route} route")
print(f"relative test error: {unpolished} {paper:.3e}, after our L-BFGS polish {polished:.3e}")
print(f"head-matched parameter error: {mhalearn.parameter_error(learner.model_, teacher)['total']:.3e}")
