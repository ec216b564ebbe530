#!/bin/sh
# The README's path at m = 3, d = 12, k = 4, 3e7 on main and on this branch, one after the other; each
# process measures its labelling pass and its fit back to back (the ratio is the figure).
# Usage: sh runs/fit-speed/readme_path_before_after.sh /work/main /work/wt72
for checkout in "$@"; do
    echo "== $checkout ($(git -C "$checkout" log --oneline -1)) $(uptime)"
    PYTHONPATH="$checkout" python3 "$2/runs/fit-speed/readme_path.py" --samples ${SAMPLES:-3e7} --teacher 7 --seed 0
done
