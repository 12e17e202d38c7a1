# The layout of pgmux.session for its compiled twin (pgmux._native); declared in session.pxd.
include "session.pxd"
