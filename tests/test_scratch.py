"""ScratchArrays: a pass's temporaries lent to one block at a time (mhalearn.data.scratch)."""

import pickle
import threading

import numpy as np
import pytest

from mhalearn.data.scratch import ScratchArrays


def test_a_set_is_lent_again_once_taken_back_and_never_to_two_blocks_at_once():
    scratch = ScratchArrays()
    with scratch.lent((5, 3), (5, 2)) as (first, second):
        assert first.shape == (5, 3) and second.shape == (5, 2) and first.dtype == np.float64
        with scratch.lent((5, 3), (5, 2)) as (other, _):
            assert not np.shares_memory(first, other)  # the first set is out: a second is made
    with scratch.lent((5, 3), (5, 2)) as (again, _):
        assert again is first or again is other
    with scratch.lent((4, 3), (4, 2)) as (shorter, _):
        assert shorter.shape == (4, 3)  # another shape, another set
    assert scratch.allocated == 3


def test_threads_never_share_a_set():
    scratch, seen, barrier = ScratchArrays(), [], threading.Barrier(4)

    def block(value):
        with scratch.lent((1000,)) as (array,):
            array[:] = value
            barrier.wait()  # all four hold a set at once
            seen.append(bool(np.all(array == value)))

    threads = [threading.Thread(target=block, args=(value,)) for value in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [True] * 4 and scratch.allocated == 4


def test_pickled_it_arrives_empty():
    scratch = ScratchArrays()
    with scratch.lent((10_000,)):
        pass
    copy = pickle.loads(pickle.dumps(scratch))
    assert isinstance(copy, ScratchArrays) and copy.allocated == 0 and len(pickle.dumps(scratch)) < 1000


def test_phase_one_gives_the_same_bits_on_lent_arrays(rng):
    from mhalearn.learners.chen_li.phase1_crude_sum import _crude_block_summary, token_sums

    X = np.sign(rng.standard_normal((300, 4, 6)))
    Y = rng.standard_normal((300, 4, 6))
    rows = np.sort(rng.choice(300, 200, replace=False))
    mean, label_sum = token_sums(X, Y, rows)
    scratch = ScratchArrays()
    for _ in range(2):  # new arrays, then the same ones lent again
        gram, moment = _crude_block_summary(X, Y, rows, scratch)
        np.testing.assert_array_equal(gram, 4 * mean.T @ mean)
        np.testing.assert_array_equal(moment, mean.T @ label_sum)
    assert scratch.allocated == 1


def test_a_set_may_mix_dtypes_and_clearing_drops_the_free_sets():
    scratch = ScratchArrays()
    with scratch.lent((3, 2), (3,), dtypes=(np.float64, np.uint8)) as (values, codes):
        assert values.dtype == np.float64 and codes.dtype == np.uint8
    with scratch.lent((3, 2), (3,)) as (other, _):
        assert other is not values  # float64 codes: another set
    scratch.clear()
    with scratch.lent((3, 2), (3,), dtypes=(np.float64, np.uint8)) as (again, _):
        assert again is not values
    assert scratch.allocated == 3
    with pytest.raises(ValueError, match="dtypes"):
        with scratch.lent((3, 2), (3,), dtypes=(np.float64,)):
            pass
