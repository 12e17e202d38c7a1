/* What every pgmux C extension starts with: Python's headers, and the stamp of the sources
 * it was built from (setup.py defines PGMUX_SOURCE_HASH and PGMUX_SOURCES; pgmux._native
 * reads them back to tell a stale build). */
#ifndef PGMUX_CEXTENSION_H
#define PGMUX_CEXTENSION_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef PGMUX_SOURCE_HASH
#define PGMUX_SOURCE_HASH ""
#endif
#ifndef PGMUX_SOURCES
#define PGMUX_SOURCES ""
#endif

/* Add SOURCE_HASH and SOURCES to the module; -1 with an error set on failure. */
static int
add_source_stamp(PyObject *module)
{
    if (PyModule_AddStringConstant(module, "SOURCE_HASH", PGMUX_SOURCE_HASH) < 0)
        return -1;
    return PyModule_AddStringConstant(module, "SOURCES", PGMUX_SOURCES);
}

#endif /* PGMUX_CEXTENSION_H */
