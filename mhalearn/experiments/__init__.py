"""Named experiments, the results store, execution backends and figures."""

from .registry import EXPERIMENTS, Experiment, get_experiment, register_experiment

# Each experiment module registers itself on import; add new ones here.
from . import learning  # noqa: E402,F401  error-vs-samples, heads-dependence
from . import families  # noqa: E402,F401  teacher-families
from . import sculpt_vs_m  # noqa: E402,F401  sculpt-vs-m
from . import agreement_rate  # noqa: E402,F401  agreement-rate
from . import learners_vs_m  # noqa: E402,F401  learners-vs-m
from . import random_features  # noqa: E402,F401  random-features (Fu, Guo, Bai & Mei)
from . import sparse_variables  # noqa: E402,F401  sparse-variables, -tuning (Edelman, Goel, Kakade & Zhang)

__all__ = ["EXPERIMENTS", "Experiment", "get_experiment", "register_experiment"]
