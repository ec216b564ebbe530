"""Sparse parity by empirical risk minimisation (meet in the middle), no gradients.

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022
([design: sparse-variables]): :class:`SparseParitySearch` measures the
statistical side of their claim for sparse parity — samples growing like
log T — free of the computational barrier that slows the gradient-trained
students of :mod:`~mhalearn.sparse_variables.students`.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import Integer, Seed, as_generator
from .tasks import BooleanClassifier, check_examples


def _as_signatures(packed: np.ndarray) -> np.ndarray:
    """Rows of packed bits (k, bytes) as exact, sortable signatures: one void scalar per row."""
    packed = np.ascontiguousarray(packed)
    return packed.view(np.dtype((np.void, packed.shape[1]))).ravel()


class SparseParitySearch(BooleanClassifier):
    """Empirical risk minimisation over the parities of s bits — a learner that is not gradient-based.

    The class H_s = {χ_S(x) = Π_{i∈S} x_i : S ⊂ [T] of size s} has C(T, s)
    members, so a learner that returns any parity consistent with the
    sample is wrong with probability at most (C(T, s) − 1)·2^{−n} (a wrong
    χ_{S'} agrees with χ_S on a uniform example with probability 1/2,
    independently across examples): n ≈ log₂ C(T, s) ≈ s·log₂ T samples
    suffice.  This is the statistical side of Edelman et al.'s claim for
    sparse parity — the information needed grows like log T — free of the
    computational barrier that makes gradient methods need a number of
    steps growing like T^{s−1} (a parity of s bits is uncorrelated with every
    function of fewer of them).

    **Algorithm** (meet in the middle).  With bits b = (1 − x)/2 and label
    bit c = (1 − y)/2, χ_S is consistent iff ⊕_{i∈S} b_i = c on every
    example.  Split S = A ∪ B with A of size ⌊s/2⌋: the n-bit signature
    ⊕_{i∈B} b_i ⊕ c of every B is looked up, exactly, among the sorted
    signatures ⊕_{i∈A} b_i of the A's.  Time O(T^{⌈s/2⌉}·(n/64 + log T))
    and memory O(T·n) bits: C(4096, 2) ≈ 8.4 million lookups for s = 3.
    Each consistent S is found C(s, ⌊s/2⌋) times (once per split), and one
    is returned uniformly at random among them (``random_state``), so the
    learner is a uniform consistent learner: with W wrong consistent parities
    it is right with probability 1/(W + 1).

    The data must be realisable (noiseless parity labels); when no parity of
    s bits is consistent, the learner predicts the majority label and
    ``support_`` is None.

    Parameters
    ----------
    sparsity : int
        s, 1 <= s <= 3 (the search is over T^{⌈s/2⌉} subsets).
    random_state : None, int or Generator
        Chooses among consistent parities.

    Attributes
    ----------
    support_ : ndarray of int (s,) or None
        The chosen S.
    consistent_count_ : int
        The number of parities of s bits consistent with the sample (1 once
        the sample identifies S).
    n_features_in_ : int
    """

    #: The search enumerates T^ceil(s/2) subsets: s <= 3 keeps it at T² signatures.
    _parameter_constraints = {"sparsity": [Integer(1, 3)], "random_state": [Seed()]}

    def __init__(self, sparsity: int = 3, *, random_state=None):
        self.sparsity = sparsity
        self.random_state = random_state

    def fit(self, X, y):
        """Search the parities of ``sparsity`` bits for those consistent with (X, y); returns ``self``."""
        self._check_params()
        sparsity = self.sparsity
        X, y = check_examples(X, y)
        length = X.shape[1]
        if sparsity > length:
            raise ValueError(f"sparsity: expected an integer <= the {length} columns of X, received {sparsity}")
        rng = as_generator(self.random_state)
        packed = np.packbits(X.T < 0, axis=1)  # (T, ⌈n/8⌉): the bits b_i of every example, packed
        label = np.packbits(y < 0)
        halves = sparsity // 2, sparsity - sparsity // 2
        columns = _as_signatures(packed)
        left = columns if halves[0] == 1 else _as_signatures(np.zeros((1, packed.shape[1]), dtype=np.uint8))
        order = np.argsort(left, kind="stable")
        left_sorted = left[order]
        zero_left = halves[0] == 0

        def block(first: int):
            """Subsets B (as index rows) starting at ``first``, and their lookup signatures ⊕_B b ⊕ c."""
            if halves[1] == 1:
                rows = np.arange(length)[:, None]
                targets = _as_signatures(packed ^ label)
            else:
                rows = np.column_stack([np.full(length - first - 1, first), np.arange(first + 1, length)])
                targets = _as_signatures(packed[first + 1:] ^ packed[first] ^ label)
            low = np.searchsorted(left_sorted, targets, side="left")
            high = np.searchsorted(left_sorted, targets, side="right")
            counts = high - low
            if not zero_left:  # A must not meet B: drop the matches A = {i} with i ∈ B
                for column in rows.T:
                    counts -= columns[column] == targets
            return rows, low, high, counts

        firsts = [0] if halves[1] == 1 else list(range(length - 1))
        totals = np.array([block(first)[3].sum() for first in firsts])
        repeats = math.comb(sparsity, halves[0])
        self.consistent_count_ = int(totals.sum()) // repeats
        if self.consistent_count_ == 0:
            self.support_ = None
            self.constant_ = 1.0 if np.mean(y) >= 0 else -1.0
            self.n_features_in_ = length
            return self
        pick = int(rng.integers(totals.sum()))
        index = int(np.searchsorted(np.cumsum(totals), pick, side="right"))
        pick -= int(totals[:index].sum())
        rows, low, high, counts = block(firsts[index])
        row = int(np.searchsorted(np.cumsum(counts), pick, side="right"))
        pick -= int(counts[:row].sum())
        subset = set(rows[row].tolist())
        matches = [] if zero_left else [int(order[k]) for k in range(low[row], high[row])
                                        if int(order[k]) not in subset]
        chosen = subset | ({matches[pick]} if matches else set())
        self.support_ = np.array(sorted(chosen))
        self.n_features_in_ = length
        return self

    def _scores(self, X: np.ndarray) -> np.ndarray:
        if self.support_ is None:
            return np.full(X.shape[0], self.constant_)
        return np.prod(X[:, self.support_].astype(np.float64), axis=1)


__all__ = ["SparseParitySearch"]
