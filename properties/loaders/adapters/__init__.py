"""Adapters of the generic stateful-loader suite, one module per library (imported on demand)."""
