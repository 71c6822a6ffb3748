"""The property suite as a library: strategies, invariants and implementation adapters.

Every property here takes an *implementation* name ("zephon_ref", or "zephon" when
the conformance extra is installed) so the same checks run against both.
"""
