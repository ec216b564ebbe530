"""Each growth law fitted on the rows of a results file, and its prediction at held-out m.

    python runs/samples-to-eps/predict.py DB M [M ...]

Prints, per curve (family, d, k, σ, learner, output, ε) and law form, the fitted law with its 90 %
bootstrap interval over teachers and the median n* it predicts at each M — the numbers committed in
runs/samples-to-eps/PREDICTIONS.md before the held-out m was run.
"""
import sys

from mhalearn.experiments.growth_laws import fit_growth_laws, predict
from mhalearn.experiments.store import ResultStore

path, heads = sys.argv[1], [int(value) for value in sys.argv[2:]]
with ResultStore(path, readonly=True) as store:
    rows = store.rows("samples-to-eps")
for law in fit_growth_laws(rows):
    curve = " ".join(str(law[key]) for key in ("family", "dim", "length", "noise", "learner", "output", "eps"))
    predictions = ", ".join(f"m = {m}: {predict(law, m):.0f}" for m in heads)
    print(f"{curve} | {law['form']}: a = {law['a']:.4g} [{law['a_low']:.4g}, {law['a_high']:.4g}], "
          f"b = {law['b']:.4g} [{law['b_low']:.4g}, {law['b_high']:.4g}], rms log10 = {law['rms_log10']:.3f}, "
          f"fitted on m = {law['heads']} ({law['points']} teachers' n*, {law['censored']} censored) | {predictions}")
