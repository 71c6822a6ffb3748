"""sim: the deterministic discrete-event simulator; it drives zephon_ref and is never imported by it."""
