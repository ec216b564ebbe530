"""Telling heads apart from queries: each head's projection W_i, row by row, for m ≥ 2.

The paper (Bhattamishra, Shah, Hahn & Kanade, arXiv 2601.16873) proves that
multi-head attention is not identifiable from queries in general and leaves
the multi-head learner to structural assumptions
(:mod:`~mhalearn.queries.identifiability` builds a counter-example for our
layer).  This module is our construction under a genericity assumption,
not the paper's: it needs, for each coordinate s, a ±1 token a at which the
heads' logit gaps z_i = aᵀΘ_i(b − a) (b = a with coordinate s flipped) are
distinct, and rows W_i[s, :] that are independent enough to be told apart.
Random teachers meet it with probability one; two heads sharing Θ never do
(their gaps agree at every token), and the learner says so.

**A scan reveals the rows of every W_i at one coordinate.**  The sequence
of L tokens with c copies of a and L − c copies of b answers, on a's rows,

    y_a − aᵀW_Σ = Σ_i share_i(c) (b − a)ᵀ W_i,   share_i(c) = (L − c) / (L − c + c·r_i),

r_i = exp(−z_i), and (b − a)ᵀW_i = −2a_s W_i[s, :] =: v_i.  With w = c/L,
g(w) := (y_a − aᵀW_Σ)/(1 − w) = Σ_i v_i / (1 + w p_i), p_i = r_i − 1: a
vector rational function of w with m simple poles.  Its denominator
Q(w) = Π_i (1 + w p_i) = 1 + Σ_k e_k w^k makes Q(w)·g(w) a vector polynomial
of degree m − 1, an equation *linear* in e and the polynomial's
coefficients (the vector form of Prony's method, or of rational
interpolation).  L − 1 ≥ 2m + 1 values of c fix it; the roots of Q give the
p_i, and the v_i follow by least squares (:func:`separate_heads`).  Each
scan labels its m rows in its own order.

**One query aligns the labels of two coordinates.**  With b = a flipped at
coordinates 0 and s, y_a − aᵀW_Σ = Σ_i x_i (b−a)_0 W_i[0, :] + Σ_j y_j (b−a)_s
W_π(j)[s, :] in 2m unknown shares (2m ≤ d), and the shares of the same head
agree: x_i = y_j exactly when j is head i's label at s
(:func:`alignment_costs`).

With every W_i known, the heads' attention shares in a two-token query are
m unknowns in d equations (m ≤ d), and Θ_i follows head by head as in the
single-head learner (:func:`~mhalearn.queries.designs.attention_shares`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Smallest singular value, relative to the largest, of a separable scan's linear system.
SEPARATION_FLOOR = 1e-11


def flipped(base: np.ndarray, coordinates) -> np.ndarray:
    """``base`` with the entries at ``coordinates`` negated (a copy)."""
    other = base.copy()
    other[..., coordinates] *= -1.0
    return other


def scan_sequences(base: np.ndarray, coordinate: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The L − 1 sequences of c copies of ``base`` then L − c of it flipped at ``coordinate``, c = 1…L − 1.

    Returns the sequences (L − 1, L, d) and the fractions w = c/L.
    """
    other = flipped(base, coordinate)
    copies = np.arange(1, length)
    holds_base = np.arange(length)[None, :] < copies[:, None]  # (L-1, L)
    return np.where(holds_base[..., None], base, other), copies / length


def scan_values(base: np.ndarray, answers: np.ndarray, fractions: np.ndarray, projection_sum: np.ndarray):
    """g(w) = (y_a − aᵀW_Σ)/(1 − w) from the scan's answers (L − 1, L, d): the mean of each answer's a-rows."""
    length = answers.shape[1]
    copies = np.rint(fractions * length).astype(int)
    rows = np.stack([answer[:count].mean(axis=0) for answer, count in zip(answers, copies)])
    return (rows - base @ projection_sum) / (1.0 - fractions)[:, None]


@dataclass(frozen=True)
class Separation:
    """What a scan told: the m vectors v_i and poles p_i, or why the heads could not be told apart.

    ``conditioning`` is the smallest singular value of the scan's linear
    system over its largest (0 when two heads share their pole);
    ``residual`` the relative misfit of g by the separated heads.
    """

    vectors: np.ndarray
    poles: np.ndarray
    conditioning: float
    residual: float
    separable: bool
    reason: str = ""


def separate_heads(fractions: np.ndarray, values: np.ndarray, heads: int) -> Separation:
    """Fit g(w) = Σ_i v_i / (1 + w p_i) to the scan's values (T, d) by the linear form Q(w)·g(w) = G(w)."""
    count, dim = values.shape
    powers = fractions[:, None] ** np.arange(heads + 1)[None, :]  # (T, m+1): w^0 … w^m
    # Unknowns: e_1…e_m, then the d-vectors G_0…G_{m-1}; one equation per (sample, coordinate).
    left = (powers[:, None, 1:] * values[:, :, None]).reshape(count * dim, heads)
    right = -np.kron(powers[:, :heads], np.eye(dim))
    system = np.concatenate([left, right], axis=1)
    solution, _, _, singular = np.linalg.lstsq(system, -values.reshape(-1), rcond=None)
    conditioning = float(singular[-1] / singular[0]) if singular[0] > 0 else 0.0
    roots = np.roots(np.concatenate([solution[:heads][::-1], [1.0]]))
    empty = np.zeros((heads, dim))
    if len(roots) < heads or np.any(np.abs(roots.imag) > 1e-8 * np.abs(roots)):
        return Separation(empty, np.zeros(heads), conditioning, np.inf, False,
                          "the scan's denominator has complex or missing roots")
    poles = np.sort(-1.0 / roots.real)
    basis = 1.0 / (1.0 + fractions[:, None] * poles[None, :])
    vectors = np.linalg.lstsq(basis, values, rcond=None)[0]
    residual = float(np.linalg.norm(basis @ vectors - values) / np.linalg.norm(values))
    if conditioning < SEPARATION_FLOOR:
        return Separation(vectors, poles, conditioning, residual, False,
                          f"two heads attend alike at this token (conditioning {conditioning:.1e})")
    if np.any(poles <= -1.0):
        return Separation(vectors, poles, conditioning, residual, False, "a pole gives a negative attention ratio")
    return Separation(vectors, poles, conditioning, residual, True)


def alignment_costs(base: np.ndarray, answers: np.ndarray, projection_sum: np.ndarray, first_rows: np.ndarray,
                    rows: np.ndarray, coordinate: int) -> np.ndarray:
    """Cost (m × m) of labelling ``rows`` (the W_j[s, :] of coordinate s) as the heads of ``first_rows`` (s = 0).

    ``answers`` (n, k, d) answer sequences alternating ``base`` (n, d) and
    its flip at 0 and s.  For each row token, the 2m shares x (of the heads
    through row 0) and y (through row s) are solved by least squares; a head
    has one share, so cost[i, j] = Σ ``|x_i − y_j|`` over every row token and
    query is 0 for the right labelling.
    """
    heads = first_rows.shape[0]
    other = flipped(base, [0, coordinate])
    costs = np.zeros((heads, heads))
    slots = np.arange(answers.shape[1]) % 2
    for token, partner, mine in ((base, other, slots == 0), (other, base, slots == 1)):
        steps = partner - token  # (n, d): nonzero at 0 and s only
        for step, start, answer in zip(steps, token, answers[:, mine, :].mean(axis=1)):
            directions = np.concatenate([step[0] * first_rows, step[coordinate] * rows])  # (2m, d)
            shares = np.linalg.lstsq(directions.T, answer - start @ projection_sum, rcond=None)[0]
            costs += np.abs(shares[:heads, None] - shares[None, heads:])
    return costs


__all__ = ["SEPARATION_FLOOR", "Separation", "alignment_costs", "flipped", "scan_sequences", "scan_values",
           "separate_heads"]
