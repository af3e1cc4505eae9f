"""Prove a plan correct and within its memory bound with z3, and check a per-device memory budget.

Shows: ``plan.verify()`` (a certificate for every global shape the types allow), the refutation
z3 gives for a hand-built plan that gathers the whole array, and ``proofs.check_budget`` proving
a budget at one size and refuting it, with the shape that breaks it, for growing sizes.

Run: ``python examples/02_verify.py`` (no devices needed: nothing is executed).
"""

from proofs import VerificationError, check_budget
from redist import AllGather, DynSlice, Plan, redistribute
from spmd_types import Mesh, parse

mesh = Mesh({"x": 2, "y": 4})
plan = redistribute("f32[1024@x,1024@y]", "f32[1024@y,1024@x]", mesh)
cert = plan.verify()
print(cert)
assert cert.ok

# Gather everything, then slice: correct, but the whole array sits on every device.
src = parse("f32[1024@x,1024@y]", mesh)
naive = Plan.build(src, (AllGather(0, ("x",)), AllGather(1, ("y",)), DynSlice(0, ("y",)), DynSlice(1, ("x",))))
try:
    naive.verify()
    raise SystemExit("z3 should have refuted the gather-everything plan")
except VerificationError as e:
    print(f"\nrefuted as expected: {e}\n")

budget = 1 << 20  # 1 MiB per device
print(check_budget(plan, budget))                           # the plan's own shape: fits
print(check_budget(naive, budget))                          # the naive plan: does not
grow = check_budget(plan, budget, max_shape=[None, 4096])   # any rows, up to 4096 columns
print(grow)
assert grow.status == "exceeds"
