"""Every allocation the user's inputs size goes through the memory budget: a clear refusal before any work.

Each test reproduces a raw ``MemoryError`` a user met (NumPy's or Numba's,
after seconds of work): a teacher of 10⁹ heads or of d = 10⁶, the m·k × k
attention scratch of k = 10⁵ tokens, a broadcast view of 10⁹ sequences.
"""

import tracemalloc

import numpy as np
import pytest

import mhalearn
from mhalearn._memory import MemoryBudgetError
from mhalearn.cli import main


@pytest.mark.parametrize("heads, dim, name", [(10**9, 12, "heads"), (1, 10**6, "dim")])
def test_a_teacher_too_large_for_the_budget_is_refused(heads, dim, name):
    # Refused before any array of the teacher's size is made (NumPy reports its allocations to tracemalloc).
    sample_teacher = mhalearn.sample_teacher  # its modules imported before the count starts
    tracemalloc.start()
    try:
        with pytest.raises(MemoryBudgetError,
                           match=f"^{name}: a teacher of {heads} head.s. of {dim} × {dim} matrices"):
            sample_teacher(heads, dim)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, peak


def test_the_attention_scratch_of_long_sequences_is_refused_before_planting(monkeypatch, capsys):
    fits = []
    monkeypatch.setattr("mhalearn.evaluation.fit_timed", lambda *args: fits.append(args) or 0.0)
    code = main(["learn", "--learner", "gradient", "-m", "1", "-d", "4", "-k", "100000", "-n", "10", "--quiet",
                 "--out", "unused.npz"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "k = 100,000 tokens" in err and "lower k" in err, err
    assert fits == []


def test_predict_on_long_sequences_is_refused_before_the_kernel():
    model = mhalearn.sample_teacher(1, 4, rng=0)
    with pytest.raises(MemoryBudgetError, match="^X: the attention of 1 head.s. over sequences of k = 100,000"):
        model.predict(np.ones((1, 100_000, 4)))


@pytest.mark.parametrize("learner", ["SculptLearner", "GradientLearner"])
def test_a_broadcast_view_of_a_billion_sequences_is_refused(learner):
    X = np.broadcast_to(np.ones((1, 4, 12)), (10**9, 4, 12))
    with pytest.raises(MemoryBudgetError, match=r"^X: a float64 copy .* \(a broadcast view\) would take 358 GiB"):
        getattr(mhalearn, learner)(2).fit(X, X)
