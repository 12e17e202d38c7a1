# The C functions of pgmux.transaction_control, for its compiled twin (pgmux._native): what a
# transaction runs at its start and its COMMIT.

cpdef str begin_statement(isolation, readonly, deferrable)
cpdef commit_open(end)
