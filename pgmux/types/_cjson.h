/* JSON text -> Python values for pgmux.types._crows (included by _cvalues.h only): the
 * common subset of what jsonb_out prints, built with CPython's object APIs.
 *
 * json.loads is the reference. This parser accepts only text it can answer exactly as
 * json.loads does: objects, arrays, strings without backslash escapes or control
 * characters, integers of at most 18 digits, decimal numbers (parsed by the same
 * PyOS_string_to_double that float() uses), true, false, null, JSON whitespace, nesting
 * up to MAX_DEPTH. It returns NULL with no error set for anything else (escapes, long
 * integers, NaN, malformed text, invalid UTF-8 ...), and the caller asks the json module,
 * which returns the value or raises its own error. */
#ifndef PGMUX_CJSON_H
#define PGMUX_CJSON_H

#define JSON_MAX_DEPTH 32

typedef struct {
    const unsigned char *p, *end;
    int depth;
} JsonText;

static PyObject *json_value(JsonText *t);

static inline void
json_blanks(JsonText *t)
{
    while (t->p < t->end && (*t->p == ' ' || *t->p == '\n' || *t->p == '\r' || *t->p == '\t'))
        t->p++;
}

/* A string at t->p (the opening quote): its text, or NULL (an error may be set). */
static PyObject *
json_string(JsonText *t)
{
    const unsigned char *start = ++t->p;
    while (t->p < t->end && *t->p != '"') {
        if (*t->p == '\\' || *t->p < 0x20)
            return NULL;  /* escapes and control characters: the json module */
        t->p++;
    }
    if (t->p >= t->end)
        return NULL;
    t->p++;
    return PyUnicode_DecodeUTF8((const char *)start, t->p - 1 - start, NULL);
}

static PyObject *
json_number(JsonText *t)
{
    const unsigned char *start = t->p;
    char copy[64], *stop;
    int decimal = 0;
    double value;
    if (t->p < t->end && *t->p == '-')
        t->p++;
    if (t->p < t->end && *t->p == '0')
        t->p++;
    else if (t->p < t->end && *t->p >= '1' && *t->p <= '9')
        while (t->p < t->end && *t->p >= '0' && *t->p <= '9')
            t->p++;
    else
        return NULL;
    if (t->p < t->end && *t->p == '.') {
        decimal = 1;
        if (++t->p >= t->end || *t->p < '0' || *t->p > '9')
            return NULL;
        while (t->p < t->end && *t->p >= '0' && *t->p <= '9')
            t->p++;
    }
    if (t->p < t->end && (*t->p == 'e' || *t->p == 'E')) {
        decimal = 1;
        if (++t->p < t->end && (*t->p == '+' || *t->p == '-'))
            t->p++;
        if (t->p >= t->end || *t->p < '0' || *t->p > '9')
            return NULL;
        while (t->p < t->end && *t->p >= '0' && *t->p <= '9')
            t->p++;
    }
    if (t->p - start >= (Py_ssize_t)sizeof(copy))
        return NULL;
    memcpy(copy, start, t->p - start);
    copy[t->p - start] = '\0';
    if (!decimal) {
        if (t->p - start > 18)
            return NULL;  /* int() of many digits has its own limits: the json module */
        return PyLong_FromLongLong(strtoll(copy, NULL, 10));
    }
    value = PyOS_string_to_double(copy, &stop, NULL);
    if ((value == -1.0 && PyErr_Occurred()) || *stop != '\0')
        return NULL;
    return PyFloat_FromDouble(value);
}

static PyObject *
json_word(JsonText *t, const char *word, Py_ssize_t size, PyObject *value)
{
    if (t->end - t->p < size || memcmp(t->p, word, size) != 0)
        return NULL;
    t->p += size;
    return Py_NewRef(value);
}

/* Items of an array or object after its opening bracket, into out (a list or a dict). */
static int
json_items(JsonText *t, PyObject *out, unsigned char close)
{
    t->p++;
    json_blanks(t);
    if (t->p < t->end && *t->p == close) {
        t->p++;
        return 0;
    }
    for (;;) {
        PyObject *key = NULL, *value;
        int status;
        json_blanks(t);
        if (close == '}') {
            if (t->p >= t->end || *t->p != '"' || (key = json_string(t)) == NULL)
                return -1;
            json_blanks(t);
            if (t->p >= t->end || *t->p++ != ':') {
                Py_DECREF(key);
                return -1;
            }
            json_blanks(t);
        }
        value = json_value(t);
        if (value == NULL) {
            Py_XDECREF(key);
            return -1;
        }
        status = key ? PyDict_SetItem(out, key, value) : PyList_Append(out, value);
        Py_XDECREF(key);
        Py_DECREF(value);
        if (status < 0)
            return -1;
        json_blanks(t);
        if (t->p < t->end && *t->p == ',') {
            t->p++;
            continue;
        }
        if (t->p < t->end && *t->p == close) {
            t->p++;
            return 0;
        }
        return -1;
    }
}

static PyObject *
json_container(JsonText *t, unsigned char close)
{
    PyObject *out;
    if (++t->depth > JSON_MAX_DEPTH)
        return NULL;
    out = close == '}' ? PyDict_New() : PyList_New(0);
    if (out != NULL && json_items(t, out, close) < 0)
        Py_CLEAR(out);
    t->depth--;
    return out;
}

static PyObject *
json_value(JsonText *t)
{
    if (t->p >= t->end)
        return NULL;
    switch (*t->p) {
    case '{':
        return json_container(t, '}');
    case '[':
        return json_container(t, ']');
    case '"':
        return json_string(t);
    case 't':
        return json_word(t, "true", 4, Py_True);
    case 'f':
        return json_word(t, "false", 5, Py_False);
    case 'n':
        return json_word(t, "null", 4, Py_None);
    default:
        return json_number(t);
    }
}

/* The value of the JSON text p[0:n] (exactly one value, no blanks around it, as jsonb_send
 * gives it and decode_jsonb reads it), or NULL: with an error set only for a failure of
 * Python itself (memory); else the text is not in the subset and the json module decides. */
static PyObject *
json_parse(const unsigned char *p, Py_ssize_t n)
{
    JsonText t = {p, p + n, 0};
    PyObject *value = json_value(&t);
    if (value != NULL && t.p != t.end)
        Py_CLEAR(value);
    if (value == NULL && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return NULL;
        PyErr_Clear();
    }
    return value;
}

#endif /* PGMUX_CJSON_H */
