/* pgmux.protocol._cframing: the compiled twin of pgmux/protocol/framing.py's FrameBuffer.
 *
 * Same interface, same messages, same errors as the Python reference (which stays the
 * specification; read its module docstring first). A small message is a bytes slice of the
 * last chunk fed; an incomplete tail is carried over; a message larger than LARGE_MESSAGE
 * gets a bytearray of its exact size that the reader may receive into. With row_runs, a run
 * of two or more DataRow messages back to back is handed out as one (ROW_RUN, RowRun) item
 * that points into the chunk: no per-row bytes object, decoded later in one call.
 *
 * Every header is checked (length >= 4, length <= max_message_size, known type) before any
 * byte past it is read or anything is allocated; a bad one is reported by calling the
 * reference's check_header, so the error and its message come from one place.
 * framing.py calls configure() once, right after importing this module.
 */
#include "../_cextension.h"
#include <structmember.h>

#define DATA_ROW 'D'

static PyObject *check_header;  /* framing.check_header(kind, length, max_message_size) */
static unsigned char known_type[256];
static Py_ssize_t large_message = 64 * 1024;
static long row_run_kind = -1;
static PyObject *empty_bytes;

static inline long
read_i32(const unsigned char *p)
{
    return (long)(int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16)
                           | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static int
configured(void)
{
    if (check_header == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pgmux.protocol._cframing is not configured");
        return 0;
    }
    return 1;
}

#include "_crowrun.h"

/* -- FrameBuffer ----------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_message_size;
    char failed;
    char row_runs;
    PyObject *data;        /* bytes: the chunk messages are sliced from */
    Py_ssize_t pos;        /* the first byte not handed out */
    PyObject *large;       /* bytearray of a large message being filled, or NULL */
    int large_type;
    Py_ssize_t large_fill;
} FrameBuffer;

static int
frame_buffer_init(FrameBuffer *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"max_message_size", "row_runs", NULL};
    Py_ssize_t max_message_size = 0x3FFFFFFF;
    int row_runs = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|n$p:FrameBuffer", names,
                                     &max_message_size, &row_runs))
        return -1;
    if (!configured())
        return -1;
    self->max_message_size = max_message_size;
    self->failed = 0;
    self->row_runs = (char)row_runs;
    Py_INCREF(empty_bytes);
    Py_XSETREF(self->data, empty_bytes);
    self->pos = 0;
    Py_CLEAR(self->large);
    self->large_type = 0;
    self->large_fill = 0;
    return 0;
}

static void
frame_buffer_dealloc(FrameBuffer *self)
{
    Py_XDECREF(self->data);
    Py_XDECREF(self->large);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline int
header_ok(FrameBuffer *self, int kind, long length)
{
    return length >= 4 && length <= self->max_message_size && known_type[kind];
}

/* Raise the reference's ProtocolError for a header that header_ok() refused. */
static void
raise_bad_header(FrameBuffer *self, int kind, long length)
{
    PyObject *r = PyObject_CallFunction(check_header, "iln", kind, length,
                                        self->max_message_size);
    if (r != NULL) {  /* the reference accepted it: the two disagree, which is a bug */
        Py_DECREF(r);
        PyErr_Format(PyExc_SystemError, "framing: header %d/%ld refused in C only", kind,
                     length);
    }
}

static void
set_data(FrameBuffer *self, PyObject *data, Py_ssize_t pos)
{
    Py_XSETREF(self->data, data);
    self->pos = pos;
}

/* Everything before pos was handed out: let go of the chunk once all of it was. */
static void
consumed(FrameBuffer *self, Py_ssize_t pos)
{
    if (pos >= PyBytes_GET_SIZE(self->data)) {
        Py_INCREF(empty_bytes);
        set_data(self, empty_bytes, 0);
    }
    else {
        self->pos = pos;
    }
}

static PyObject *
frame_buffer_feed(FrameBuffer *self, PyObject *arg)
{
    Py_buffer view;
    const char *buf;
    Py_ssize_t off = 0, rest, have;
    PyObject *data;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    buf = (const char *)view.buf;
    if (self->large != NULL) {
        Py_ssize_t room = PyByteArray_GET_SIZE(self->large) - self->large_fill;
        off = view.len < room ? view.len : room;
        memcpy(PyByteArray_AS_STRING(self->large) + self->large_fill, buf, off);
        self->large_fill += off;
        if (off == view.len) {
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
    }
    rest = view.len - off;
    have = PyBytes_GET_SIZE(self->data) - self->pos;
    if (have <= 0 && off == 0 && PyBytes_CheckExact(arg)) {
        Py_INCREF(arg);
        data = arg;
    }
    else if (have <= 0) {
        data = PyBytes_FromStringAndSize(buf + off, rest);
    }
    else {
        data = PyBytes_FromStringAndSize(NULL, have + rest);
        if (data != NULL) {
            memcpy(PyBytes_AS_STRING(data), PyBytes_AS_STRING(self->data) + self->pos, have);
            memcpy(PyBytes_AS_STRING(data) + have, buf + off, rest);
        }
    }
    PyBuffer_Release(&view);
    if (data == NULL)
        return NULL;
    set_data(self, data, 0);
    Py_RETURN_NONE;
}

static PyObject *
frame_buffer_recv_target(FrameBuffer *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *whole, *tail;
    if (self->large == NULL)
        Py_RETURN_NONE;
    whole = PyMemoryView_FromObject(self->large);  /* holds an export: no resize, no free */
    if (whole == NULL)
        return NULL;
    tail = PySequence_GetSlice(whole, self->large_fill, PyByteArray_GET_SIZE(self->large));
    Py_DECREF(whole);
    return tail;
}

static PyObject *
frame_buffer_advance(FrameBuffer *self, PyObject *arg)
{
    Py_ssize_t count = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (self->large == NULL) {
        PyErr_SetString(PyExc_AssertionError, "advance() without a receive target");
        return NULL;
    }
    if (count < 0 || count > PyByteArray_GET_SIZE(self->large) - self->large_fill) {
        PyErr_Format(PyExc_ValueError, "advance(%zd) past the end of the receive target",
                     count);
        return NULL;
    }
    self->large_fill += count;
    Py_RETURN_NONE;
}

/* (kind, item), stealing item (also on failure). */
static PyObject *
pair(long kind, PyObject *item)
{
    PyObject *message, *type;
    if (item == NULL)
        return NULL;
    message = PyTuple_New(2);
    type = PyLong_FromLong(kind);
    if (message == NULL || type == NULL) {
        Py_XDECREF(message);
        Py_XDECREF(type);
        Py_DECREF(item);
        return NULL;
    }
    PyTuple_SET_ITEM(message, 0, type);
    PyTuple_SET_ITEM(message, 1, item);
    return message;
}

/* The large message, if it is complete (a new reference), else NULL with no error. */
static PyObject *
take_large(FrameBuffer *self)
{
    PyObject *message;
    if (self->large == NULL || self->large_fill < PyByteArray_GET_SIZE(self->large))
        return NULL;
    message = pair(self->large_type, self->large);  /* takes the buffer's reference */
    self->large = NULL;
    return message;
}

/* The functions below take the chunk as an argument, a reference their caller holds: an
 * allocation may run a finalizer that feeds this buffer, which must not free the bytes
 * being read (the state may then be nonsense, as in the Python class, but memory is safe). */

static int
start_large(FrameBuffer *self, PyObject *data, int kind, long length, Py_ssize_t pos)
{
    Py_ssize_t have = PyBytes_GET_SIZE(data) - pos - 5;
    PyObject *large = PyByteArray_FromStringAndSize(NULL, length - 4);
    if (large == NULL)
        return -1;
    memcpy(PyByteArray_AS_STRING(large), PyBytes_AS_STRING(data) + pos + 5, have);
    Py_XSETREF(self->large, large);
    self->large_type = kind;
    self->large_fill = have;
    Py_INCREF(empty_bytes);
    set_data(self, empty_bytes, 0);
    return 0;
}

static PyObject *
message_at(PyObject *data, int kind, Py_ssize_t pos, Py_ssize_t end)
{
    return pair(kind, PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + pos + 5,
                                                end - pos - 5));
}

static PyObject *
frame_buffer_next_message(FrameBuffer *self, PyObject *Py_UNUSED(ignored))
{
    const unsigned char *p;
    Py_ssize_t size, pos, end;
    int kind;
    long length;
    PyObject *data, *message = Py_None;
    PyObject *done = take_large(self);
    if (done != NULL || PyErr_Occurred())
        return done;
    if (self->large != NULL)
        Py_RETURN_NONE;
    data = Py_NewRef(self->data);
    p = (const unsigned char *)PyBytes_AS_STRING(data);
    size = PyBytes_GET_SIZE(data);
    pos = self->pos;
    if (size - pos < 5) {
        Py_DECREF(data);
        Py_RETURN_NONE;
    }
    kind = p[pos];
    length = read_i32(p + pos + 1);
    end = pos + 1 + length;
    if (!header_ok(self, kind, length)) {
        raise_bad_header(self, kind, length);
        message = NULL;
    }
    else if (end <= size) {
        message = message_at(data, kind, pos, end);
        if (message != NULL)
            consumed(self, end);
    }
    else if (length - 4 > large_message && start_large(self, data, kind, length, pos) < 0) {
        message = NULL;
    }
    Py_DECREF(data);
    return message == Py_None ? Py_NewRef(Py_None) : message;
}

/* Append the pending DataRows data[start:pos] (count of them): one message, or a run. */
static int
flush_rows(PyObject *data, PyObject *out, Py_ssize_t start, Py_ssize_t pos, Py_ssize_t count)
{
    PyObject *item;
    int status;
    if (count == 0)
        return 0;
    if (count == 1) {
        item = message_at(data, DATA_ROW, start, pos);
    }
    else {
        item = pair(row_run_kind, row_run_new(data, start, pos, count));
    }
    if (item == NULL)
        return -1;
    status = PyList_Append(out, item);
    Py_DECREF(item);
    return status;
}

static PyObject *
frame_buffer_read_messages(FrameBuffer *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0), *data = NULL;
    const unsigned char *p;
    Py_ssize_t size, pos, end, rows_start = 0, rows = 0;
    int kind;
    long length;
    if (out == NULL)
        return NULL;
    if (self->large != NULL) {
        PyObject *done = take_large(self);
        if (done == NULL)
            return PyErr_Occurred() ? (Py_DECREF(out), NULL) : out;
        if (PyList_Append(out, done) < 0) {
            Py_DECREF(done);
            goto fail;
        }
        Py_DECREF(done);
    }
    data = Py_NewRef(self->data);
    p = (const unsigned char *)PyBytes_AS_STRING(data);
    size = PyBytes_GET_SIZE(data);
    pos = self->pos;
    while (size - pos >= 5) {
        kind = p[pos];
        length = read_i32(p + pos + 1);
        if (!header_ok(self, kind, length)) {
            if (flush_rows(data, out, rows_start, pos, rows) < 0)
                goto fail;
            self->pos = pos;
            if (PyList_GET_SIZE(out) > 0) {  /* hand out the good messages first */
                self->failed = 1;
                goto done;
            }
            raise_bad_header(self, kind, length);
            goto fail;
        }
        end = pos + 1 + length;
        if (end > size) {
            if (length - 4 > large_message) {
                if (flush_rows(data, out, rows_start, pos, rows) < 0
                    || start_large(self, data, kind, length, pos) < 0)
                    goto fail;
                goto done;
            }
            break;
        }
        if (kind == DATA_ROW && self->row_runs) {
            if (rows++ == 0)
                rows_start = pos;
        }
        else {
            PyObject *message;
            if (flush_rows(data, out, rows_start, pos, rows) < 0)
                goto fail;
            rows = 0;
            message = message_at(data, kind, pos, end);
            if (message == NULL || PyList_Append(out, message) < 0) {
                Py_XDECREF(message);
                goto fail;
            }
            Py_DECREF(message);
        }
        pos = end;
    }
    if (flush_rows(data, out, rows_start, pos, rows) < 0)
        goto fail;
    consumed(self, pos);
done:
    Py_XDECREF(data);
    return out;
fail:
    Py_XDECREF(data);
    Py_DECREF(out);
    return NULL;
}

static PyObject *
frame_buffer_get_buffered(FrameBuffer *self, void *Py_UNUSED(closure))
{
    Py_ssize_t pending = PyBytes_GET_SIZE(self->data) - self->pos;
    return PyLong_FromSsize_t(pending + (self->large != NULL ? self->large_fill : 0));
}

static PyObject *
frame_buffer_get_capacity(FrameBuffer *self, void *Py_UNUSED(closure))
{
    Py_ssize_t large = self->large != NULL ? PyByteArray_GET_SIZE(self->large) : 0;
    return PyLong_FromSsize_t(PyBytes_GET_SIZE(self->data) + large);
}

static PyMemberDef frame_buffer_members[] = {
    {"max_message_size", T_PYSSIZET, offsetof(FrameBuffer, max_message_size), 0,
     "the largest declared message length accepted"},
    {"failed", T_BOOL, offsetof(FrameBuffer, failed), 0,
     "a bad header waits behind messages already handed out"},
    {"row_runs", T_BOOL, offsetof(FrameBuffer, row_runs), READONLY,
     "read_messages() hands out DataRows back to back as one (ROW_RUN, RowRun) item"},
    {NULL}
};

static PyGetSetDef frame_buffer_getset[] = {
    {"buffered", (getter)frame_buffer_get_buffered, NULL,
     "Bytes held that have not yet been handed out as messages.", NULL},
    {"capacity", (getter)frame_buffer_get_capacity, NULL,
     "Bytes of memory the buffer holds on to.", NULL},
    {NULL}
};

static PyMethodDef frame_buffer_methods[] = {
    {"feed", (PyCFunction)frame_buffer_feed, METH_O, "Add bytes received from the server."},
    {"recv_target", (PyCFunction)frame_buffer_recv_target, METH_NOARGS,
     "Where the next bytes of a large message should be received, if one is pending."},
    {"advance", (PyCFunction)frame_buffer_advance, METH_O,
     "Record count bytes received into recv_target()."},
    {"next_message", (PyCFunction)frame_buffer_next_message, METH_NOARGS,
     "The next complete message, or None if more bytes are needed."},
    {"read_messages", (PyCFunction)frame_buffer_read_messages, METH_NOARGS,
     "Every complete message buffered now, in order."},
    {NULL}
};

static PyTypeObject FrameBuffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pgmux.protocol._cframing.FrameBuffer",
    .tp_doc = "Accumulates backend bytes and yields (type, payload) messages (compiled).",
    .tp_basicsize = sizeof(FrameBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)frame_buffer_init,
    .tp_dealloc = (destructor)frame_buffer_dealloc,
    .tp_members = frame_buffer_members,
    .tp_getset = frame_buffer_getset,
    .tp_methods = frame_buffer_methods,
};

/* -- module ---------------------------------------------------------------------------- */

static PyObject *
configure(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"check_header", "known_types", "large_message", "row_run", NULL};
    PyObject *check, *known, *it, *item;
    Py_ssize_t large;
    long row_run;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOnl:configure", names, &check, &known,
                                     &large, &row_run))
        return NULL;
    if (!PyCallable_Check(check)) {
        PyErr_SetString(PyExc_TypeError, "check_header must be callable");
        return NULL;
    }
    if (row_run >= 0 && row_run < 256) {
        PyErr_SetString(PyExc_ValueError, "row_run must not be a message type");
        return NULL;
    }
    memset(known_type, 0, sizeof(known_type));
    it = PyObject_GetIter(known);
    if (it == NULL)
        return NULL;
    while ((item = PyIter_Next(it)) != NULL) {
        long kind = PyLong_AsLong(item);
        Py_DECREF(item);
        if (kind < 0 || kind > 255) {
            Py_DECREF(it);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "a message type is one byte");
            return NULL;
        }
        known_type[kind] = 1;
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    Py_INCREF(check);
    Py_XSETREF(check_header, check);
    large_message = large;
    row_run_kind = row_run;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Set the reference's header check, the known message types, LARGE_MESSAGE and ROW_RUN."},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "pgmux.protocol._cframing",
    "The compiled twin of pgmux.protocol.framing (see that module).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__cframing(void)
{
    PyObject *module;
    if (PyType_Ready(&RowRun_Type) < 0 || PyType_Ready(&FrameBuffer_Type) < 0)
        return NULL;
    empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    if (empty_bytes == NULL)
        return NULL;
    module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&RowRun_Type);
    Py_INCREF(&FrameBuffer_Type);
    if (PyModule_AddObject(module, "RowRun", (PyObject *)&RowRun_Type) < 0
        || PyModule_AddObject(module, "FrameBuffer", (PyObject *)&FrameBuffer_Type) < 0
        || add_source_stamp(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
