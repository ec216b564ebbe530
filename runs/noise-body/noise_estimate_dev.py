"""Development check of the noise estimate under a Ŵ_Σ of refined quality (W_Σ plus an error of size 0.02).

Run with the package of the commit runs/noise-body/README.md names for each output.

Fresh development teachers (seeds 30-32 at every m); not the sculpt-vs-m teachers (seeds 0-2) nor the
noise-body ones."""
import time

import numpy as np

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.noise import estimate_tolerance
from mhalearn.seeding import seeded_rng

settings = BodySettings()
for heads in (1, 2, 3, 4):
    for noise in (0.0, 1e-2, 0.1):
        for seed in (30, 31, 32):
            teacher = sample_teacher(heads, 12, rng=seeded_rng(20_251, heads, seed))
            w_sum = teacher.ws.sum(axis=0)
            error = np.random.default_rng(seed).standard_normal(w_sum.shape)
            w_hat = w_sum + 0.02 * np.linalg.norm(w_sum) * error / np.linalg.norm(error)
            source = TeacherSource(teacher, 10**7, 4, seed=seed, noise=noise)
            t = time.perf_counter()
            found = estimate_tolerance(source, w_hat, residual_tol=settings.residual_tol,
                                       simplex_tol=settings.simplex_tol, agreement_share=settings.quantile_for(heads))
            print(f"m={heads} sigma={noise:g} seed={seed}: noise {found['noise']:.4f} tol {found['tolerance']:.4f} "
                  f"shares {found['shares']} rows {found['rows']} {time.perf_counter() - t:.1f}s"
                  + (f" sample {found.get('samples')}" if 'samples' in found else ""), flush=True)
