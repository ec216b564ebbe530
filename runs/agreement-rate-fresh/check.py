"""Both agreement-rate laws, fitted on runs/agreement-rate/agreement-rate.db, against fresh teachers'
rates (τ = 0.1, rows per row).

    python runs/agreement-rate-fresh/check.py        (from the repository root)
"""
from mhalearn.experiments.agreement_rate import fresh_teacher_check
from mhalearn.experiments.store import ResultStore

with ResultStore("runs/agreement-rate/agreement-rate.db", readonly=True) as store:
    fitted = store.rows("agreement-rate")
with ResultStore("runs/agreement-rate-fresh/agreement-rate-fresh.db", readonly=True) as store:
    fresh = store.rows("agreement-rate")
print("| law | (m, k) | fresh teachers | predicted rate | measured median | predicted / measured |")
print("| --- | --- | --- | --- | --- | --- |")
for check in fresh_teacher_check(fitted, fresh):
    print(f"| {check['law']} | {check['cell']} | {check['teachers']} | {check['predicted']:.3g} | "
          f"{check['measured_median']:.3g} | {check['ratio']:.3g} |")
