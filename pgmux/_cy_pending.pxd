# The layout of pgmux.pending for its compiled twin (pgmux._native); declared in pending.pxd.
include "pending.pxd"
