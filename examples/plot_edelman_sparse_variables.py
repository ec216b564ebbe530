"""
Edelman, Goel, Kakade & Zhang: sparse variable creation
=======================================================

Edelman, Goel, Kakade & Zhang (*Inductive biases and variable creation in
self-attention mechanisms*) show that a self-attention head learns a
function of s hidden positions out of T bits with a number of samples that
grows like log T, where an MLP on the raw bits needs a number growing with
T.  This page reproduces the figure at small scale, with the experiment's
``[quick]`` grid: AND of s = 3 bits at T = 16, 64 and 256, two seeds, for
both students, and a 3-sparse parity for the exhaustive parity search (no
gradients).  Per seed, n is doubled from 8 and then bisected until the test
accuracy reaches 95 % (here up to n = 512, to a factor √2); the figure shows
the median samples-to-95 % with the fits n = a + b·ln T and n = c·T^α.

The full experiment (T up to 4096, 10 seeds, AND, majority and parity) is
``mhalearn sweep sparse-variables --db FILE``; its figure and tables are on
the page :doc:`/sparse_variables`.
"""

import tempfile
from pathlib import Path

from mhalearn.experiments import get_experiment
from mhalearn.plotting import show_files

experiment = get_experiment("sparse-variables")
grid = experiment.grid(quick=True).table
print(grid)
rows = [{**cell, **experiment.run_cell(cell)} for cell in experiment.expand(grid)]
print(f"{len(rows)} cells")

# %%
# The figure and the numbers it shows, as ``mhalearn plot`` writes them.
show_files(experiment.plot(rows, Path(tempfile.mkdtemp())))
