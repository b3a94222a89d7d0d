"""Arms: the implementations measured side by side.

Each module builds harness.Candidate objects for one library; a candidate is one
configuration the library offers at the shape (backend, paging, split count, GQA
packing), and the suite names each arm's winner. A library that cannot run here
raises harness.Unavailable (or any exception), which the suites record as
"unavailable: <why>" instead of stopping.
"""
from ..harness import Candidate, Unavailable, unavailable_reason

__all__ = ["Candidate", "Unavailable", "unavailable_reason"]
