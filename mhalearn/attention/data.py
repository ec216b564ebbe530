"""Input laws and labelled datasets drawn from a planted teacher ([design: object], [design: teacher])."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit

from .._memory import check_memory
from .._numba import one_thread
from .._validation import (
    as_float_array,
    as_generator,
    check_choice,
    check_instance,
    check_logit_range,
    check_positive_int,
    check_real,
)
from ..data.sources import MIN_BLOCK_SEQUENCES, warn_small_blocks
from ..data.token_codes import BITS
from ..seeding import draw_seed
from .kernels import forward_into
from .model import MultiHeadAttention

INPUT_LAWS = ("boolean", "gaussian")
#: Most blocks a lazy dataset may have: Dask walks every block of an array in Python whenever any of
#: it is computed (measured with make_dataset: computing its first block took 36 s at 10⁶ blocks and
#: 384 s at 10⁷, with 4.5 GB resident).
MAX_BLOCKS = 100_000


def _check_sequences_memory(bytes_per_entry: int, samples: int, length: int, dim: int, what: str,
                            name: str = "samples") -> None:
    """The memory budget's check (:mod:`mhalearn._memory`) for arrays of ``samples`` sequences of length × dim,
    naming ``name`` (the argument that set ``samples``)."""
    check_memory(bytes_per_entry * samples * length * dim, name, f"{samples} {what} of {length} × {dim} entries")


def check_dataset_memory(samples: int, length: int, dim: int, name: str = "samples") -> None:
    """The memory budget's check for what :func:`make_dataset` holds in memory: X, its labels and the
    teacher's output they are made of (float64 each), naming ``name``."""
    _check_sequences_memory(3 * 8, samples, length, dim, "labelled sequences", name)


def boolean_inputs(samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Inputs uniform on {±1}^{k×d}: float64 array of shape (samples, length, dim).

    Raises ``MemoryError`` naming ``samples``, before drawing, when the
    draw (9 bytes per entry: the int8 bits and the inputs) exceeds the
    memory budget (:func:`mhalearn.set_memory_budget`).
    """
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    dim = check_positive_int(dim, "dim")
    _check_sequences_memory(9, samples, length, dim, "Boolean sequences")
    bits = as_generator(rng).integers(0, 2, size=(samples, length, dim), dtype=np.int8)
    X = bits.astype(np.float64)
    X *= 2.0  # in place: no float64 temporaries next to X
    X -= 1.0
    return X


def gaussian_inputs(samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Inputs with i.i.d. standard normal entries, shape (samples, length, dim).

    Raises ``MemoryError`` naming ``samples``, before drawing, when the
    inputs exceed the memory budget (:func:`mhalearn.set_memory_budget`).
    """
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    dim = check_positive_int(dim, "dim")
    _check_sequences_memory(8, samples, length, dim, "Gaussian sequences")
    return as_generator(rng).standard_normal((samples, length, dim))


def draw_inputs(law: str, samples: int, length: int, dim: int, rng=None) -> np.ndarray:
    """Inputs from the named law (``"boolean"`` or ``"gaussian"``)."""
    check_choice(law, "law", INPUT_LAWS)
    sampler = boolean_inputs if law == "boolean" else gaussian_inputs
    return sampler(samples, length, dim, rng)


def add_label_noise(Y: np.ndarray, noise: float, rng=None) -> np.ndarray:
    """Y plus i.i.d. Gaussian noise of standard deviation ``noise`` (a new array)."""
    noise = check_real(noise, "noise", low=0.0)
    Y = as_float_array(Y, "Y", np.ndim(Y))
    if noise == 0.0:
        return np.array(Y, dtype=np.float64, copy=True)
    return Y + noise * as_generator(rng).standard_normal(np.shape(Y))


# A generated Boolean block draws its signs from 64-bit words, 64 signs a word, rather than one
# random draw per entry: word j of block b is SplitMix64's j-th output from a key that
# numpy's SeedSequence derives from (seed, b), mix(key + (j + 1)·γ), so any word is computed from
# its index alone (a counter-based generator), in a Numba loop, the same on every machine
# (integer arithmetic) and whoever draws the block.
_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


@njit(inline="always", cache=True)
def _splitmix64(key, counter):
    """SplitMix64's output number ``counter`` (from 1) of the stream whose state starts at ``key``."""
    z = key + counter * _GOLDEN_GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _draw_signs(key, out, codes):
    """out[s] = ±1 entries from the bits of words s·w + 1 … s·w + w of the stream ``key``, w = ⌈k·d / 64⌉:
    entry (a, c) is bit (a·d + c) mod 64 of the sequence's word (a·d + c) // 64, 1 → +1, 0 → −1.

    With ``codes`` (n, k, ⌈d / BITS⌉) not empty, also the tokens' codes
    (:func:`~mhalearn.data.token_codes.block_codes`: bit b of code g set where entry
    BITS·g + b is +1), read off the word where a sequence holds one, at no cost next to coding X afterwards.
    """
    n, k, d = out.shape
    entries = k * d
    words = (entries + 63) // 64
    flat = out.reshape(n, entries)
    groups = codes.shape[2]
    counter = np.uint64(0)
    for s in range(n):
        row = flat[s]
        word = np.uint64(0)
        for j in range(words):
            counter += np.uint64(1)
            word = _splitmix64(key, counter)
            start = 64 * j
            for bit in range(min(64, entries - start)):
                row[start + bit] = 2.0 * np.float64((word >> np.uint64(bit)) & np.uint64(1)) - 1.0
        if codes.shape[0] == 0:
            continue
        for a in range(k):
            for g in range(groups):
                first = BITS * g
                width = min(BITS, d - first)
                if words == 1:
                    code = (word >> np.uint64(a * d + first)) & np.uint64((1 << width) - 1)
                else:
                    code = np.uint64(0)
                    for b in range(width):
                        code |= np.uint64(row[a * d + first + b] > 0.0) << np.uint64(b)
                codes[s, a, g] = np.uint8(code)


@njit(cache=True, nogil=True)
def _draw_codes(key, codes, dim):
    """The ``codes`` (n, k, ⌈dim / BITS⌉) that :func:`_draw_signs` gives the same stream ``key``, its signs not
    written: entry (a, c) is bit (a·d + c) mod 64 of the sequence's word (a·d + c) // 64, as there."""
    n, k, groups = codes.shape
    entries = k * dim
    words = (entries + 63) // 64
    word = np.empty(words, dtype=np.uint64)
    counter = np.uint64(0)
    for s in range(n):
        for j in range(words):
            counter += np.uint64(1)
            word[j] = _splitmix64(key, counter)
        for a in range(k):
            for g in range(groups):
                first = a * dim + BITS * g
                width = min(BITS, dim - BITS * g)
                if words == 1:
                    code = (word[0] >> np.uint64(first)) & np.uint64((1 << width) - 1)
                else:
                    code = np.uint64(0)
                    for b in range(width):
                        entry = first + b
                        code |= ((word[entry // 64] >> np.uint64(entry % 64)) & np.uint64(1)) << np.uint64(b)
                codes[s, a, g] = np.uint8(code)


def boolean_codes(seed: int, index: int, codes: np.ndarray, dim: int) -> np.ndarray:
    """The codes of block ``index``'s Boolean tokens (:func:`boolean_block`'s ``codes``) into ``codes`` (size,
    length, ⌈dim / 6⌉) uint8, its signs not written: a fifth of the time of drawing them too (d = 12, k = 4)."""
    _draw_codes(sign_key(seed, index), codes, dim)
    return codes


def sign_key(seed: int, index: int) -> np.uint64:
    """The key of block ``index``'s sign words (:func:`labelled_block`): SeedSequence((seed, index)), spawn 0."""
    return np.random.SeedSequence([seed, index], spawn_key=(0,)).generate_state(1, np.uint64)[0]


def boolean_block(seed: int, index: int, size: int, length: int, dim: int, out: np.ndarray | None = None,
                  codes: np.ndarray | None = None) -> np.ndarray:
    """Block ``index`` of the Boolean inputs of a generated dataset: ``size`` sequences of length × dim signs,
    into ``out`` (C-contiguous float64) when given (:func:`labelled_block`), and their tokens' codes into
    ``codes`` (size, length, ⌈dim / 6⌉) uint8 when given (:func:`_draw_signs`)."""
    out = np.empty((size, length, dim)) if out is None else out
    _draw_signs(sign_key(seed, index), out, np.empty((0, 0, 0), dtype=np.uint8) if codes is None else codes)
    return out


def labelled_block(teacher, length: int, law: str, noise: float, seed: int, index: int,
                   size: int, codes: np.ndarray | None = None,
                   out=None) -> tuple[np.ndarray, np.ndarray]:
    """Block ``index`` of a generated dataset: ``size`` sequences and their labels, drawn from ``seed`` and ``index``.

    Boolean inputs are the bits of counter-based 64-bit words keyed by
    (seed, index) (:func:`boolean_block`); Gaussian inputs, then, for
    ``noise`` > 0, the labels' Gaussian noise, come from
    ``numpy.random.default_rng([seed, index])``.  The block is the same
    wherever and whenever it is drawn, which is what lets a pass re-draw it
    instead of storing it (:class:`~mhalearn.attention.teacher_source.TeacherSource`,
    ``make_dataset(..., chunks=...)``).  X and Y are the two halves of one
    (2, size, length, dim) array (:func:`_labelled_pairs`), ``out`` when given.  ``codes``
    (Boolean inputs only) receives the tokens' codes (:func:`boolean_block`).
    """
    X, Y = _labelled_pairs(teacher, length, law, noise, seed, index, size, codes, out)
    return X, Y


def _labelled_pairs(teacher, length: int, law: str, noise: float, seed: int, index: int, size: int,
                    codes: np.ndarray | None = None, out=None) -> np.ndarray:
    """:func:`labelled_block` as one array (2, size, length, dim): the inputs, then their labels, into ``out``
    when given (a (2, size, length, dim) array or a pair of arrays, each C-contiguous float64)."""
    pairs = np.empty((2, size, length, teacher.dim)) if out is None else out
    X, Y = pairs
    rng = np.random.default_rng([seed, index])
    if law == "boolean":
        boolean_block(seed, index, size, length, teacher.dim, out=X, codes=codes)
        check_logit_range(np.ones((1, 1, 1)), teacher.thetas)  # the inputs' entries are ±1
    else:
        X[...] = rng.standard_normal(X.shape)
        check_logit_range(X, teacher.thetas)
    forward_into(X, teacher.thetas, teacher.ws, Y)
    if noise > 0:
        Y += noise * rng.standard_normal(Y.shape)
    return pairs


def _stacked_block(teacher, length: int, law: str, noise: float, seed: int, samples: int, chunk: int,
                   block_id=None) -> np.ndarray:
    """:func:`labelled_block` number ``block_id[1]`` as one array (2, size, k, d): X and Y of one draw.

    A Dask task: the teacher's kernels run on one thread (:func:`~mhalearn._numba.one_thread`), as
    the learner's do, so a worker uses the cores it was given and no more.
    """
    index = block_id[1]
    with one_thread():
        return _labelled_pairs(teacher, length, law, noise, seed, index, min(chunk, samples - index * chunk))


def _member(pairs: list[np.ndarray], which: int) -> np.ndarray:
    """X (``which`` 0) or Y (1) of a block of :func:`_stacked_block` (the one block of a list), a view."""
    return pairs[0][which]


def _lazy_dataset(teacher, samples: int, length: int, law: str, noise: float, seed: int, chunk: int):
    """Dask arrays X, Y whose block b is :func:`labelled_block` b, drawn where and when it is computed.

    Every layer is blockwise: the graph is a rule per layer, not a task per block, so building the
    arrays costs the same at any number of blocks (slicing ``pairs[:, 0]`` would write a task per
    block: 2.3 GB and most of a minute at 10⁶ blocks).
    """
    import dask.array as da
    from dask.base import tokenize

    sizes = (chunk,) * (samples // chunk) + ((samples % chunk,) if samples % chunk else ())
    # The name says what the blocks are drawn from: two datasets of one seed but another teacher or
    # shape must not share task keys (a cluster would hand one's blocks to the other).
    token = tokenize(teacher.thetas, teacher.ws, samples, length, law, noise, seed, chunk)
    # X and Y of block b are two views of one task's array, so computing both draws the block once.
    pairs = da.map_blocks(_stacked_block, chunks=((2,), sizes, (length,), (teacher.dim,)), dtype=np.float64,
                          meta=np.empty((0, 0, 0, 0)), teacher=teacher, length=length, law=law, noise=noise,
                          seed=seed, samples=samples, chunk=chunk, name=f"labelled-blocks-{token}")
    # Blockwise over the pair axis without concatenating its one block (drop_axis would copy it).
    X, Y = (da.blockwise(_member, "nkd", pairs, "pnkd", which, None, concatenate=False, dtype=np.float64,
                         meta=np.empty((0, 0, 0))) for which in (0, 1))
    if law == "boolean":
        from ..data.dask_data import register_generated

        # A fit reads the stream these blocks are (a DaskTeacherSource): the same bits, its labels kept.
        register_generated(X, Y, "labelled-blocks", {"teacher": teacher, "samples": samples, "length": length,
                                                     "seed": seed, "noise": noise, "block_size": chunk})
    return X, Y


def make_dataset(teacher, samples: int, length: int, *, law: str = "boolean",
                 noise: float = 0.0, rng=None, chunks: int | None = None):

    """Draw ``(X, Y)`` with ``Y = teacher(X) + noise·N(0, I)``; ``teacher`` is a :class:`~mhalearn.MultiHeadAttention`.

    With ``chunks=None`` X and Y are NumPy arrays drawn at once.  With
    ``chunks`` an int they are lazy Dask arrays of blocks of ``chunks``
    sequences (the last block shorter): one seed is drawn from ``rng`` and
    block b is :func:`labelled_block` b, drawn on whichever worker computes
    it, so nothing of size ``samples`` is built or shipped and a dataset of
    10⁹ sequences costs nothing until a block is computed.  The two forms
    are different draws of the same law.

    Lazily, at most :data:`MAX_BLOCKS` blocks (more raise ``ValueError``
    naming ``chunks``), and blocks of fewer than :data:`~mhalearn.data.sources.MIN_BLOCK_SEQUENCES`
    sequences warn: a fit on them spends its time scheduling tasks.

    Raises ``MemoryError`` naming ``samples`` (``chunks`` for Dask arrays),
    before drawing, when what is drawn at once exceeds the memory budget
    (:func:`mhalearn.set_memory_budget`): three float64 arrays of shape
    (samples, length, dim) — the inputs, the teacher's outputs and the
    labels — or, lazily, of shape (chunks, length, dim) per block.
    """
    check_instance(teacher, "teacher", MultiHeadAttention, "a MultiHeadAttention")
    samples = check_positive_int(samples, "samples")
    length = check_positive_int(length, "length")
    rng = as_generator(rng)
    if chunks is not None:
        chunks = check_positive_int(chunks, "chunks")
        blocks = -(-samples // chunks)
        if blocks > MAX_BLOCKS:
            raise ValueError(f"chunks: expected at most {MAX_BLOCKS:,} blocks, received chunks={chunks}, which makes "
                             f"{blocks:,} blocks of {samples:,} sequences (Dask walks every block whenever any is "
                             f"computed); pass chunks >= {-(-samples // MAX_BLOCKS):,}")
        warn_small_blocks(samples, blocks, "chunks", f"pass chunks >= {MIN_BLOCK_SEQUENCES}")
        check_choice(law, "law", INPUT_LAWS)
        noise = check_real(noise, "noise", low=0.0)
        # Per block: the inputs, the outputs, the labels and the stacked pair (two arrays).
        check_memory(5 * 8 * min(chunks, samples) * length * teacher.dim, "chunks",
                     f"blocks of {min(chunks, samples)} labelled sequences of {length} × {teacher.dim} entries")
        return _lazy_dataset(teacher, samples, length, law, noise, draw_seed(rng), min(chunks, samples))
    check_dataset_memory(samples, length, teacher.dim)
    X = draw_inputs(law, samples, length, teacher.dim, rng)
    return X, add_label_noise(teacher.predict(X), noise, rng)


def load_dataset(path, *, chunks: int | None = None):
    """A dataset on disk as lazy Dask arrays X, Y (nothing is read until a block is computed).

    Parameters
    ----------
    path : str or Path
        Either a directory of NumPy shards ``X_<name>.npy`` and
        ``Y_<name>.npy`` (read memory-mapped, one shard per block unless
        ``chunks`` says otherwise; shards are taken in the sorted order of
        their names, and each ``X`` shard needs its ``Y`` shard), or a zarr
        store (``*.zarr``) holding the arrays ``X`` and ``Y`` (needs the
        optional dependency zarr: ``pip install mhalearn[data]``).
    chunks : int, optional
        Sequences per block (default: the shards' or the store's own blocks).

    Returns
    -------
    X, Y : dask.array.Array of shape (n, k, d)
    """
    import dask.array as da

    path = Path(path)
    if path.suffix == ".zarr":
        try:
            import zarr  # noqa: F401  (dask reads the store through it)
        except ImportError:
            raise ImportError(f"path: reading the zarr store {path} needs zarr (pip install mhalearn[data])") \
                from None
        X, Y = (da.from_zarr(str(path), component=name) for name in ("X", "Y"))
    elif path.is_dir():
        x_names, y_names = ([shard.name[2:] for shard in sorted(path.glob(f"{name}_*.npy"))] for name in "XY")
        if not x_names or x_names != y_names:
            raise ValueError(f"path: expected one Y_<name>.npy for every X_<name>.npy in {path}, received X "
                             f"shards {x_names} and Y shards {y_names}")
        X, Y = (_concatenated_shards([path / f"{name}_{shard}" for shard in x_names]) for name in "XY")
    else:
        raise ValueError(f"path: expected a directory of X_*.npy and Y_*.npy shards or a *.zarr store, "
                         f"received {str(path)!r}")
    if chunks is not None:
        chunks = check_positive_int(chunks, "chunks")
        X, Y = X.rechunk((chunks, -1, -1)), Y.rechunk((chunks, -1, -1))
    return X, Y


def _concatenated_shards(shards: list[Path]):
    """The ``.npy`` files ``shards`` as one Dask array along n, one block per shard.

    Only the headers are read here; each block memory-maps its file where
    it is computed (a worker on a shared file system), so no shard's data
    travels in the task graph.
    """
    import dask
    import dask.array as da

    blocks = []
    for shard in shards:
        header = np.load(shard, mmap_mode="r")
        blocks.append(da.from_delayed(dask.delayed(_read_shard)(str(shard)), shape=header.shape,
                                      dtype=header.dtype))
    return da.concatenate(blocks, axis=0)


def _read_shard(path: str) -> np.ndarray:
    """One ``.npy`` shard, memory-mapped: only the entries a task uses are read."""
    return np.load(path, mmap_mode="r")
