# The layout of pgmux.multiplexed for its compiled twin (pgmux._native); declared in
# multiplexed.pxd.
include "multiplexed.pxd"
