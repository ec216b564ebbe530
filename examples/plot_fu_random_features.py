"""
Fu, Guo, Bai & Mei: what random-feature attention learns
========================================================

Fu, Guo, Bai & Mei (*What can a single attention layer learn? A study
through the random features lens*) show that a single attention layer with
frozen random query–key matrices learns targets that are permutation
invariant in the keys with far fewer samples than a random-feature MLP of
the same size, and that query–key matrices drawn around the identity learn
targets that depend on the query–key correlation ⟨x_0, x_j⟩ better than
zero-mean ones.  This page reproduces the figure at small scale (M = 32
heads, d = N = 16, one seed): relative test error (1 − R²) against n for the
three models on three of the seven targets — the mean of a linear function
of the keys, a correlation-weighted target and the non-invariant control
that reads one key (where the MLP should win).  At this scale the
higher-degree invariant targets (``mean-power-2``, ``-3``) are learned by no
model; the full sweep has all seven.

The full experiment is ``mhalearn sweep random-features --db FILE``.
"""

import tempfile
from pathlib import Path

from mhalearn.experiments import get_experiment
from mhalearn.plotting import show_files

experiment = get_experiment("random-features")
grid = {"target": ["mean-linear", "correlation-relu", "single-key"],
        "model": ["attention-zero", "attention-identity", "mlp"], "law": "sphere", "dim": 16, "keys": 16,
        "heads": 32, "samples": [64, 256, 1024, 4096], "seed": 0,
        # the best error of 8 and 32 heads at any n (6 samples per weight): representational limits
        "floor_heads": [8, 32], "floor_seed": 0, "floor_factor": 6}
rows = [{**cell, **experiment.run_cell(cell)} for cell in experiment.expand(grid)]
print(f"{len(rows)} fits")

# %%
# The figure and the numbers it shows, as ``mhalearn plot`` writes them.
show_files(experiment.plot(rows, Path(tempfile.mkdtemp())))
