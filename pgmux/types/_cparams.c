/* pgmux.types._cparams: the compiled twin of TypeRegistry.encode_params (registry.py).
 *
 * ENCODE_PARAMS is installed as TypeRegistry.encode_params (an instance method: it gets
 * the registry, then the values). For each value it looks its encoder up in the
 * registry's _params table by exact type (_param_encoder on a miss, as the reference
 * does) and calls it, except for the encoders it knows by identity (text.param_int for
 * an int that fits int4, text.param_str for a str without NUL, the None encoder), whose
 * result it builds here (for a single value, without the (oid, format, data) tuple, its
 * oids and formats tuples shared: tuples are immutable). Anything else unusual (not a list
 * or tuple, an encoder that does not return a 3-tuple, a str that is not valid Unicode)
 * is handed to the Python reference, which encodes it or raises with its own message.
 */
#include "../_cextension.h"


static PyObject *reference;      /* TypeRegistry.python_encode_params */
static PyObject *int_encoder;    /* text.param_int */
static PyObject *str_encoder;    /* text.param_str */
static PyObject *null_encoder;   /* the encoder of None */
static PyObject *int4_oid, *zero, *null_param, *str_params, *str_param_encoder;
static PyObject *int4_oids, *zeros;  /* (23,) and (0,): a single value's oids and formats */

/* (a, b, c), stealing c (also on failure). */
static PyObject *
triple(PyObject *a, PyObject *b, PyObject *c)
{
    PyObject *out;
    if (c == NULL)
        return NULL;
    out = PyTuple_New(3);
    if (out == NULL) {
        Py_DECREF(c);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, Py_NewRef(a));
    PyTuple_SET_ITEM(out, 1, Py_NewRef(b));
    PyTuple_SET_ITEM(out, 2, c);
    return out;
}

/* b"%d" % number, for an int4. */
static PyObject *
decimal_bytes(long long number)
{
    char text[16], *end = text + sizeof(text), *p = end;
    unsigned long long magnitude = number < 0 ? 0ULL - (unsigned long long)number
                                              : (unsigned long long)number;
    do {
        *--p = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (number < 0)
        *--p = '-';
    return PyBytes_FromStringAndSize(p, end - p);
}

static PyObject *
hand_to_reference(PyObject *registry, PyObject *values)
{
    PyObject *args[2] = {registry, values};
    return PyObject_Vectorcall(reference, args, 2, NULL);
}

static PyObject *encode_with(PyObject *encoder, PyObject *value);

/* (oid, format, data) of one value, as a new tuple; NULL with no error set: hand the whole
 * list to the reference; NULL with an error set: the error propagates. */
static PyObject *
encode_one(PyObject *registry, PyObject *params, PyObject *value)
{
    PyObject *type = (PyObject *)Py_TYPE(value), *encoder, *result;
    encoder = PyDict_GetItemWithError(params, type);
    if (encoder != NULL) {
        Py_INCREF(encoder);
    }
    else {
        if (PyErr_Occurred())
            return NULL;
        encoder = PyObject_CallMethodOneArg(registry, str_param_encoder, type);
        if (encoder == NULL)
            return NULL;  /* cannot send that type: the reference's own error */
    }
    result = encode_with(encoder, value);
    Py_DECREF(encoder);
    return result;
}

static PyObject *
encode_with(PyObject *encoder, PyObject *value)
{
    PyObject *result;
    if (encoder == null_encoder) {
        Py_INCREF(null_param);
        return null_param;
    }
    if (encoder == int_encoder && PyLong_CheckExact(value)) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow && number >= INT32_MIN && number <= INT32_MAX)
            return triple(int4_oid, zero, decimal_bytes(number));
    }
    if (encoder == str_encoder && PyUnicode_CheckExact(value)
        && PyUnicode_FindChar(value, 0, 0, PyUnicode_GET_LENGTH(value), 1) == -1) {
        PyObject *data = PyUnicode_AsUTF8String(value);
        if (data == NULL) {
            PyErr_Clear();  /* lone surrogates: the reference says so */
            return NULL;
        }
        return triple(zero, zero, data);
    }
    result = PyObject_CallOneArg(encoder, value);
    if (result == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            PyErr_Clear();  /* the reference turns it into an InterfaceError */
        return NULL;
    }
    if (!PyTuple_CheckExact(result) || PyTuple_GET_SIZE(result) != 3) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

/* ((oid,), (format,), [data]) of a single value, the tuples shared, stealing data (also on
 * failure). */
static PyObject *
single(PyObject *oids, PyObject *formats, PyObject *data)
{
    PyObject *list, *out;
    if (data == NULL)
        return NULL;
    list = PyList_New(1);
    if (list == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    PyList_SET_ITEM(list, 0, data);
    out = PyTuple_New(3);
    if (out == NULL) {
        Py_DECREF(list);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, Py_NewRef(oids));
    PyTuple_SET_ITEM(out, 1, Py_NewRef(formats));
    PyTuple_SET_ITEM(out, 2, list);
    return out;
}

/* The one value of a list when its encoder is one known by identity and it takes the fast
 * way (encode_with's), built without the (oid, format, data) tuple; NULL with no error set:
 * encode it the general way; NULL with an error set: the error propagates; NOT_FOUND (with
 * no error set): hand the list to the reference. */
static PyObject not_found_marker;
#define NOT_FOUND (&not_found_marker)

static PyObject *
encode_single(PyObject *encoder, PyObject *value)
{
    if (encoder == null_encoder)
        return single(zeros, zeros, Py_NewRef(Py_None));
    if (encoder == int_encoder && PyLong_CheckExact(value)) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow && number >= INT32_MIN && number <= INT32_MAX)
            return single(int4_oids, zeros, decimal_bytes(number));
    }
    if (encoder == str_encoder && PyUnicode_CheckExact(value)
        && PyUnicode_FindChar(value, 0, 0, PyUnicode_GET_LENGTH(value), 1) == -1) {
        PyObject *data = PyUnicode_AsUTF8String(value);
        if (data == NULL) {
            PyErr_Clear();  /* lone surrogates: the reference says so */
            return NOT_FOUND;
        }
        return single(zeros, zeros, data);
    }
    return NULL;
}

static PyObject *
encode_params(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *registry, *values, *params, *oids = NULL, *formats = NULL, *data = NULL, *out;
    Py_ssize_t n, i;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode_params() takes one sequence of values");
        return NULL;
    }
    registry = args[0];
    values = args[1];
    if (reference == NULL || !(PyList_CheckExact(values) || PyTuple_CheckExact(values)))
        return hand_to_reference(registry, values);
    params = PyObject_GetAttr(registry, str_params);
    if (params == NULL)
        return NULL;
    if (!PyDict_CheckExact(params)) {
        Py_DECREF(params);
        return hand_to_reference(registry, values);
    }
    n = PySequence_Fast_GET_SIZE(values);
    if (n == 1) {  /* the most common shape */
        PyObject *value = PySequence_Fast_GET_ITEM(values, 0), *encoder;
        encoder = PyDict_GetItemWithError(params, (PyObject *)Py_TYPE(value));
        if (encoder != NULL) {
            out = encode_single(encoder, value);
            if (out != NULL) {
                Py_DECREF(params);
                return out == NOT_FOUND ? hand_to_reference(registry, values) : out;
            }
            if (PyErr_Occurred())
                goto fail;
        }
        else if (PyErr_Occurred())
            goto fail;
        /* any other encoder, or a miss (_param_encoder): the general way */
    }
    oids = PyTuple_New(n);
    formats = PyTuple_New(n);
    data = PyList_New(n);
    if (oids == NULL || formats == NULL || data == NULL)
        goto fail;
    for (i = 0; i < n; i++) {
        PyObject *value, *encoded = NULL;
        if (PySequence_Fast_GET_SIZE(values) == n) {  /* an encoder may change the list */
            value = Py_NewRef(PySequence_Fast_GET_ITEM(values, i));
            encoded = encode_one(registry, params, value);
            Py_DECREF(value);
        }
        if (encoded == NULL) {
            if (PyErr_Occurred())
                goto fail;
            Py_DECREF(params);
            Py_DECREF(oids);
            Py_DECREF(formats);
            Py_DECREF(data);
            return hand_to_reference(registry, values);
        }
        PyTuple_SET_ITEM(oids, i, Py_NewRef(PyTuple_GET_ITEM(encoded, 0)));
        PyTuple_SET_ITEM(formats, i, Py_NewRef(PyTuple_GET_ITEM(encoded, 1)));
        PyList_SET_ITEM(data, i, Py_NewRef(PyTuple_GET_ITEM(encoded, 2)));
        Py_DECREF(encoded);
    }
    Py_DECREF(params);
    out = PyTuple_New(3);
    if (out == NULL)
        goto fail_owned;
    PyTuple_SET_ITEM(out, 0, oids);
    PyTuple_SET_ITEM(out, 1, formats);
    PyTuple_SET_ITEM(out, 2, data);
    return out;
fail:
    Py_DECREF(params);
fail_owned:
    Py_XDECREF(oids);
    Py_XDECREF(formats);
    Py_XDECREF(data);
    return NULL;
}

static int
set(PyObject **slot, PyObject *value)
{
    Py_INCREF(value);
    Py_XSETREF(*slot, value);
    return 0;
}

static PyObject *
configure(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"reference", "int_encoder", "str_encoder", "null_encoder", NULL};
    PyObject *ref, *ints, *strs, *nulls;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOO:configure", names, &ref, &ints, &strs,
                                     &nulls))
        return NULL;
    if (!PyCallable_Check(ref)) {
        PyErr_SetString(PyExc_TypeError, "reference must be callable");
        return NULL;
    }
    if (str_params == NULL) {
        str_params = PyUnicode_InternFromString("_params");
        str_param_encoder = PyUnicode_InternFromString("_param_encoder");
        int4_oid = PyLong_FromLong(23);
        zero = PyLong_FromLong(0);
        null_param = Py_BuildValue("(iiO)", 0, 0, Py_None);
        int4_oids = int4_oid == NULL ? NULL : PyTuple_Pack(1, int4_oid);
        zeros = zero == NULL ? NULL : PyTuple_Pack(1, zero);
        if (str_params == NULL || str_param_encoder == NULL || int4_oid == NULL
            || zero == NULL || null_param == NULL || int4_oids == NULL || zeros == NULL)
            return NULL;
    }
    set(&reference, ref);
    set(&int_encoder, ints);
    set(&str_encoder, strs);
    set(&null_encoder, nulls);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Set the Python reference and the encoders known by identity."},
    {NULL}
};

static PyMethodDef encode_params_def = {
    "encode_params", (PyCFunction)(void (*)(void))encode_params, METH_FASTCALL,
    "encode_params(registry, values) -> (oids, formats, data), as TypeRegistry's."};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "pgmux.types._cparams",
    "The compiled twin of TypeRegistry.encode_params (see pgmux.types.registry).", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__cparams(void)
{
    PyObject *module = PyModule_Create(&module_def), *function, *method;
    if (module == NULL)
        return NULL;
    function = PyCFunction_New(&encode_params_def, NULL);
    method = function == NULL ? NULL : PyInstanceMethod_New(function);
    Py_XDECREF(function);
    if (method == NULL || PyModule_AddObject(module, "ENCODE_PARAMS", method) < 0
        || add_source_stamp(module) < 0) {
        Py_XDECREF(method);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
