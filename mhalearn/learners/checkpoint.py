"""Phase checkpoints: a long fit keeps each phase's result as it ends, and a rerun resumes after the last kept.

At m = 3 and n = 10⁸, phases 1–4 of :class:`~mhalearn.SculptLearner` take
20–40 minutes, most of it in passes over the data.  With
``SculptLearner(checkpoint=DIR)`` each of them (and our moment route) saves
its result, with the state of the fit's random generator after it, to
``DIR/<key>/<phase>.pickle`` as soon as it ends.  A later fit with the same
key loads the saved phases instead of running them, restores the generator
and runs the rest: it computes what an uninterrupted fit computes, bit for
bit (tests/test_checkpoint.py).

The key is a hash of everything phases 1–4 and the moment route read: the
code (:func:`mhalearn.provenance.code_id`), the training stream
(:meth:`fingerprint` of its source: a hash of in-memory arrays, the graph
names of Dask arrays), the in-memory sample the moment route reads, m, the
body's settings, ``span_route`` and the generator's state at the start of
the phases (so ``random_state`` must be fixed for a rerun to find it).
Phases 5–6 are not kept and their settings are not in the key: a rerun
with another net budget reuses phases 1–4.

The files are pickles: load only checkpoint directories you wrote.  Each is
written to a temporary name and renamed, so an interrupted save leaves no
partial file.  They hold the phases' data (rows, slabs, the first pool):
0.35 GB at m = 3, n = 10⁸, two thirds of it the first pool.
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import numpy as np


class PhaseCheckpoint:
    """The saved phase results of one fit: ``run(name, rng, compute)`` loads or computes and saves.

    ``resumed`` lists, in order, the phases that were loaded.
    """

    def __init__(self, directory, key: str):
        self.path = Path(directory) / key
        self.resumed: list[str] = []

    def run(self, name: str, rng: np.random.Generator, compute):
        """``compute()``'s result: loaded from the checkpoint (restoring ``rng``) when saved, else computed and saved.

        A file that cannot be read is computed again, and a result that
        cannot be saved (disk full) is not kept: each with a
        :class:`CheckpointWarning`, since the fit itself need not fail.
        """
        file = self.path / f"{name}.pickle"
        if file.exists():
            try:
                with open(file, "rb") as handle:
                    result, state = pickle.load(handle)
            except Exception as error:  # damaged, or pickled by other library versions
                warnings.warn(f"checkpoint: {file} could not be read ({type(error).__name__}: {error}); "
                              f"computing {name} again", CheckpointWarning, stacklevel=2)
            else:
                rng.bit_generator.state = state
                self.resumed.append(name)
                return result
        result = compute()
        self._save(file, result, rng)
        return result

    def _save(self, file: Path, result, rng: np.random.Generator) -> None:
        partial = file.with_name(f"{file.name}.{os.getpid()}.partial")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with open(partial, "wb") as handle:
                pickle.dump((result, rng.bit_generator.state), handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(partial, file)
        except OSError as error:
            partial.unlink(missing_ok=True)
            warnings.warn(f"checkpoint: could not keep {file.stem} in {self.path} ({error}); the fit goes on "
                          f"without it", CheckpointWarning, stacklevel=3)


class CheckpointWarning(RuntimeWarning):
    """A phase could not be loaded from or saved to the checkpoint; the fit goes on."""


class NoCheckpoint:
    """Nothing kept: ``run`` computes (``SculptLearner(checkpoint=None)``)."""

    resumed: tuple = ()

    @staticmethod
    def run(name: str, rng: np.random.Generator, compute):
        return compute()


def open_checkpoint(directory, source, heads: int, settings, rng: np.random.Generator, *extra):
    """The checkpoint of a fit in ``directory`` (:func:`checkpoint_key`), or :class:`NoCheckpoint` when it is None."""
    if directory is None:
        return NoCheckpoint()
    return PhaseCheckpoint(directory, checkpoint_key(source, heads, settings, rng, *extra))


def checkpoint_key(source, heads: int, settings, rng: np.random.Generator, *extra) -> str:
    """The hash that names a fit's checkpoint (see the module docstring for what it covers).

    ``extra``: anything else the kept phases read, hashed as Dask tokenizes it.
    """
    from dask.base import tokenize

    from ..provenance import code_id

    return tokenize(code_id(), source.fingerprint(), heads, settings, rng.bit_generator.state, *extra)
