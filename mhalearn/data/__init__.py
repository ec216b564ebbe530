"""The data layer: how examples reach a learner, one floor below the learners ([design: learners]).

- :mod:`mhalearn.data.fit_data` — the examples of a fit, prepared once:
  :func:`~mhalearn.data.fit_data.check_examples`, then
  :func:`~mhalearn.data.fit_data.prepare_fit_data` (measure the units,
  split off the held-out set), which gives the learner a
  :class:`~mhalearn.data.fit_data.FitData`;
- :mod:`mhalearn.data.units` — the units a fit works in
  (:class:`~mhalearn.data.units.Units`) and the range float64 can carry;
- :mod:`mhalearn.data.sources` — examples as blocks a pass maps over
  (:class:`~mhalearn.data.sources.Source`, the protocol; arrays in memory);
- :mod:`mhalearn.data.dask_data` — Dask arrays: their checks, units and
  split as block passes, and their source;
- :mod:`mhalearn.data.token_codes` — Boolean tokens named by one byte per
  six entries, which sources keep and the pass kernels read;
- :mod:`mhalearn.data.checkpoint` and :mod:`mhalearn.data.phase_files` —
  phase results kept as a long fit goes, and their file format.

The package imports nothing of :mod:`mhalearn.learners`, and knows of no
planted layer: a stream generated from one is a source defined beside the
generators, in :mod:`mhalearn.attention`.
"""
