"""Generated Boolean blocks: signs from counter-based 64-bit words, and the forward kernel that labels them."""

import os
import subprocess
import sys

import numpy as np
import pytest

import mhalearn
from mhalearn import _numba
from mhalearn.attention import kernels, reference
from mhalearn.attention.data import boolean_block, boolean_codes, labelled_block, sign_key
from mhalearn.data.token_codes import block_codes, code_groups, signs_of_codes

MASK = (1 << 64) - 1


def _splitmix64_words(key: int, count: int) -> list[int]:
    """SplitMix64 (Steele, Lea & Flood 2014) in Python integers: the stream from state ``key``."""
    words = []
    for _ in range(count):
        key = (key + 0x9E3779B97F4A7C15) & MASK
        z = key
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        words.append(z ^ (z >> 31))
    return words


def test_python_splitmix64_gives_the_published_stream():
    # The first outputs from seed 1234567 of the reference implementation (xoshiro.di.unimi.it/splitmix64.c).
    assert _splitmix64_words(1234567, 3) == [6457827717110365317, 3203168211198807973, 9817491932198370423]


@pytest.mark.parametrize("length, dim", [(4, 12), (5, 14), (1, 1), (3, 64)])
def test_signs_are_the_bits_of_the_blocks_words(length, dim):
    """Entry (a, c) of sequence s is bit (a·d + c) mod 64 of word s·w + (a·d + c) // 64, w = ⌈k·d / 64⌉
    (5 × 14 = 70 entries: two words a sequence, the second one partly used)."""
    size, seed, index = 37, 2024, 5
    X = boolean_block(seed, index, size, length, dim)
    entries = length * dim
    per_sequence = -(-entries // 64)
    words = _splitmix64_words(int(sign_key(seed, index)), size * per_sequence)
    expected = np.array([[1.0 if words[s * per_sequence + p // 64] >> (p % 64) & 1 else -1.0
                          for p in range(entries)] for s in range(size)]).reshape(size, length, dim)
    np.testing.assert_array_equal(X, expected)
    # The key is SeedSequence's, a function of (seed, index) alone: another block has other signs.
    assert not np.array_equal(X, boolean_block(seed, index + 1, size, length, dim))


@pytest.mark.parametrize("length, dim", [(4, 12), (5, 14), (1, 1), (3, 7), (2, 40)])
def test_codes_drawn_with_the_signs_are_those_of_the_signs(length, dim):
    """The codes read off a sequence's words (one word: 4 × 12, 1 × 1, 3 × 7) or off its entries (more
    words) are block_codes of the signs drawn."""
    codes = np.full((29, length, code_groups(dim)), 255, dtype=np.uint8)
    X = boolean_block(3, 1, 29, length, dim, codes=codes)
    expected = np.empty_like(codes)
    assert block_codes(X, expected)
    np.testing.assert_array_equal(codes, expected)
    np.testing.assert_array_equal(X, boolean_block(3, 1, 29, length, dim))  # the same signs with codes or not
    # Drawn alone (a kept block read again), the codes are the same, and name the same signs.
    alone = boolean_codes(3, 1, np.full_like(codes, 255), dim)
    np.testing.assert_array_equal(alone, expected)
    np.testing.assert_array_equal(signs_of_codes(alone, dim), X)


def test_signs_are_balanced_and_uncorrelated():
    X = boolean_block(7, 0, 1 << 16, 4, 12).reshape(1 << 16, 48)
    n = X.shape[0]
    # Each of the 48 positions is a fair coin: within 5 standard deviations (1/√n) of 0.
    assert np.abs(X.mean(axis=0)).max() < 5 / np.sqrt(n)
    # And the positions are uncorrelated: the off-diagonal correlations are within 5/√n.
    correlation = X.T @ X / n
    assert np.abs(correlation - np.eye(48)).max() < 5 / np.sqrt(n)


def test_a_labelled_block_labels_its_signs_as_the_numpy_reference_does():
    teacher = mhalearn.sample_teacher(4, 12, rng=3)
    X, Y = labelled_block(teacher, 4, "boolean", 0.0, 11, 2, 1000)
    np.testing.assert_array_equal(X, boolean_block(11, 2, 1000, 4, 12))
    expected = reference.forward(X, teacher.thetas, teacher.ws)
    assert np.abs(Y - expected).max() <= 1e-12 * np.abs(expected).max()
    np.testing.assert_array_equal(Y, teacher.predict(X))


@pytest.mark.parametrize("shape", [(1, 4, 12, 4), (29, 4, 12, 4), (45, 3, 5, 2), (19, 7, 9, 3), (17, 16, 16, 4)])
def test_forward_of_a_sequence_does_not_depend_on_its_batch_nor_on_the_threads(rng, shape):
    """The forward kernel computes 8 sequences side by side (one a lane): a sequence's output is the
    same bits in any lane, group, chunk and on any number of threads."""
    n, k, d, m = shape
    X = rng.choice([-1.0, 1.0], size=(n, k, d))
    X[::3] = rng.standard_normal((len(X[::3]), k, d))
    thetas, ws = rng.standard_normal((m, d, d)) / d, rng.standard_normal((m, d, d))
    alone = np.concatenate([kernels.forward(X[s:s + 1], thetas, ws) for s in range(n)])
    shifted = kernels.forward(X[3:], thetas, ws)  # every sequence in another lane
    np.testing.assert_array_equal(shifted, alone[3:])
    for threads in range(1, _numba.numba.config.NUMBA_NUM_THREADS + 1):
        with _numba.dispatch_mode("parallel"), _numba.kernel_threads(threads):
            np.testing.assert_array_equal(kernels.forward(X, thetas, ws), alone)
    expected = reference.forward(X, thetas, ws)
    assert np.abs(alone - expected).max() <= 1e-12 * np.abs(expected).max()


_ON_OTHER_CPU = """
import sys
import numpy as np
import mhalearn
from mhalearn.attention.data import labelled_block
teacher = mhalearn.sample_teacher(4, 12, rng=3)
X, Y = labelled_block(teacher, 4, "boolean", 0.0, 11, 2, 1000)
np.save(sys.argv[1], np.stack([X, Y]))
"""


@pytest.mark.slow
def test_another_cpu_draws_the_same_signs_and_labels_within_1e_12(tmp_path):
    """What [design: kernels] promises across CPUs: the same signs (integer arithmetic), labels within
    1e-12 of the NumPy reference, not necessarily the same bits.  The other CPU is this one compiled for
    the x86-64 baseline (SSE2, no fused multiply-add), in a process with a cache of its own."""
    if os.uname().machine not in ("x86_64", "AMD64"):
        pytest.skip("the baseline target named here is x86-64's")
    path = tmp_path / "blocks.npy"
    env = dict(os.environ, NUMBA_CPU_NAME="x86-64", NUMBA_CPU_FEATURES="", NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", _ON_OTHER_CPU, str(path)], env=env, check=True, timeout=900)
    X_other, Y_other = np.load(path)
    teacher = mhalearn.sample_teacher(4, 12, rng=3)
    X, Y = labelled_block(teacher, 4, "boolean", 0.0, 11, 2, 1000)
    np.testing.assert_array_equal(X_other, X)
    expected = reference.forward(X, teacher.thetas, teacher.ws)
    for labels in (Y, Y_other):
        assert np.abs(labels - expected).max() <= 1e-12 * np.abs(expected).max()
