/*
 * What the compiled decoders (_craft_speedups.c, _open_speedups.c, _canal_speedups.c) share: the
 * event model as C sees it, and binding it in `configure`.
 *
 * The event classes (events.Column, RowEvent, DdlEvent, ResolvedEvent) are slots dataclasses
 * without __post_init__; `bind_class` checks that and records each field's slot offset, so
 * objects are made with tp_alloc and their slots filled directly instead of running the
 * dataclass __init__ (the bulk of the cost otherwise).
 *
 * Each extension is its own shared object, so every `static` here is private to the module that
 * includes it.
 */
#ifndef TICDC_LAKE_SPEEDUPS_H
#define TICDC_LAKE_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>

#ifdef Py_T_OBJECT_EX
#define SLOT_OBJECT_EX Py_T_OBJECT_EX
#else
#define SLOT_OBJECT_EX T_OBJECT_EX
#endif

/* ---------------------------------------------------------------------------------------------
 * The event model, as handed over by `configure`: each class's fields in slot-offset order. */

enum { COLUMN_TYPE_CODE, COLUMN_FLAGS, COLUMN_VALUE, COLUMN_MYSQL_TYPE, COLUMN_NFIELDS };
static const char *const column_fields[] = {"type_code", "flags", "value", "mysql_type", NULL};

enum {
    ROW_COMMIT_TS, ROW_SCHEMA, ROW_TABLE, ROW_OP, ROW_COLUMNS, ROW_OLD_COLUMNS, ROW_TOPIC,
    ROW_PARTITION, ROW_OFFSET, ROW_INDEX, ROW_PARTITION_ID, ROW_HANDLE_KEY_ONLY, ROW_NFIELDS
};
static const char *const row_fields[] = {
    "commit_ts", "schema", "table", "op", "columns", "old_columns", "topic", "partition",
    "offset", "index", "partition_id", "handle_key_only", NULL};

enum { RES_TS, RES_TOPIC, RES_PARTITION, RES_OFFSET, RES_INDEX, RES_NFIELDS };
static const char *const resolved_fields[] = {"ts", "topic", "partition", "offset", "index", NULL};

typedef struct {
    PyTypeObject *type;
    Py_ssize_t offsets[16];
} SlotClass;

/* Every decoder builds Columns and RowEvents; DdlEvent and ResolvedEvent are its own to add. */
static SlotClass column_class, row_class;
static PyObject *op_insert, *op_update, *op_delete; /* events.INSERT, UPDATE, DELETE */
static int configured;

/* A new instance whose slots are all still NULL; the caller fills every one. */
static inline PyObject *
slot_new(const SlotClass *cls)
{
    return cls->type->tp_alloc(cls->type, 0);
}

/* Store a new reference (stolen) in a slot of a fresh instance. */
static inline void
slot_set(PyObject *obj, const SlotClass *cls, int field, PyObject *value)
{
    *(PyObject **)((char *)obj + cls->offsets[field]) = value;
}

static inline PyObject *
slot_get(PyObject *obj, const SlotClass *cls, int field)
{
    return *(PyObject **)((char *)obj + cls->offsets[field]);
}

/* A Column; `value` is stolen (and released if the Column cannot be made), the rest borrowed. */
static inline PyObject *
new_column(PyObject *type_code, PyObject *flags, PyObject *value, PyObject *mysql_type)
{
    PyObject *column = slot_new(&column_class);
    if (column == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    slot_set(column, &column_class, COLUMN_TYPE_CODE, Py_NewRef(type_code));
    slot_set(column, &column_class, COLUMN_FLAGS, Py_NewRef(flags));
    slot_set(column, &column_class, COLUMN_VALUE, value);
    slot_set(column, &column_class, COLUMN_MYSQL_TYPE, Py_NewRef(mysql_type));
    return column;
}

/* A dict sized for `count` columns up front, so it never resizes while it is filled. */
static inline PyObject *
new_image_dict(Py_ssize_t count)
{
#if PY_VERSION_HEX < 0x030D0000 /* private from 3.13 on */
    return _PyDict_NewPresized(count);
#else
    return PyDict_New();
#endif
}

/* The RuntimeError of an entry point called before `configure`; returns NULL. */
static inline PyObject *
not_configured(const char *module_name)
{
    PyErr_Format(PyExc_RuntimeError, "%s.configure() was not called", module_name);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * configure */

/* Check that `cls` is a slots class with exactly the slots `fields` (NULL-terminated), each a
 * writable object slot, and record their offsets in `out`. */
static inline int
bind_class(PyObject *cls, const char *const *fields, SlotClass *out)
{
    if (!PyType_Check(cls)) {
        PyErr_Format(PyExc_TypeError, "%R is not a class", cls);
        return -1;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_base != &PyBaseObject_Type) {
        PyErr_Format(PyExc_TypeError, "%s must derive directly from object", type->tp_name);
        return -1;
    }
    /* Objects are made without __init__, so there must be nothing else to run. */
    if (PyObject_HasAttrString(cls, "__post_init__")) {
        PyErr_Format(PyExc_TypeError, "%s has __post_init__", type->tp_name);
        return -1;
    }
    PyObject *slots = PyObject_GetAttrString(cls, "__slots__");
    if (slots == NULL)
        return -1;
    PyObject *slot_tuple = PySequence_Tuple(slots);
    Py_DECREF(slots);
    if (slot_tuple == NULL)
        return -1;
    Py_ssize_t nfields = 0;
    while (fields[nfields] != NULL)
        nfields++;
    int rc = -1;
    if (PyTuple_GET_SIZE(slot_tuple) != nfields) {
        PyErr_Format(PyExc_ValueError, "%s has slots %R; the extension fills %zd fields",
                     type->tp_name, slot_tuple, nfields);
        goto done;
    }
    for (Py_ssize_t i = 0; i < nfields; i++) {
        PyObject *name = PyUnicode_FromString(fields[i]);
        if (name == NULL)
            goto done;
        int present = PySequence_Contains(slot_tuple, name);
        PyObject *descr = present == 1 ? PyDict_GetItemWithError(type->tp_dict, name) : NULL;
        Py_DECREF(name);
        if (present < 0)
            goto done;
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s has no slot %s the extension can fill",
                             type->tp_name, fields[i]);
            goto done;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != SLOT_OBJECT_EX || (member->flags & READONLY)) {
            PyErr_Format(PyExc_ValueError, "slot %s of %s is not a writable object slot",
                         fields[i], type->tp_name);
            goto done;
        }
        out->offsets[i] = member->offset;
    }
    Py_INCREF(type);
    Py_XSETREF(out->type, type);
    rc = 0;
done:
    Py_DECREF(slot_tuple);
    return rc;
}

/* Keep the operation values (events.INSERT, UPDATE, DELETE) the events are given. */
static inline void
bind_ops(PyObject *insert, PyObject *update, PyObject *delete)
{
    Py_XSETREF(op_insert, Py_NewRef(insert));
    Py_XSETREF(op_update, Py_NewRef(update));
    Py_XSETREF(op_delete, Py_NewRef(delete));
}

/* ---------------------------------------------------------------------------------------------
 * Value checks: values.py in C, for the common kinds only. `events_fit` answers 1 when every
 * value of every row image surely fits its column's type, and 0 when one may not or is of a kind
 * left to Python (a full type naming DECIMAL precision or ENUM/SET members, a value of
 * another kind): values.events_problem then decides. So a 0 only costs time, and the two agree
 * wherever C answers 1. It never raises (a failed look is a 0). */

#define CHECK_UNSIGNED 0x80 /* mysql.FLAG_UNSIGNED */

static inline int
check_digits(const char *s, int count)
{
    for (int i = 0; i < count; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static inline int
check_two(const char *s, int max)
{
    return check_digits(s, 2) && (s[0] - '0') * 10 + (s[1] - '0') <= max;
}

/* `.f…` of 1 to 6 digits, or nothing, filling s[0..n). */
static inline int
check_fraction(const char *s, Py_ssize_t n)
{
    return n == 0 || (n >= 2 && n <= 7 && s[0] == '.' && check_digits(s + 1, (int)n - 1));
}

static inline int
check_date(const char *s)
{
    return check_digits(s, 4) && s[4] == '-' && check_two(s + 5, 12) && s[7] == '-'
           && check_two(s + 8, 31);
}

static inline int
check_temporal(int code, const char *s, Py_ssize_t n)
{
    if (code == 10 || code == 14) /* DATE, NEWDATE */
        return n == 10 && check_date(s);
    if (code == 11) { /* TIME: [-]HH:MM:SS[.f…] or [-]HHH:MM:SS[.f…], within ±838:59:59 */
        if (n > 0 && s[0] == '-')
            s++, n--;
        int hour_digits = n >= 9 && s[3] == ':' ? 3 : 2;
        if (n < hour_digits + 6 || !check_digits(s, hour_digits) || s[hour_digits] != ':')
            return 0;
        int hours = 0;
        for (int i = 0; i < hour_digits; i++)
            hours = hours * 10 + (s[i] - '0');
        const char *rest = s + hour_digits;
        if (!check_two(rest + 1, 59) || rest[3] != ':' || !check_two(rest + 4, 59)
            || !check_fraction(rest + 6, n - hour_digits - 6))
            return 0;
        if (hours != 838)
            return hours < 838;
        /* 838 hours: up to 838:59:59 exactly (a fraction of zeros is still exact). */
        if (rest[1] != '5' || rest[2] != '9' || rest[4] != '5' || rest[5] != '9')
            return 1;
        for (Py_ssize_t i = hour_digits + 7; i < n; i++)
            if (s[i] != '0')
                return 0;
        return 1;
    }
    /* DATETIME, TIMESTAMP */
    return n >= 19 && check_date(s) && s[10] == ' ' && check_two(s + 11, 23) && s[13] == ':'
           && check_two(s + 14, 59) && s[16] == ':' && check_two(s + 17, 59)
           && check_fraction(s + 19, n - 19);
}

/* DECIMAL text of unknown precision: [-]digits[.digits], at most 65 digits before the point
 * (leading zeros aside) and 30 after it. */
static inline int
check_decimal(const char *s, Py_ssize_t n)
{
    Py_ssize_t i = n > 0 && s[0] == '-' ? 1 : 0, start = i;
    while (i < n && s[i] == '0')
        i++;
    Py_ssize_t significant = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    if (i == start || i - significant > 65)
        return 0;
    if (i == n)
        return 1;
    if (s[i] != '.' || n - i - 1 < 1 || n - i - 1 > 30)
        return 0;
    return check_digits(s + i + 1, (int)(n - i - 1));
}

static PyObject *check_json_loads; /* orjson.loads, imported on first use */

/* Does orjson parse `text`? 0 also when it cannot be asked: Python then decides. */
static int
json_parses(PyObject *text)
{
    if (check_json_loads == NULL) {
        PyObject *orjson = PyImport_ImportModule("orjson");
        check_json_loads = orjson ? PyObject_GetAttrString(orjson, "loads") : NULL;
        Py_XDECREF(orjson);
        if (check_json_loads == NULL) {
            PyErr_Clear();
            return 0;
        }
    }
    PyObject *parsed = PyObject_CallOneArg(check_json_loads, text);
    if (parsed == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(parsed);
    return 1;
}

/* fields_fit's check of an integer of type `code`: `number`, or when `overflow` is not 0 a
 * number beyond int64 on that side (within 64 bits when above). */
static inline int
integer_fits(long code, int is_unsigned, long long number, int overflow)
{
    if (overflow != 0) /* beyond int64: only BIGINT UNSIGNED, BIT and SET go there */
        return overflow > 0 && ((code == 8 && is_unsigned) || code == 16 || code == 248);
    int bits = code == 1 ? 8 : code == 2 ? 16 : code == 9 ? 24 : code == 3 ? 32 : 64;
    switch (code) {
    case 13:
        return number == 0 || (number >= 1901 && number <= 2155);
    case 16: case 248:
        return number >= 0;
    case 247:
        return number >= 0 && number <= 65535;
    case 8:
        return !is_unsigned || number >= 0;
    default:
        if (is_unsigned)
            return number >= 0 && number < (1LL << bits);
        return number >= -(1LL << (bits - 1)) && number < (1LL << (bits - 1));
    }
}

/* Is `code` one of the integer types (whose check reads the flags)? */
static inline int
integer_code(long code)
{
    switch (code) {
    case 1: case 2: case 9: case 3: case 8: case 13: case 16: case 247: case 248:
        return 1;
    default:
        return 0;
    }
}

/* fields_fit's check of ASCII text of type `code` (mysql_type None): 1 fits, 0 does not, -1
 * only the str can tell (JSON, parsed by orjson). */
static inline int
text_fits(long code, const char *text, Py_ssize_t length)
{
    if (integer_code(code) || code == 4 || code == 5)
        return 0; /* numbers, not text */
    switch (code) {
    case 10: case 14: case 11: case 12: case 7:
        return check_temporal((int)code, text, length);
    case 0: case 246:
        return check_decimal(text, length);
    case 245:
        return -1;
    default: /* strings, blobs and types without a check */
        return 1;
    }
}

/* fields_fit of a value (neither NULL nor None) of type `code` (0..255), its flags' bits
 * read when it is an integer type. */
static inline int
code_fits(long code, long flag_bits, PyObject *value, PyObject *mysql_type)
{
    switch (code) {
    case 1: case 2: case 9: case 3: case 8: case 13: case 16: case 247: case 248: {
        if (!PyLong_CheckExact(value))
            return 0;
        if ((code == 247 || code == 248) && mysql_type != Py_None)
            return 0;
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow > 0) {
            PyLong_AsUnsignedLongLong(value); /* fits 64 bits unless it raises */
            if (PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
        }
        return integer_fits(code, (flag_bits & CHECK_UNSIGNED) != 0, number, overflow);
    }
    case 4: case 5:
        return PyFloat_CheckExact(value) && isfinite(PyFloat_AS_DOUBLE(value));
    case 10: case 14: case 11: case 12: case 7: case 0: case 246:
        if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_COMPACT_ASCII(value))
            return 0;
        if ((code == 0 || code == 246) && mysql_type != Py_None)
            return 0;
        return text_fits(code, (const char *)PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value));
    case 245: /* JSON text that orjson parses */
        return PyUnicode_CheckExact(value) && json_parses(value);
    default: /* strings, blobs and types without a check */
        return 1;
    }
}

/* Does a column's value surely fit its type (values.py's checks)? 0: Python decides. */
static inline int
fields_fit(PyObject *code_object, PyObject *flags, PyObject *value, PyObject *mysql_type)
{
    if (value == NULL || code_object == NULL) /* a slot never set: Python reports it */
        return 0;
    if (value == Py_None || code_object == Py_None)
        return 1;
    if (!PyLong_CheckExact(code_object))
        return 0;
    int overflow;
    long code = PyLong_AsLongAndOverflow(code_object, &overflow);
    if (overflow || code < 0 || code > 255) {
        PyErr_Clear();
        return 0;
    }
    long flag_bits = 0;
    if (integer_code(code)) {
        if (flags == NULL || !PyLong_CheckExact(flags))
            return 0;
        flag_bits = PyLong_AsLongAndOverflow(flags, &overflow);
        if (overflow)
            return 0;
    }
    return code_fits(code, flag_bits, value, mysql_type);
}

static inline int
value_fits(PyObject *column)
{
    return fields_fit(slot_get(column, &column_class, COLUMN_TYPE_CODE),
                      slot_get(column, &column_class, COLUMN_FLAGS),
                      slot_get(column, &column_class, COLUMN_VALUE),
                      slot_get(column, &column_class, COLUMN_MYSQL_TYPE));
}

static inline int
image_fits(PyObject *image)
{
    if (image == NULL)
        return 0;
    if (image == Py_None)
        return 1;
    if (!PyDict_CheckExact(image))
        return 0;
    Py_ssize_t pos = 0;
    PyObject *name, *column;
    while (PyDict_Next(image, &pos, &name, &column))
        if (!Py_IS_TYPE(column, column_class.type) || !value_fits(column))
            return 0;
    return 1;
}

/* events_fit(events) -> bool, for the module's method table. */
static PyObject *
speedups_events_fit(PyObject *module, PyObject *events)
{
    (void)module;
    if (!configured || !PyList_CheckExact(events))
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        if (!Py_IS_TYPE(event, row_class.type))
            continue;
        if (!image_fits(slot_get(event, &row_class, ROW_COLUMNS))
            || !image_fits(slot_get(event, &row_class, ROW_OLD_COLUMNS)))
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

#define EVENTS_FIT_METHOD                                                                      \
    {"events_fit", speedups_events_fit, METH_O,                                                \
     "events_fit(events) -> True when every row value surely fits its column's type; False: "   \
     "values.events_problem decides"}

#endif /* TICDC_LAKE_SPEEDUPS_H */
