"""The read side, pure: no Redis, no clock (``now`` and the config are arguments)."""

PACKERS = ("c", "numpy")
"""The exact packers ``packing.use_packer`` accepts (named here, importing nothing, so the
settings check a name without loading numpy)."""
