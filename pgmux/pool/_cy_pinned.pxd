# The layout of pgmux.pool.pinned for its compiled twin (pgmux._native); declared in pinned.pxd.
include "pinned.pxd"
