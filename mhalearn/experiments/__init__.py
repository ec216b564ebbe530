"""Named experiments, the results store, execution backends and figures."""

# Each experiment module registers itself on import; add new ones here.
from . import (
    agreement_rate,  # noqa: F401  agreement-rate
    families,  # noqa: F401  teacher-families
    learners_vs_m,  # noqa: F401  learners-vs-m
    learning,  # noqa: F401  error-vs-samples, heads-dependence
    random_features,  # noqa: F401  random-features (Fu, Guo, Bai & Mei)
    samples_to_eps,  # noqa: F401  samples-to-eps
    sculpt_vs_m,  # noqa: F401  sculpt-vs-m
    sparse_variables,  # noqa: F401  sparse-variables, -tuning (Edelman, Goel, Kakade & Zhang)
)
from .registry import EXPERIMENTS, Experiment, get_experiment, register_experiment

__all__ = ["EXPERIMENTS", "Experiment", "get_experiment", "register_experiment"]
