"""The generic stateful-loader layer of the property suite (no lanes, no zephon semantics).

``core`` holds the protocol (LoaderConfig, LoaderAdapter, LoaderRun, EpochSpec), ``machine``
the properties as Hypothesis state machines and ``check_property``, ``registry`` the adapter
names, ``adapters/`` one module per library, ``repro/`` one standalone script per failure the
suite found; ``python -m properties.loaders --loader NAME`` prints the table (docs/loaders.md).
"""
