"""The README's quick tour, its figures printed to the bit (for a comparison of two checkouts), plus its Dask
form (the same teacher, ``make_dataset(..., chunks=20 000)``)."""

import hashlib

import dask
import numpy as np

import mhalearn


def digest(array) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


teacher = mhalearn.sample_teacher(heads=2, dim=12, rng=0)
for chunks in (None, 20_000):
    X, Y = mhalearn.make_dataset(teacher, samples=100_000, length=4, rng=1, chunks=chunks)
    observer = mhalearn.TeacherObserver(teacher)
    with dask.config.set(scheduler="threads"):
        learner = mhalearn.SculptLearner(heads=2, random_state=0).fit(X, Y, callback=observer)
    X_test = mhalearn.boolean_inputs(4000, 4, 12, rng=2)
    report = learner.report_
    print(f"chunks={chunks}: route {report.route}; span {digest(report.span.basis)}; W_sum "
          f"{digest(report.refined_sum.w_sum)}; least-squares model {digest(learner.least_squares_model_.thetas)} "
          f"{digest(learner.least_squares_model_.ws)}; model {digest(learner.model_.thetas)} "
          f"{digest(learner.model_.ws)}")
    print(f"  relative test error {mhalearn.relative_error(learner.least_squares_model_, teacher, X_test)!r} "
          f"(polished {mhalearn.relative_error(learner.model_, teacher, X_test)!r}); span distance "
          f"{observer.span_distance(report.route)!r}; certificate {report.selection.certificate}")
