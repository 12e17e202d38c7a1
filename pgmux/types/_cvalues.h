/* Column values for pgmux.types._crows: one builder per kind of built-in decoder.
 *
 * Each builder makes exactly the value the Python decoder of its kind returns, for the
 * inputs it accepts; for any other input it calls that Python decoder on the bytes
 * (call_decoder), which returns the unusual value (a date beyond datetime, 24:00:00) or
 * raises its own error. Included by _crows.c only.
 */
#ifndef PGMUX_CVALUES_H
#define PGMUX_CVALUES_H

#include "_cjson.h"

enum {
    KIND_CALL,          /* any other decoder: called on the column's bytes */
    KIND_INT2,          /* binary.decode_int2 ... decode_uint8 */
    KIND_INT4,
    KIND_INT8,
    KIND_UINT4,
    KIND_UINT8,
    KIND_FLOAT8,        /* binary.decode_float8 */
    KIND_BOOL,          /* binary.decode_bool */
    KIND_UUID,          /* binary.decode_uuid */
    KIND_DATE,          /* binary.decode_date */
    KIND_TIME,          /* binary.decode_time */
    KIND_TIMESTAMP,     /* binary.decode_timestamp */
    KIND_TIMESTAMPTZ,   /* binary.decode_timestamptz */
    KIND_BYTEA,         /* binary.decode_bytea */
    KIND_TEXT,          /* text.decode_str (text and binary alike) */
    KIND_JSONB,         /* binary.decode_jsonb */
    KIND_NUMERIC_TEXT,  /* text.decode_numeric */
    KIND_INT_TEXT,      /* text.decode_int (int) */
    KIND_FLOAT_TEXT,    /* text.decode_float (float) */
    KIND_BOOL_TEXT,     /* text.decode_bool */
    KIND_COUNT
};

static const char *const kind_names[KIND_COUNT] = {
    "CALL", "INT2", "INT4", "INT8", "UINT4", "UINT8", "FLOAT8", "BOOL", "UUID", "DATE",
    "TIME", "TIMESTAMP", "TIMESTAMPTZ", "BYTEA", "TEXT", "JSONB", "NUMERIC_TEXT", "INT_TEXT",
    "FLOAT_TEXT", "BOOL_TEXT",
};

static PyObject *uuid_type;      /* uuid.UUID */
static PyObject *uuid_unknown;   /* uuid.SafeUUID.unknown */
static PyObject *decimal_type;   /* decimal.Decimal */
static PyObject *json_scan;      /* json.JSONDecoder().scan_once (the C scanner) */
static PyObject *str_int, *str_is_safe, *zero;

#define USECS_PER_DAY 86400000000LL
#define EPOCH_ORDINAL 730120        /* date(2000, 1, 1).toordinal() */
#define MAX_ORDINAL 3652059         /* date.max.toordinal() */
#define DAYS_0000_03_01_TO_2000_01_01 730425

static inline int
read_i16(const unsigned char *p)
{
    return (int16_t)(((unsigned)p[0] << 8) | p[1]);
}

static inline uint32_t read_u32(const unsigned char *p);

static inline long
read_i32(const unsigned char *p)
{
    return (long)(int32_t)read_u32(p);
}

static inline uint32_t
read_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t
read_u64(const unsigned char *p)
{
    return ((uint64_t)read_u32(p) << 32) | read_u32(p + 4);
}

static int
add_kinds(PyObject *module)
{
    PyObject *kinds = PyDict_New();
    int i;
    if (kinds == NULL)
        return -1;
    for (i = 0; i < KIND_COUNT; i++) {
        PyObject *number = PyLong_FromLong(i);
        if (number == NULL || PyDict_SetItemString(kinds, kind_names[i], number) < 0) {
            Py_XDECREF(number);
            Py_DECREF(kinds);
            return -1;
        }
        Py_DECREF(number);
    }
    return PyModule_AddObject(module, "KINDS", kinds);
}

static PyObject *
configure_values(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"uuid", "uuid_unknown", "decimal", "json_scan", NULL};
    PyObject *uuid, *unknown, *decimal, *scan;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOO:configure", names, &uuid, &unknown,
                                     &decimal, &scan))
        return NULL;
    if (!PyType_Check(uuid) || !PyCallable_Check(decimal) || !PyCallable_Check(scan)) {
        PyErr_SetString(PyExc_TypeError, "configure: uuid is a class; decimal, json_scan "
                                         "are callables");
        return NULL;
    }
    if (str_int == NULL) {
        str_int = PyUnicode_InternFromString("int");
        str_is_safe = PyUnicode_InternFromString("is_safe");
        zero = PyLong_FromLong(0);
        if (str_int == NULL || str_is_safe == NULL || zero == NULL)
            return NULL;
    }
    Py_INCREF(uuid);
    Py_XSETREF(uuid_type, uuid);
    Py_INCREF(unknown);
    Py_XSETREF(uuid_unknown, unknown);
    Py_INCREF(decimal);
    Py_XSETREF(decimal_type, decimal);
    Py_INCREF(scan);
    Py_XSETREF(json_scan, scan);
    Py_RETURN_NONE;
}

/* The Python decoder on the column's bytes: the reference for everything unusual. */
static PyObject *
call_decoder(PyObject *decoder, const unsigned char *p, Py_ssize_t n)
{
    PyObject *data = PyBytes_FromStringAndSize((const char *)p, n);
    PyObject *value;
    if (data == NULL)
        return NULL;
    value = PyObject_CallOneArg(decoder, data);
    Py_DECREF(data);
    return value;
}

/* A fast path failed with an error: let the Python decoder decide (it raises or returns). */
static PyObject *
retry(PyObject *decoder, const unsigned char *p, Py_ssize_t n)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyErr_Clear();
    return call_decoder(decoder, p, n);
}

/* -- dates and times: days / microseconds since 2000-01-01, as temporal.py counts them - */

static inline long long
floor_div(long long a, long long b, long long *remainder)
{
    long long q = a / b, r = a % b;
    if (r < 0) {
        q -= 1;
        r += b;
    }
    *remainder = r;
    return q;
}

/* Howard Hinnant's civil_from_days (temporal.civil_from_days), for days date can hold. */
static void
civil_from_days(long long days, int *year, int *month, int *day)
{
    long long doe, z = days + DAYS_0000_03_01_TO_2000_01_01;
    long long era = floor_div(z, 146097, &doe);
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long long mp = (5 * doy + 2) / 153;
    *day = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = (int)(era * 400 + yoe + (*month <= 2));
}

static inline int
days_in_range(long long days)
{
    return days >= 1 - EPOCH_ORDINAL && days <= MAX_ORDINAL - EPOCH_ORDINAL;
}

static PyObject *
date_value(long long days, PyObject *decoder, const unsigned char *p, Py_ssize_t n)
{
    int year, month, day;
    if (!days_in_range(days))  /* infinity, BC, beyond 9999 */
        return call_decoder(decoder, p, n);
    civil_from_days(days, &year, &month, &day);
    return PyDate_FromDate(year, month, day);
}

static PyObject *
timestamp_value(long long micros, PyObject *tz, PyObject *decoder, const unsigned char *p,
                Py_ssize_t n)
{
    long long clock, days = floor_div(micros, USECS_PER_DAY, &clock);
    int year, month, day;
    if (!days_in_range(days))
        return call_decoder(decoder, p, n);
    civil_from_days(days, &year, &month, &day);
    return PyDateTimeAPI->DateTime_FromDateAndTime(
        year, month, day, (int)(clock / 3600000000LL), (int)(clock / 60000000LL % 60),
        (int)(clock / 1000000 % 60), (int)(clock % 1000000), tz, PyDateTimeAPI->DateTimeType);
}

static PyObject *
time_value(long long micros, PyObject *decoder, const unsigned char *p, Py_ssize_t n)
{
    if (micros < 0 || micros >= USECS_PER_DAY)  /* 24:00:00, or no time at all */
        return call_decoder(decoder, p, n);
    return PyTime_FromTime((int)(micros / 3600000000LL), (int)(micros / 60000000LL % 60),
                           (int)(micros / 1000000 % 60), (int)(micros % 1000000));
}

/* -- the rest ------------------------------------------------------------------------- */

static PyObject *
uuid_value(const unsigned char *p)
{
    PyTypeObject *type = (PyTypeObject *)uuid_type;
    PyObject *value, *number;
#if PY_VERSION_HEX >= 0x030D0000
    number = PyLong_FromUnsignedNativeBytes(p, 16, Py_ASNATIVEBYTES_BIG_ENDIAN);
#else
    number = _PyLong_FromByteArray(p, 16, 0, 0);
#endif
    if (number == NULL)
        return NULL;
    value = type->tp_alloc(type, 0);  /* what object.__new__(UUID) does */
    if (value == NULL || PyObject_GenericSetAttr(value, str_int, number) < 0
        || PyObject_GenericSetAttr(value, str_is_safe, uuid_unknown) < 0) {
        Py_XDECREF(value);
        Py_DECREF(number);
        return NULL;
    }
    Py_DECREF(number);
    /* Its slots hold an int and SafeUUID.unknown, and UUID refuses new attributes: it can
     * never be part of a reference cycle, so the collector need not follow it (as CPython
     * untracks tuples and dicts that hold only atomic values). */
    PyObject_GC_UnTrack(value);
    return value;
}

/* jsonb: the version byte 1, then the text; the common subset parsed here (_cjson.h), the
 * rest by the json module's C scanner, anything it refuses by the Python decoder. */
static PyObject *
jsonb_value(PyObject *decoder, const unsigned char *p, Py_ssize_t n)
{
    PyObject *text, *args[2], *found, *value = NULL;
    if (n < 1 || p[0] != 1)
        return call_decoder(decoder, p, n);
    value = json_parse(p + 1, n - 1);
    if (value != NULL || PyErr_Occurred())
        return value;
    text = PyUnicode_DecodeUTF8((const char *)p + 1, n - 1, NULL);
    if (text == NULL)
        return retry(decoder, p, n);
    args[0] = text;
    args[1] = zero;
    found = PyObject_Vectorcall(json_scan, args, 2, NULL);
    if (found != NULL && PyTuple_CheckExact(found) && PyTuple_GET_SIZE(found) == 2
        && PyLong_CheckExact(PyTuple_GET_ITEM(found, 1))) {
        Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(found, 1));
        if (end == -1 && PyErr_Occurred())
            PyErr_Clear();
        else if (end == PyUnicode_GET_LENGTH(text))
            value = Py_NewRef(PyTuple_GET_ITEM(found, 0));
    }
    Py_DECREF(text);
    Py_XDECREF(found);
    if (value != NULL)
        return value;
    if (found == NULL)
        return retry(decoder, p, n);
    return call_decoder(decoder, p, n);  /* data after the JSON text: it says so */
}

static PyObject *
numeric_text_value(PyObject *decoder, const unsigned char *p, Py_ssize_t n)
{
    PyObject *text = PyUnicode_DecodeASCII((const char *)p, n, NULL);
    PyObject *value;
    if (text == NULL)
        return retry(decoder, p, n);
    value = PyObject_CallOneArg(decimal_type, text);
    Py_DECREF(text);
    return value != NULL ? value : retry(decoder, p, n);
}

/* int(b"...") for the server's output: an optional minus and 1 to 18 digits. */
static PyObject *
int_text_value(PyObject *decoder, const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = n > 0 && p[0] == '-';
    long long value = 0;
    if (n - i < 1 || n - i > 18)
        return call_decoder(decoder, p, n);
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return call_decoder(decoder, p, n);
        value = value * 10 + (p[i] - '0');
    }
    return PyLong_FromLongLong(p[0] == '-' ? -value : value);
}

static int
digits(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i)
{
    Py_ssize_t start = *i;
    while (*i < n && p[*i] >= '0' && p[*i] <= '9')
        (*i)++;
    return *i > start;
}

/* float(b"...") for decimal text: [-]digits[.digits][e[+-]digits], parsed by the same
 * PyOS_string_to_double float() uses; NaN, Infinity and the rest go to float() itself. */
static PyObject *
float_text_value(PyObject *decoder, const unsigned char *p, Py_ssize_t n)
{
    char copy[64], *end;
    Py_ssize_t i = n > 0 && p[0] == '-';
    double value;
    int ok = n < (Py_ssize_t)sizeof(copy) && digits(p, n, &i);
    if (ok && i < n && p[i] == '.') {
        i++;
        ok = digits(p, n, &i);
    }
    if (ok && i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-'))
            i++;
        ok = digits(p, n, &i);
    }
    if (!ok || i != n)
        return call_decoder(decoder, p, n);
    memcpy(copy, p, n);
    copy[n] = '\0';
    value = PyOS_string_to_double(copy, &end, NULL);
    if ((value == -1.0 && PyErr_Occurred()) || end != copy + n)
        return retry(decoder, p, n);
    return PyFloat_FromDouble(value);
}

static PyObject *
bool_value(int byte, int true_byte, int false_byte, PyObject *decoder, const unsigned char *p,
           Py_ssize_t n)
{
    if (n == 1 && byte == true_byte)
        Py_RETURN_TRUE;
    if (n == 1 && byte == false_byte)
        Py_RETURN_FALSE;
    return call_decoder(decoder, p, n);
}

static PyObject *
float8_value(const unsigned char *p)
{
#if PY_VERSION_HEX >= 0x030B0000
    double value = PyFloat_Unpack8((const char *)p, 0);
#else
    double value = _PyFloat_Unpack8(p, 0);
#endif
    if (value == -1.0 && PyErr_Occurred())
        return NULL;
    return PyFloat_FromDouble(value);
}

/* One column's value; p[0:n] are its bytes (n >= 0). */
static PyObject *
decode_value(int kind, const unsigned char *p, Py_ssize_t n, PyObject *decoder)
{
    switch (kind) {
    case KIND_INT2:
        return n == 2 ? PyLong_FromLong(read_i16(p)) : call_decoder(decoder, p, n);
    case KIND_INT4:
        return n == 4 ? PyLong_FromLong(read_i32(p)) : call_decoder(decoder, p, n);
    case KIND_INT8:
        return n == 8 ? PyLong_FromLongLong((long long)read_u64(p))
                      : call_decoder(decoder, p, n);
    case KIND_UINT4:
        return n == 4 ? PyLong_FromUnsignedLong(read_u32(p))
                      : call_decoder(decoder, p, n);
    case KIND_UINT8:
        return n == 8 ? PyLong_FromUnsignedLongLong(read_u64(p)) : call_decoder(decoder, p, n);
    case KIND_FLOAT8:
        return n == 8 ? float8_value(p) : call_decoder(decoder, p, n);
    case KIND_BOOL:
        return bool_value(n ? p[0] : -1, 1, 0, decoder, p, n);
    case KIND_UUID:
        return n == 16 ? uuid_value(p) : call_decoder(decoder, p, n);
    case KIND_DATE:
        return n == 4 ? date_value(read_i32(p), decoder, p, n) : call_decoder(decoder, p, n);
    case KIND_TIME:
        return n == 8 ? time_value((long long)read_u64(p), decoder, p, n)
                      : call_decoder(decoder, p, n);
    case KIND_TIMESTAMP:
        return n == 8 ? timestamp_value((long long)read_u64(p), Py_None, decoder, p, n)
                      : call_decoder(decoder, p, n);
    case KIND_TIMESTAMPTZ:
        return n == 8 ? timestamp_value((long long)read_u64(p), PyDateTime_TimeZone_UTC,
                                        decoder, p, n)
                      : call_decoder(decoder, p, n);
    case KIND_BYTEA:
        return PyBytes_FromStringAndSize((const char *)p, n);
    case KIND_TEXT: {
        PyObject *text = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
        return text != NULL ? text : retry(decoder, p, n);
    }
    case KIND_JSONB:
        return jsonb_value(decoder, p, n);
    case KIND_NUMERIC_TEXT:
        return numeric_text_value(decoder, p, n);
    case KIND_INT_TEXT:
        return int_text_value(decoder, p, n);
    case KIND_FLOAT_TEXT:
        return float_text_value(decoder, p, n);
    case KIND_BOOL_TEXT:
        return bool_value(n ? p[0] : -1, 't', 'f', decoder, p, n);
    default:
        return call_decoder(decoder, p, n);
    }
}

#endif /* PGMUX_CVALUES_H */
