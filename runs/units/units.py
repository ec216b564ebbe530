"""Equivariance of the attention learners under the units of the labels (issue 12).

F is linear in W, so learning c·Y must give the teacher with c·W as well as
learning Y gives the teacher.  For c in {1e-8, 1e-4, 1, 1e4, 1e8} this prints
each learner's relative test error against the scaled teacher (noiseless,
m = 2, d = 6, k = 7, n = 2000, teacher seeded 10 000: not a test teacher) and
the ratio to its error at c = 1.

    python runs/units/units.py [--quick]
"""

import argparse

import numpy as np

import mhalearn

SCALES = (1e-8, 1e-4, 1.0, 1e4, 1e8)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="gradient learner only, three scales")
    args = parser.parse_args()
    names = ("gradient",) if args.quick else ("gradient", "moment", "sculpt")
    scales = (1e-8, 1.0, 1e8) if args.quick else SCALES
    teacher = mhalearn.sample_teacher(2, 6, rng=10_000)
    X, Y = mhalearn.make_dataset(teacher, 2000, 7, rng=10_001)
    X_test = mhalearn.boolean_inputs(4000, 7, 6, rng=10_002)
    print("relative test error against the teacher with W scaled by c (ratio to c = 1)")
    print("learner | " + " | ".join(f"c = {c:g}" for c in scales))
    for name in names:
        errors = {}
        for c in scales:
            learner = mhalearn.make_learner(name, 2, random_state=0).fit(X, c * Y)
            scaled = mhalearn.MultiHeadAttention(teacher.thetas, c * teacher.ws)
            errors[c] = mhalearn.relative_error(learner.model_, scaled, X_test)
        cells = [f"{errors[c]:.2e} ({errors[c] / max(errors[1.0], 1e-300):.2g})" for c in scales]
        print(f"{name} | " + " | ".join(cells))
    print(f"(errors near 1e-18 are round-off; a ratio within 10 of 1 — or both at round-off — is equivariant; "
          f"numpy {np.__version__})")


if __name__ == "__main__":
    main()
