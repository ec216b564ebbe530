"""
Edelman, Goel, Kakade & Zhang: sparse variable creation
=======================================================

Edelman, Goel, Kakade & Zhang (*Inductive biases and variable creation in
self-attention mechanisms*) show that a self-attention head learns a
function of s hidden positions out of T bits with a number of samples that
grows like log T, where an MLP on the raw bits needs a number growing with
T.  This page reproduces the figure at small scale (majority of s = 3 bits,
T = 16 and 64, one seed): test accuracy against n for both students, and the
samples each needs to reach 95 %.

The full experiment is ``mhalearn sweep sparse-variables --db FILE``.
"""

import tempfile
from pathlib import Path

from mhalearn.experiments import get_experiment
from mhalearn.experiments.figures import show_files

experiment = get_experiment("sparse-variables")
grid = {"function": "majority", "student": ["attention", "mlp"], "sparsity": 3, "length": [16, 64],
        "samples": [32, 64, 128, 256, 512, 1024], "seed": 0}
rows = [{**cell, **experiment.run_cell(cell)} for cell in experiment.expand(grid)]
print(f"{len(rows)} fits")

# %%
# The figure and the numbers it shows, as ``mhalearn plot`` writes them.
show_files(experiment.plot(rows, Path(tempfile.mkdtemp())))
