/* RowRun, for pgmux.protocol._cframing (included there once): DataRow messages back to
 * back in data[start:end], as the framing buffer checked them, not yet split. The row
 * decoder (pgmux.types._crows) reads data directly; iterating gives the payloads. */
#ifndef PGMUX_CROWRUN_H
#define PGMUX_CROWRUN_H

typedef struct {
    PyObject_HEAD
    PyObject *data;  /* bytes */
    Py_ssize_t start, end, count;
} RowRun;

static PyTypeObject RowRun_Type;

static PyObject *
row_run_new(PyObject *data, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count)
{
    RowRun *run = PyObject_New(RowRun, &RowRun_Type);
    if (run == NULL)
        return NULL;
    Py_INCREF(data);
    run->data = data;
    run->start = start;
    run->end = end;
    run->count = count;
    return (PyObject *)run;
}

static void
row_run_dealloc(RowRun *self)
{
    Py_DECREF(self->data);
    PyObject_Free(self);
}

static Py_ssize_t
row_run_len(RowRun *self)
{
    return self->count;
}

/* The payloads, as bytes (the slow path and the tests; the decoder reads data directly). */
static PyObject *
row_run_payloads(RowRun *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(self->data);
    Py_ssize_t pos = self->start;
    if (out == NULL)
        return NULL;
    while (pos < self->end) {
        Py_ssize_t length = read_i32(p + pos + 1);  /* checked when the run was made */
        PyObject *payload = PyBytes_FromStringAndSize((const char *)p + pos + 5, length - 4);
        if (payload == NULL || PyList_Append(out, payload) < 0) {
            Py_XDECREF(payload);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(payload);
        pos += 1 + length;
    }
    return out;
}

static PyObject *
row_run_iter(RowRun *self)
{
    PyObject *payloads = row_run_payloads(self, NULL);
    PyObject *it;
    if (payloads == NULL)
        return NULL;
    it = PyObject_GetIter(payloads);
    Py_DECREF(payloads);
    return it;
}

static PyObject *
row_run_repr(RowRun *self)
{
    return PyUnicode_FromFormat("<RowRun of %zd DataRows, bytes %zd..%zd>", self->count,
                                self->start, self->end);
}

static PyMemberDef row_run_members[] = {
    {"data", T_OBJECT_EX, offsetof(RowRun, data), READONLY, "the chunk holding the rows"},
    {"start", T_PYSSIZET, offsetof(RowRun, start), READONLY, "offset of the first header"},
    {"end", T_PYSSIZET, offsetof(RowRun, end), READONLY, "offset just past the last row"},
    {"count", T_PYSSIZET, offsetof(RowRun, count), READONLY, "number of DataRows"},
    {NULL}
};

static PyMethodDef row_run_methods[] = {
    {"payloads", (PyCFunction)row_run_payloads, METH_NOARGS, "The payloads, as bytes."},
    {NULL}
};

static PySequenceMethods row_run_as_sequence = {.sq_length = (lenfunc)row_run_len};

static PyTypeObject RowRun_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pgmux.protocol._cframing.RowRun",
    .tp_doc = "DataRow messages back to back in data[start:end], not yet split.",
    .tp_basicsize = sizeof(RowRun),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)row_run_dealloc,
    .tp_repr = (reprfunc)row_run_repr,
    .tp_iter = (getiterfunc)row_run_iter,
    .tp_as_sequence = &row_run_as_sequence,
    .tp_members = row_run_members,
    .tp_methods = row_run_methods,
};

#endif /* PGMUX_CROWRUN_H */
