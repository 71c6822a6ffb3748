"""Reading other implementations' state: zephon 0.2.0 checkpoints, translated into zephon_ref's.

:func:`is_zephon_state` recognises a zephon 0.2.0 engine state dict;
:func:`from_zephon_state` translates it into the dict ``Engine.state_dict()``
writes, refusing with a typed error whatever it cannot translate or finds
inconsistent; :func:`restore_zephon_state` restores one into a pipeline (the explicit entry
point: ``Pipeline.restore`` never sniffs).  :mod:`zephon_ref.compat.check` holds the ``ckpt
check`` logic.
"""

from zephon_ref.compat.zephon_state import from_zephon_state, is_zephon_state, restore_zephon_state

__all__ = ["from_zephon_state", "is_zephon_state", "restore_zephon_state"]
