"""What watching a fit costs the learner: stored fit time with and without a teacher observer.

``mhalearn.evaluation.fit_timed`` fits a learner with a
:class:`mhalearn.TeacherObserver` when it is given the teacher and stores the
learner's own time (the observer's is kept apart).  For SculptLearner at
m = 2, d = 12, k = 4, n = 100 000 (planted by ``evaluation.plant_instance``,
seeds 0..S−1), each seed is fitted R times with and R times without the
teacher, alternating, and the script prints per seed the best stored time of
each (the least disturbed by other load), their ratio, the observer's own
time and whether the fitted layers are bitwise equal.

    python bench/observer_cost.py [--seeds 3] [--repeats 2] [--samples 100000]
"""

import argparse

import numpy as np

from mhalearn import SculptLearner
from mhalearn.evaluation import fit_timed, plant_instance


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--samples", type=int, default=100_000)
    args = parser.parse_args()
    print("seed | best stored s with teacher | without | ratio | observer s (max) | same layers")
    ratios = []
    for seed in range(args.seeds):
        teacher, X, Y, _ = plant_instance(heads=2, dim=12, length=4, samples=args.samples, seed=seed)
        times, observers, layers = {True: [], False: []}, [], {}
        # Alternate with and without, so a drift in machine load falls on both.
        for watched in [True, False] * args.repeats:
            learner = SculptLearner(2, random_state=seed)
            seconds, observer = fit_timed(learner, X, Y, teacher if watched else None)
            times[watched].append(seconds)
            observers += [observer] if watched else []
            layers.setdefault(watched, []).append(learner.model_)
        with_s, without_s = min(times[True]), min(times[False])
        first = layers[False][0]
        same = all(np.array_equal(layer.thetas, first.thetas) and np.array_equal(layer.ws, first.ws)
                   for layer in layers[True] + layers[False])
        observer_s = max(observer.seconds for observer in observers)
        ratios.append(with_s / without_s)
        print(f"{seed} | {with_s:.2f} | {without_s:.2f} | {ratios[-1]:.3f} | {observer_s:.2f} | {same}",
              flush=True)
    print(f"ratio with / without: median {np.median(ratios):.3f}, max {np.max(ratios):.3f}")


if __name__ == "__main__":
    main()
