"""The units a fit works in: the examples' shape and root mean squares, and the range float64 can carry.

Units: F(cX) with Θ/c² and W/c equals F(X) with Θ and W, and F is linear
in W, so the learners work on X / s_X and Y / s_Y (s the root mean square
of the entries) and map the layer back (:meth:`Units.to_data_units`):
every tolerance, ridge and stopping rule inside is then free of the data's
units, and learning c·Y gives c times the W.  Boolean inputs have s_X = 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Units:
    """The examples' shape (n, k, d) and the root mean squares ``x_scale``, ``y_scale`` a fit divides them by."""

    samples: int
    length: int
    dim: int
    x_scale: float
    y_scale: float

    # The layer is made again by its own class (a MultiHeadAttention): the data layer imports nothing of
    # mhalearn.attention, which builds on it.
    def to_data_units(self, layer):
        """A layer fitted on X / x_scale, Y / y_scale as the layer of X and Y (Θ / x_scale², W · y_scale / x_scale)."""
        return type(layer)(layer.thetas / self.x_scale ** 2, layer.ws * (self.y_scale / self.x_scale))

    def to_fit_units(self, layer):
        """A layer of X and Y as the layer of X / x_scale, Y / y_scale (the inverse of :meth:`to_data_units`)."""
        return type(layer)(layer.thetas * self.x_scale ** 2, layer.ws * (self.x_scale / self.y_scale))


#: The root mean square of X the learners accept: Θ is returned as Θ / rms(X)², which must stay finite
#: (Θ in the fit's units is O(1–10)) and rms(X)² must not overflow.
X_SCALE_RANGE = (1e-150, 1e154)
#: The largest factor rms(Y) / rms(X) (or its inverse) by which the returned W may differ from the fit's.
W_FACTOR_LIMIT = 1e305


def check_representable_units(x_scale: float, y_scale: float) -> None:
    """Refuse data whose units the returned layer could not carry in float64, before any work.

    The learners fit X / s_X and Y / s_Y and return Θ / s_X² and
    W · s_Y / s_X (see the module docstring): s_X outside
    :data:`X_SCALE_RANGE`, or s_Y / s_X beyond 10^±305, would make those
    overflow or vanish.  The message names X or Y and its root mean square.
    """
    low, high = X_SCALE_RANGE
    if not low <= x_scale <= high:
        raise ValueError(f"X: expected entries with a root mean square in [{low:g}, {high:g}] (the returned Θ "
                         f"scales as 1/rms(X)², which float64 cannot carry beyond), received {x_scale:.3g}; "
                         f"rescale X")
    if y_scale > 0.0 and abs(math.log10(y_scale) - math.log10(x_scale)) > math.log10(W_FACTOR_LIMIT):
        raise ValueError(f"Y: expected a root mean square within {W_FACTOR_LIMIT:g}× of X's (the returned W "
                         f"scales as rms(Y)/rms(X)), received {y_scale:.3g} against {x_scale:.3g}; rescale Y")


__all__ = ["W_FACTOR_LIMIT", "X_SCALE_RANGE", "Units", "check_representable_units"]
