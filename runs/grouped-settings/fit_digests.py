"""Fits of the three learners, their fitted arrays printed as SHA-256 digests, with default settings
only (the constructor's spelling of a setting changed with the grouped settings, its default did not),
so that two checkouts can be compared to the bit:

    PYTHONPATH=<checkout> python3 runs/grouped-settings/fit_digests.py

The README quick tour's teacher (m = 2, d = 12, k = 4, ``sample_teacher(heads=2, dim=12, rng=0)``);
the SculptLearner fits are runs/fit-speed/quick_tour.py's (NumPy and Dask arrays).
"""

import hashlib
import runpy
from pathlib import Path

import numpy as np

import mhalearn


def digest(array) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


runpy.run_path(str(Path(__file__).resolve().parent.parent / "fit-speed" / "quick_tour.py"))
teacher = mhalearn.sample_teacher(heads=2, dim=12, rng=0)
X, Y = mhalearn.make_dataset(teacher, samples=4000, length=4, rng=1)
X_test = mhalearn.boolean_inputs(4000, 4, 12, rng=2)
for learner in (mhalearn.MomentLearner(heads=2, random_state=0), mhalearn.GradientLearner(heads=2, random_state=0)):
    model = learner.fit(X, Y).model_
    print(f"{type(learner).__name__}: model {digest(model.thetas)} {digest(model.ws)}; relative test error "
          f"{mhalearn.relative_error(model, teacher, X_test)!r}")
