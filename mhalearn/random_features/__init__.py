"""Random-feature attention (Fu, Guo, Bai & Mei): the models, their kernels, targets, bounds and experiment.

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023
([design: random-features]).

* :mod:`~mhalearn.random_features.kernels` — the random-feature attention
  and random-feature MLP features (Numba);
* :mod:`~mhalearn.random_features.models` — :class:`RandomFeatureAttention`
  and :class:`RandomFeatureMLP`, ridge regression on those features;
* :mod:`~mhalearn.random_features.ridge` — :func:`fit_ridge`, the ridge
  solver they wrap, block by block, with GCV over α;
* :mod:`~mhalearn.random_features.targets` — sequence inputs and the target
  functions of the paper's setting;
* :mod:`~mhalearn.random_features.bounds` — what the paper's bound predicts
  for each target and model;
* :mod:`~mhalearn.experiments.random_features` — the ``random-features``
  experiment (registered when :mod:`mhalearn.experiments` is imported).
"""

from .models import ACTIVATIONS, QK_MEANS, RandomFeatureAttention, RandomFeatureMLP
from .ridge import fit_ridge
from .targets import (
    INVARIANT_TARGETS,
    RANDOM_FEATURE_TARGETS,
    RandomFeatureTarget,
    make_random_feature_target,
    make_sequence_dataset,
    sequence_inputs,
    sphere_inputs,
)

__all__ = [
    "ACTIVATIONS",
    "INVARIANT_TARGETS",
    "QK_MEANS",
    "RANDOM_FEATURE_TARGETS",
    "RandomFeatureAttention",
    "RandomFeatureMLP",
    "RandomFeatureTarget",
    "fit_ridge",
    "make_random_feature_target",
    "make_sequence_dataset",
    "sequence_inputs",
    "sphere_inputs",
]
