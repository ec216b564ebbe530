"""κ(W_Σ) of the `cancelling` teachers the experiments plant (d = 12, seeds 0–9), per m.

    python runs/learners-vs-m/cancelling_kappa.py      (prints m, median, min, max)
"""
import numpy as np

from mhalearn.attention.teachers import make_teacher
from mhalearn.evaluation.planted import instance_streams

for heads in range(2, 9):
    kappas = []
    for seed in range(10):
        # the teacher's stream of plant_instance
        teacher_rng, _, _ = instance_streams("cancelling", heads, 12, 4, 1, seed)
        teacher = make_teacher("cancelling", heads, 12, teacher_rng)
        kappas.append(np.linalg.cond(sum(np.asarray(w) for w in teacher.ws)))
    print(heads, f"{np.median(kappas):.1f}", f"{min(kappas):.1f}", f"{max(kappas):.1f}")
