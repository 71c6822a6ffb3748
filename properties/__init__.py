"""The property suite as a library: strategies, invariants, stateful machines and adapters.

Any implementation of zephon's semantics plugs in through one adapter
(properties/adapters.py: zephon_ref inline and threads, zephon 0.2.0, or your own);
properties/machines.py and properties/conformance.py then run every property against
it (``python -m properties.conformance --impl NAME``): the oracle row against zephon_ref, the
lineage row against plain definitions (properties/lineage.py), the resume rows.  The item
normal form an adapter produces is properties/normal_form.py.  The invariants themselves are
pure functions in sim/invariants.py and sim/checker.py, shared with the simulator;
properties/invariants.py re-exports them.  docs/properties.md is the guide.
"""
