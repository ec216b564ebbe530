"""
Chen & Li: what the sculpted body needs as the number of heads grows
====================================================================

Chen & Li (*Provably learning a multi-head attention layer*) learn a
non-degenerate layer F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i from Boolean examples by
sculpting a convex body from the rows on which every head has the same
attention pattern, at a cost exponential in the number of heads m — and show
that this price is unavoidable in the worst case.  The paper has no
experiments; this page runs the ``sculpt-vs-m`` experiment at small scale
(d = 12, k = 4, one teacher per m, n up to 30 000 sequences): the body's
span distance to the truth (1 when it refuses), the agreement rows it found,
and the test error of the paper's output (the net's held-out best candidate
with W by least squares, no polish) against n, for m = 1, 2, 3.

The full experiment is ``mhalearn sweep sculpt-vs-m --db FILE`` (its grid,
up to 10⁶ sequences and m = 4: ``mhalearn/experiments/grids/sculpt-vs-m.toml``).
"""

import tempfile
from pathlib import Path

from mhalearn.experiments import get_experiment
from mhalearn.plotting import show_files

experiment = get_experiment("sculpt-vs-m")
grid = {"heads": [1, 2, 3], "dim": 12, "length": 4, "samples": [3000, 10000, 30000], "seed": 0}
rows = [{**cell, **experiment.run_cell(cell)} for cell in experiment.expand(grid)]
for row in rows:
    print(f"m = {row['heads']}, n = {row['samples']:6d}: {row['agreement_rows'] or 0:5d} agreement rows, "
          f"span distance {row['span_distance'] if row['span_distance'] is not None else 'refused'}")

# %%
# The figure and the numbers it shows, as ``mhalearn plot`` writes them.
show_files(experiment.plot(rows, Path(tempfile.mkdtemp())))
