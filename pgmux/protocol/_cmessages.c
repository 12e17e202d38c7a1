/* pgmux.protocol._cmessages: the compiled twins of two per-query messages: the Bind of
 * every execution of a cached statement (pgmux/protocol/frontend.py's bind_statement) and
 * the CommandComplete that ends every result (backend.py's parse_command_complete).
 *
 * bind_statement:
 * The common case (with the bytes that follow Bind in the same write, ``tail``, appended) (a bytes prefix and result-code field, a tuple of 0/1 parameter
 * formats, parameters that are bytes or None, a message under the size cap) is built
 * here in one allocation. The limits are frontend's MAX_PARAMETERS and MAX_MESSAGE_SIZE,
 * read at each call as the reference reads them. Anything else, the errors included, is handed to the Python
 * reference (configure(fallback=...)), which builds it or raises with its own message.
 */
#include "../_cextension.h"


static PyObject *fallback;   /* frontend.bind_statement, the reference */
static PyObject *tag_reference;  /* backend.parse_command_complete */
static PyObject *namespace;  /* frontend's globals: its limits, read at each call as it does */
static PyObject *str_max_parameters, *str_max_message_size;

static inline char *
put_i32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
    return p + 4;
}

static inline char *
put_u16(char *p, unsigned v)
{
    p[0] = (char)(v >> 8);
    p[1] = (char)v;
    return p + 2;
}

/* 0 or 1 for an int that is exactly 0 or 1, else -1 (then the reference decides). */
static int
format_code(PyObject *code)
{
    long value;
    if (!PyLong_CheckExact(code))
        return -1;
    value = PyLong_AsLong(code);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return value == 0 || value == 1 ? (int)value : -1;
}

/* The size of the format-code field as the reference encodes it (a count, then one
 * int16 per code), or -1 when a code is not exactly 0 or 1. */
static long
format_codes_size(PyObject *formats, Py_ssize_t n)
{
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        if (format_code(PyTuple_GET_ITEM(formats, i)) < 0)
            return -1;
    }
    return 2 + 2 * (long)n;
}

/* frontend.<name> as a C integer; -1 with an error set if it is not one. */
static long long
limit(PyObject *name)
{
    PyObject *value = PyDict_GetItemWithError(namespace, name);
    if (value == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_RuntimeError, "frontend.%U is not set", name);
        return -1;
    }
    return PyLong_AsLongLong(value);
}

static PyObject *
call_fallback(PyObject *const *args, Py_ssize_t nargs)
{
    if (fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pgmux.protocol._cmessages is not configured");
        return NULL;
    }
    return PyObject_Vectorcall(fallback, args, nargs, NULL);
}

static PyObject *
bind_statement(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *prefix, *formats, *params, *result_codes, *tail = NULL, *seq, *message;
    Py_ssize_t n, i, nformats, tail_size = 0;
    long long length, max_parameters, max_message_size;
    long codes_size;
    char *p;
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "bind_statement() takes 4 or 5 arguments");
        return NULL;
    }
    if (namespace == NULL)
        return call_fallback(args, nargs);  /* not configured: it says so */
    max_parameters = limit(str_max_parameters);
    max_message_size = limit(str_max_message_size);
    if (max_parameters < 0 || max_message_size < 0) {
        PyErr_Clear();
        return call_fallback(args, nargs);
    }
    prefix = args[0];
    formats = args[1];
    params = args[2];
    result_codes = args[3];
    if (nargs == 5) {
        tail = args[4];
        if (!PyBytes_CheckExact(tail))
            return call_fallback(args, nargs);
        tail_size = PyBytes_GET_SIZE(tail);
    }
    if (!PyBytes_CheckExact(prefix) || !PyBytes_CheckExact(result_codes)
        || !PyTuple_CheckExact(formats)
        || !(PyList_CheckExact(params) || PyTuple_CheckExact(params)))
        return call_fallback(args, nargs);
    seq = params;
    n = PySequence_Fast_GET_SIZE(seq);
    nformats = PyTuple_GET_SIZE(formats);
    codes_size = format_codes_size(formats, nformats);
    if (n > max_parameters || nformats > 65535 || codes_size < 0)
        return call_fallback(args, nargs);
    length = 4 + (long long)PyBytes_GET_SIZE(prefix) + codes_size + 2
             + PyBytes_GET_SIZE(result_codes);
    for (i = 0; i < n; i++) {
        PyObject *value = PySequence_Fast_GET_ITEM(seq, i);
        if (value == Py_None)
            length += 4;
        else if (PyBytes_CheckExact(value) && PyBytes_GET_SIZE(value) <= max_message_size
                 && PyBytes_GET_SIZE(value) <= 0x7FFFFFFF)
            length += 4 + PyBytes_GET_SIZE(value);
        else
            return call_fallback(args, nargs);
    }
    if (length > max_message_size || length > 0x7FFFFFFF)
        return call_fallback(args, nargs);  /* it raises, saying so */
    message = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(1 + length) + tail_size);
    if (message == NULL)
        return NULL;
    p = PyBytes_AS_STRING(message);
    *p++ = 'B';
    p = put_i32(p, (uint32_t)length);
    memcpy(p, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix));
    p += PyBytes_GET_SIZE(prefix);
    p = put_u16(p, (unsigned)nformats);
    for (i = 0; i < nformats; i++)
        p = put_u16(p, (unsigned)format_code(PyTuple_GET_ITEM(formats, i)));
    p = put_u16(p, (unsigned)n);
    for (i = 0; i < n; i++) {
        PyObject *value = PySequence_Fast_GET_ITEM(seq, i);
        if (value == Py_None) {
            p = put_i32(p, 0xFFFFFFFFu);
        }
        else {
            Py_ssize_t size = PyBytes_GET_SIZE(value);
            p = put_i32(p, (uint32_t)size);
            memcpy(p, PyBytes_AS_STRING(value), size);
            p += size;
        }
    }
    memcpy(p, PyBytes_AS_STRING(result_codes), PyBytes_GET_SIZE(result_codes));
    if (tail_size)
        memcpy(p + PyBytes_GET_SIZE(result_codes), PyBytes_AS_STRING(tail), tail_size);
    return message;
}

/* parse_command_complete(payload) -> the tag: a NUL-terminated UTF-8 string with no other
 * NUL is decoded here; anything else goes to the reference, which says what is wrong. */
static PyObject *
parse_command_complete(PyObject *Py_UNUSED(module), PyObject *payload)
{
    if (PyBytes_CheckExact(payload)) {
        const char *p = PyBytes_AS_STRING(payload);
        Py_ssize_t n = PyBytes_GET_SIZE(payload);
        if (n > 0 && p[n - 1] == '\0' && memchr(p, '\0', n - 1) == NULL) {
            PyObject *tag = PyUnicode_DecodeUTF8(p, n - 1, NULL);
            if (tag != NULL || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return tag;
            PyErr_Clear();
        }
    }
    if (tag_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pgmux.protocol._cmessages is not configured");
        return NULL;
    }
    return PyObject_CallOneArg(tag_reference, payload);
}

static PyObject *
configure_tags(PyObject *Py_UNUSED(module), PyObject *function)
{
    if (!PyCallable_Check(function)) {
        PyErr_SetString(PyExc_TypeError, "the reference must be callable");
        return NULL;
    }
    Py_INCREF(function);
    Py_XSETREF(tag_reference, function);
    Py_RETURN_NONE;
}

static PyObject *
configure(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"fallback", "namespace", NULL};
    PyObject *function, *globals;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OO!:configure", names, &function,
                                     &PyDict_Type, &globals))
        return NULL;
    if (!PyCallable_Check(function)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return NULL;
    }
    if (str_max_parameters == NULL) {
        str_max_parameters = PyUnicode_InternFromString("MAX_PARAMETERS");
        str_max_message_size = PyUnicode_InternFromString("MAX_MESSAGE_SIZE");
        if (str_max_parameters == NULL || str_max_message_size == NULL)
            return NULL;
    }
    Py_INCREF(function);
    Py_XSETREF(fallback, function);
    Py_INCREF(globals);
    Py_XSETREF(namespace, globals);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind_statement", (PyCFunction)(void (*)(void))bind_statement, METH_FASTCALL,
     "bind_statement(prefix, param_formats, params, result_codes, tail=b'') -> Bind message "
     "bytes, then tail."},
    {"parse_command_complete", (PyCFunction)parse_command_complete, METH_O,
     "parse_command_complete(payload) -> the command tag."},
    {"configure_tags", (PyCFunction)configure_tags, METH_O,
     "Set the Python reference parse_command_complete."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Set the Python reference (which handles everything unusual) and its module's globals."},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "pgmux.protocol._cmessages",
    "Compiled twins of frontend.bind_statement and backend.parse_command_complete.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__cmessages(void)
{
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (add_source_stamp(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
