# The layout of pgmux.pool.counters for its compiled twin (pgmux._native); declared in counters.pxd.
include "counters.pxd"
