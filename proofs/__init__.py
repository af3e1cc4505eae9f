"""proofs: z3 models of the steps and certificates of plans.

Importing this package registers ``verify_plan`` with ``redist.plan`` so ``Plan.verify()`` works
(``redist`` never imports ``proofs``: it is a plug-in of a higher layer, docs/design.md section 1).
"""

from proofs.budget import BudgetResult, check_budget
from proofs.certificate import Certificate, Property, plan_verify, verify_plan
from proofs.errors import VerificationError, VerifyArgumentError
from proofs.link import Outcome, prove_link
from redist.plan import register_verifier

register_verifier(plan_verify)

__all__ = [
    "BudgetResult", "Certificate", "Outcome", "Property", "VerificationError", "VerifyArgumentError", "check_budget",
    "plan_verify", "prove_link", "verify_plan",
]
