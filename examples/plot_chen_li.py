"""
Chen & Li: learning a planted multi-head attention layer
========================================================

Chen & Li (*Provably learning a multi-head attention layer*) show that a
non-degenerate layer F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i can be learned from
Boolean examples, at a cost exponential in the number of heads m.  The paper
has no experiments; this page measures its claim at small scale, with the
figure of the ``error-vs-samples`` experiment: the relative test error of
each learner against the number of samples n, for m = 1 and 2 (noisy labels,
σ = 0.1, so the error floors at the noise level).

The full experiment is ``mhalearn sweep error-vs-samples --db FILE`` (its grid:
``mhalearn/experiments/grids/error-vs-samples.toml``).
"""

import tempfile
from pathlib import Path

from mhalearn.experiments import get_experiment
from mhalearn.experiments.figures import show_files

experiment = get_experiment("error-vs-samples")
grid = {"learner": ["gradient", "moment", "sculpt"], "family": "random", "heads": [1, 2], "dim": 6,
        "length": 6, "samples": [32, 128, 512], "noise": 0.1, "seed": [0, 1]}
cells = experiment.expand(grid)
rows = [{**cell, **experiment.run_cell(cell)} for cell in cells]
print(f"{len(rows)} fits")

# %%
# The figure and the numbers it shows, as ``mhalearn plot`` writes them.
show_files(experiment.plot(rows, Path(tempfile.mkdtemp())))
