# The layout of pgmux.transaction_control for its compiled twin (pgmux._native); declared in
# transaction_control.pxd.
include "transaction_control.pxd"
