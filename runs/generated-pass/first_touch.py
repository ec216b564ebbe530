"""What writing new memory costs on this machine: the kept labels' 3.85 GB of an m = 3 fit at 3·10⁷, in a fresh process.

One array the size of the labels a fit of ``bench/passes.py`` keeps (153 blocks of 65 536 sequences, k = 4,
d = 12, float64) is allocated and written whole, three times, each after the last one was freed: the
first write faults in pages this process never had, the next ones pages it just gave back.  Then the
guest kernel's free page reporting settings (the pages a VM hands back to its host), where it has them.

    python runs/generated-pass/first_touch.py > runs/generated-pass/first-touch-<machine>.txt
"""

import os
import time

import numpy as np

BYTES = 153 * 65_536 * 4 * 12 * 8
REPORTING = "/sys/module/page_reporting/parameters"


def write_new(size: int) -> tuple[float, float]:
    """Wall and CPU seconds to allocate ``size`` bytes of float64 and write every entry once."""
    wall, cpu = time.perf_counter(), time.process_time()
    array = np.empty(size // 8)
    array.fill(1.0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    del array
    return wall, cpu


def main():
    print(f"{os.cpu_count()} CPUs; one array of {BYTES / 2**30:.2f} GiB written whole, freed, three times")
    for attempt in range(3):
        wall, cpu = write_new(BYTES)
        print(f"write {attempt}: {wall:.2f} s wall, {cpu:.2f} s CPU, {cpu / (BYTES / 2**30):.2f} CPU s a GiB")
    if os.path.isdir(REPORTING):
        values = {name: open(os.path.join(REPORTING, name)).read().strip() for name in sorted(os.listdir(REPORTING))}
        print("free page reporting:", ", ".join(f"{name} = {value}" for name, value in values.items()))
    else:
        print("free page reporting: no page_reporting module parameters")


if __name__ == "__main__":
    main()
