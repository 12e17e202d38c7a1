/* pgmux.types._crows: the compiled twin of pgmux/types/rows.py's row decoders.
 *
 * RowDecoder(kinds, decoders, checked) is one result shape: for each column the kind of
 * its decoder (one of the constants below, chosen by rows.py from the decoder's identity;
 * CALL for any other decoder) and the decoder itself. Calling it decodes one DataRow
 * payload to a tuple; decode_run() decodes DataRow messages back to back straight from a
 * chunk of the read buffer into a list, with no bytes object per row.
 *
 * One behaviour, two speeds: a value is built here only in the common case the Python
 * decoder would build the same value for (a date in date's range, UTF-8 text, ...);
 * anything else calls the column's Python decoder on the value's bytes. A row that is
 * malformed, or whose decoding raises, is handed to the Python path whole: __call__
 * returns checked(payload, decoders) (rows.decode_row_checked, which raises the
 * ProtocolError or the decoder's error), decode_run() stops and returns the row's offset.
 * Every length is checked against the end of its message before a byte is read.
 */
#include "../_cextension.h"
#include <datetime.h>
#include <stddef.h>


#include "_cvalues.h"

/* -- RowDecoder ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t columns;
    unsigned char *kinds;
    PyObject *decoders;  /* tuple */
    PyObject *listed;    /* the same decoders as a list, for checked() */
    PyObject *checked;   /* rows.decode_row_checked */
    vectorcallfunc vectorcall;
} RowDecoder;

static void
row_decoder_dealloc(RowDecoder *self)
{
    PyObject_GC_UnTrack(self);
    PyMem_Free(self->kinds);
    Py_XDECREF(self->decoders);
    Py_XDECREF(self->listed);
    Py_XDECREF(self->checked);
    PyObject_GC_Del(self);
}

static int
row_decoder_traverse(RowDecoder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->decoders);
    Py_VISIT(self->listed);
    Py_VISIT(self->checked);
    return 0;
}

static int
row_decoder_clear(RowDecoder *self)
{
    Py_CLEAR(self->decoders);
    Py_CLEAR(self->listed);
    Py_CLEAR(self->checked);
    return 0;
}

/* Whether the error set now may be handed to the Python path (an Exception, not a
 * KeyboardInterrupt, SystemExit or GreenletExit, which propagate). */
static int
recoverable(void)
{
    return PyErr_ExceptionMatches(PyExc_Exception);
}

/* One DataRow payload p[0:n] -> a tuple; NULL with an Exception set: hand the row back. */
static PyObject *
decode_payload(RowDecoder *self, const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t pos = 2, i, columns = self->columns;
    PyObject *row;
    if (n < 2 || read_i16(p) != columns) {
        PyErr_SetString(PyExc_ValueError, "malformed DataRow");
        return NULL;
    }
    row = PyTuple_New(columns);
    if (row == NULL)
        return NULL;
    for (i = 0; i < columns; i++) {
        long size;
        PyObject *value;
        if (n - pos < 4)
            goto malformed;
        size = read_i32(p + pos);
        pos += 4;
        if (size == -1) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(row, i, Py_None);
            continue;
        }
        if (size < 0 || size > n - pos)
            goto malformed;
        value = decode_value(self->kinds[i], p + pos, size,
                             PyTuple_GET_ITEM(self->decoders, i));
        if (value == NULL) {
            Py_DECREF(row);
            return NULL;
        }
        PyTuple_SET_ITEM(row, i, value);
        pos += size;
    }
    if (pos != n)
        goto malformed;
    return row;
malformed:
    Py_DECREF(row);
    PyErr_SetString(PyExc_ValueError, "malformed DataRow");
    return NULL;
}

static PyObject *
hand_back(RowDecoder *self, PyObject *payload)
{
    PyObject *args[2] = {payload, self->listed};
    return PyObject_Vectorcall(self->checked, args, 2, NULL);
}

static PyObject *
row_decoder_vectorcall(RowDecoder *self, PyObject *const *args, size_t nargsf,
                       PyObject *kwnames)
{
    PyObject *payload, *row;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a row decoder takes one payload");
        return NULL;
    }
    payload = args[0];
    if (!PyBytes_CheckExact(payload))  /* a large message's bytearray: the Python path */
        return hand_back(self, payload);
    row = decode_payload(self, (const unsigned char *)PyBytes_AS_STRING(payload),
                         PyBytes_GET_SIZE(payload));
    if (row != NULL || !recoverable())
        return row;
    PyErr_Clear();
    return hand_back(self, payload);
}

static PyObject *
row_decoder_call(RowDecoder *self, PyObject *args, PyObject *kwargs)
{
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "a row decoder takes one payload");
        return NULL;
    }
    return row_decoder_vectorcall(self, &PyTuple_GET_ITEM(args, 0),
                                  (size_t)PyTuple_GET_SIZE(args), NULL);
}

/* Decode the DataRow messages back to back in p[start:end] into rows; *stop: the offset of
 * the first one not decoded (end when all were). -1 for an error that propagates. */
static int
decode_messages(RowDecoder *self, const unsigned char *p, Py_ssize_t start, Py_ssize_t end,
                PyObject *rows, Py_ssize_t *stop)
{
    Py_ssize_t pos;
    for (pos = start; pos < end;) {
        long length;
        PyObject *row;
        int appended;
        if (end - pos < 5 || p[pos] != 'D')
            break;
        length = read_i32(p + pos + 1);
        if (length < 4 || length > end - pos - 1)
            break;
        row = decode_payload(self, p + pos + 5, length - 4);
        if (row == NULL) {
            if (!recoverable())
                return -1;
            PyErr_Clear();
            break;
        }
        appended = PyList_Append(rows, row);
        Py_DECREF(row);
        if (appended < 0)
            return -1;
        pos += 1 + length;
    }
    *stop = pos;
    return 0;
}

/* decode_run(data, start, end, rows) -> offset: decode the DataRow messages back to back
 * in data[start:end] and append their tuples to rows. Returns end when all were decoded,
 * else the offset of the first message it hands back (malformed, not a DataRow, or a row
 * whose decoding raised): the caller decodes that one the slow way and continues after it.
 *
 * The cyclic garbage collector is paused while a run is decoded. A run allocates a few
 * tracked objects per row (the tuple, a jsonb's dict and list): unpaused, they trigger a
 * young collection every few hundred rows, and CPython starts a collection of the next
 * generation after every tenth of the one below, so a stream of large results keeps
 * collecting everything alive. Paused, a run costs one young collection (at the first
 * allocation after it), whatever its length. The previous state is restored: a program
 * that disabled the collector keeps it disabled. */
static PyObject *
row_decoder_decode_run(RowDecoder *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start, end, stop = 0;
    int collecting, status;
    if (nargs != 4 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "decode_run(data: bytes, start, end, rows: list)");
        return NULL;
    }
    start = PyLong_AsSsize_t(args[1]);
    end = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || end == -1) && PyErr_Occurred())
        return NULL;
    if (start < 0 || end < start || end > PyBytes_GET_SIZE(args[0])) {
        PyErr_SetString(PyExc_ValueError, "decode_run: start and end outside the data");
        return NULL;
    }
    collecting = PyGC_Disable();
    status = decode_messages(self, (const unsigned char *)PyBytes_AS_STRING(args[0]), start,
                             end, args[3], &stop);
    if (collecting)
        PyGC_Enable();
    return status < 0 ? NULL : PyLong_FromSsize_t(stop);
}

static PyObject *
row_decoder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"kinds", "decoders", "checked", NULL};
    const char *kinds;
    Py_ssize_t nkinds, i;
    PyObject *decoders, *checked;
    RowDecoder *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y#OO:RowDecoder", names, &kinds, &nkinds,
                                     &decoders, &checked))
        return NULL;
    if (!PyList_Check(decoders) || PyList_GET_SIZE(decoders) != nkinds) {
        PyErr_SetString(PyExc_ValueError, "one kind per decoder, decoders in a list");
        return NULL;
    }
    for (i = 0; i < nkinds; i++) {
        if ((unsigned char)kinds[i] >= KIND_COUNT) {
            PyErr_Format(PyExc_ValueError, "unknown column kind %d", kinds[i]);
            return NULL;
        }
    }
    self = (RowDecoder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->kinds = PyMem_Malloc(nkinds ? nkinds : 1);
    self->decoders = PyList_AsTuple(decoders);
    if (self->kinds == NULL || self->decoders == NULL) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    memcpy(self->kinds, kinds, nkinds);
    self->columns = nkinds;
    Py_INCREF(decoders);
    self->listed = decoders;
    Py_INCREF(checked);
    self->checked = checked;
    self->vectorcall = (vectorcallfunc)row_decoder_vectorcall;
    return (PyObject *)self;
}

static PyObject *
row_decoder_get_kinds(RowDecoder *self, void *Py_UNUSED(closure))
{
    return PyBytes_FromStringAndSize((const char *)self->kinds, self->columns);
}

static PyMethodDef row_decoder_methods[] = {
    {"decode_run", (PyCFunction)(void (*)(void))row_decoder_decode_run, METH_FASTCALL,
     "decode_run(data, start, end, rows) -> the offset where decoding stopped."},
    {NULL}
};

static PyGetSetDef row_decoder_getset[] = {
    {"kinds", (getter)row_decoder_get_kinds, NULL, "The column kinds, one byte each.", NULL},
    {NULL}
};

static PyTypeObject RowDecoder_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pgmux.types._crows.RowDecoder",
    .tp_doc = "RowDecoder(kinds, decoders, checked): one result shape's DataRow decoder.",
    .tp_basicsize = sizeof(RowDecoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(RowDecoder, vectorcall),
    .tp_call = (ternaryfunc)row_decoder_call,
    .tp_new = row_decoder_new,
    .tp_dealloc = (destructor)row_decoder_dealloc,
    .tp_traverse = (traverseproc)row_decoder_traverse,
    .tp_clear = (inquiry)row_decoder_clear,
    .tp_methods = row_decoder_methods,
    .tp_getset = row_decoder_getset,
};

/* -- module ---------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure_values, METH_VARARGS | METH_KEYWORDS,
     "Set the Python objects values are built with (UUID, Decimal, the JSON scanner)."},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "pgmux.types._crows",
    "The compiled twin of pgmux.types.rows (see that module).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__crows(void)
{
    PyObject *module;
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL || PyType_Ready(&RowDecoder_Type) < 0)
        return NULL;
    module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&RowDecoder_Type);
    if (PyModule_AddObject(module, "RowDecoder", (PyObject *)&RowDecoder_Type) < 0
        || add_kinds(module) < 0
        || add_source_stamp(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
