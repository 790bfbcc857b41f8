/*
 * Compiled hot path of the Canal-JSON decoder (PROTOCOLS.md §4): from a Kafka value (or its
 * parsed message) of an INSERT/UPDATE/DELETE to the events.RowEvent with its events.Column images.
 *
 * It is a shortcut, never a second opinion: `row_event` either returns exactly the event that
 * canal_json's pure-Python reference path returns for the same message, or None, and the caller
 * then runs that reference path. None is the answer for everything but the common case: DDL,
 * watermarks, claim-check references, a table whose column specs are not cached yet, and every
 * malformed message. So every DecodeError, and its reason, comes from the Python code; the
 * extension has no error messages of its own to keep in step.
 *
 * Values: a column's plan (`column_plan`) says how its text becomes a value. The forms TiCDC
 * writes (decimal digits, positional floats, ISO-8859-1 binary text) are converted here; any
 * other text goes to the column's Python converter, which gives the reference's own value or
 * raises, and then the message goes back to the reference path.
 *
 * Safety: every object taken from the message is type-checked (exact dict, list, str, int, as
 * the reference checks them) before it is read, and nothing is indexed without a size check.
 * Objects borrowed from a dict are held while Python code (a converter, __eq__) runs.
 *
 * Speed: Column and RowEvent are slots dataclasses without __post_init__; `configure` checks
 * that and records each field's slot offset (as _craft_speedups does), so objects are made with
 * tp_alloc and their slots filled directly instead of running the dataclass __init__. orjson
 * builds presized dicts, whose lookups by a key that is not the very same object go through a
 * generic compare; the message is therefore read in one pass over its entries, and a row's
 * columns are matched against the table plan in order rather than looked up.
 */
#include "_speedups.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* How a column's text becomes its value; canal_json._table_plan maps converters to these. */
enum {
    K_TEXT = 0,    /* kept as sent: text, JSON, temporal types */
    K_INTEGER = 1, /* decimal integer within [low, high] */
    K_FLOAT32 = 2, /* float() rounded through float32 */
    K_DOUBLE = 3,  /* float() */
    K_DECIMAL = 4, /* [-]digits[.digits], kept as sent */
    K_LATIN1 = 5,  /* ISO-8859-1 text → bytes */
    K_CALL = 6,    /* a converter the extension does not know: always call it */
};

/* Outcome of a step: done; "not the fast case" (the reference path decides); or a Python error
 * that must propagate. */
#define OK 1
#define BAIL 0
#define ERROR (-1)

static PyObject *json_loads; /* orjson.loads: the reference's parser */
static PyObject *zero;

/* After a failed call: an ordinary exception means the reference path should look at the
 * message (it raises the right DecodeError); anything else (KeyboardInterrupt, SystemExit)
 * propagates. */
static int
bail_or_error(void)
{
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return BAIL;
    }
    return ERROR;
}

/* Equal exact strs. orjson hands out one object per distinct short key, so the identity test
 * settles most calls; the rest compare kind, length and bytes, as CPython's own str equality
 * does. Every caller treats "different" as "take the slower exact path", never as a verdict. */
static inline int
same_str(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (!PyUnicode_IS_COMPACT(a) || !PyUnicode_IS_COMPACT(b))
        return PyUnicode_Compare(a, b) == 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    int kind = PyUnicode_KIND(a);
    return n == PyUnicode_GET_LENGTH(b) && kind == PyUnicode_KIND(b)
           && memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * (size_t)kind) == 0;
}

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* An ASCII str equal to the C string `name` of length `n` (inlined: message keys are matched
 * against literal names, and the call would cost more than the compare). */
static ALWAYS_INLINE int
is_name(PyObject *key, const char *name, Py_ssize_t n)
{
    return PyUnicode_GET_LENGTH(key) == n
           && memcmp(PyUnicode_1BYTE_DATA(key), name, (size_t)n) == 0;
}

#define IS_NAME(key, literal) is_name((key), literal, (Py_ssize_t)sizeof(literal) - 1)

/* ---------------------------------------------------------------------------------------------
 * ColumnPlan: a column's type code, flags, full type and value conversion. */

typedef struct {
    PyObject_HEAD
    int kind;
    long long low;           /* K_INTEGER bounds; low <= 0 */
    unsigned long long high;
    PyObject *type_code;     /* shared by every Column of this column */
    PyObject *flags;
    PyObject *mysql_type;    /* str or None */
    PyObject *convert;       /* the Python converter; None for K_TEXT */
} ColumnPlan;

static int
column_plan_traverse(ColumnPlan *self, visitproc visit, void *arg)
{
    Py_VISIT(self->type_code);
    Py_VISIT(self->flags);
    Py_VISIT(self->mysql_type);
    Py_VISIT(self->convert);
    return 0;
}

/* Only for dealloc, not tp_clear: a plan in use must never be emptied, so the garbage collector
 * breaks a cycle through one by clearing the other objects in it (dicts, functions). */
static void
column_plan_clear(ColumnPlan *self)
{
    Py_CLEAR(self->type_code);
    Py_CLEAR(self->flags);
    Py_CLEAR(self->mysql_type);
    Py_CLEAR(self->convert);
}

static void
column_plan_dealloc(ColumnPlan *self)
{
    PyObject_GC_UnTrack(self);
    column_plan_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
column_plan_repr(ColumnPlan *self)
{
    return PyUnicode_FromFormat("ColumnPlan(kind=%d, type_code=%R, flags=%R, mysql_type=%R)",
                                self->kind, self->type_code, self->flags, self->mysql_type);
}

static PyTypeObject ColumnPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ticdc_lake.protocols.native._canal_speedups.ColumnPlan",
    .tp_basicsize = sizeof(ColumnPlan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "How one column is decoded; made by column_plan().",
    .tp_traverse = (traverseproc)column_plan_traverse,
    .tp_dealloc = (destructor)column_plan_dealloc,
    .tp_repr = (reprfunc)column_plan_repr,
};

/* column_plan(kind, type_code, flags, mysql_type, convert, low=0, high=0) */
static PyObject *
canal_column_plan(PyObject *module, PyObject *args)
{
    int kind;
    PyObject *type_code, *flags, *mysql_type, *convert, *low_obj = zero, *high_obj = zero;
    if (!PyArg_ParseTuple(args, "iO!O!OO|O!O!:column_plan", &kind, &PyLong_Type, &type_code,
                          &PyLong_Type, &flags, &mysql_type, &convert, &PyLong_Type, &low_obj,
                          &PyLong_Type, &high_obj))
        return NULL;
    if (kind < K_TEXT || kind > K_CALL) {
        PyErr_Format(PyExc_ValueError, "unknown conversion kind %d", kind);
        return NULL;
    }
    if (mysql_type != Py_None && !PyUnicode_CheckExact(mysql_type)) {
        PyErr_SetString(PyExc_TypeError, "mysql_type must be a str or None");
        return NULL;
    }
    if (kind == K_TEXT ? convert != Py_None : !PyCallable_Check(convert)) {
        PyErr_SetString(PyExc_TypeError, "convert must be callable (None for text columns)");
        return NULL;
    }
    long long low = 0;
    unsigned long long high = 0;
    if (kind == K_INTEGER) {
        low = PyLong_AsLongLong(low_obj);
        if (low == -1 && PyErr_Occurred())
            return NULL;
        high = PyLong_AsUnsignedLongLong(high_obj);
        if (high == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
        if (low > 0) { /* integer_value relies on it; every MySQL range holds 0 */
            PyErr_SetString(PyExc_ValueError, "integer range must include 0");
            return NULL;
        }
    }
    ColumnPlan *plan = PyObject_GC_New(ColumnPlan, &ColumnPlanType);
    if (plan == NULL)
        return NULL;
    plan->kind = kind;
    plan->low = low;
    plan->high = high;
    plan->type_code = Py_NewRef(type_code);
    plan->flags = Py_NewRef(flags);
    plan->mysql_type = Py_NewRef(mysql_type);
    plan->convert = Py_NewRef(convert);
    PyObject_GC_Track(plan);
    return (PyObject *)plan;
}

/* ---------------------------------------------------------------------------------------------
 * TablePlan: the columns of one table in mysqlType order, with the mysqlType it was made from. */

typedef struct {
    PyObject *name;      /* the mysqlType key */
    PyObject *type_text; /* its value, a str */
    PyObject *plan;      /* a ColumnPlan */
} PlannedColumn;

typedef struct {
    PyObject_HEAD
    PyObject *types;    /* the mysqlType dict */
    PyObject *by_name;  /* name → ColumnPlan, for rows whose columns come in another order */
    PyObject *template; /* name → None in mysqlType order: an image is a copy with values set */
    Py_ssize_t count;
    PlannedColumn *columns;
} TablePlan;

static int
table_plan_traverse(TablePlan *self, visitproc visit, void *arg)
{
    Py_VISIT(self->types);
    Py_VISIT(self->by_name);
    Py_VISIT(self->template);
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Py_VISIT(self->columns[i].name);
        Py_VISIT(self->columns[i].type_text);
        Py_VISIT(self->columns[i].plan);
    }
    return 0;
}

/* Only for dealloc, as column_plan_clear. */
static void
table_plan_clear(TablePlan *self)
{
    Py_CLEAR(self->types);
    Py_CLEAR(self->by_name);
    Py_CLEAR(self->template);
    PlannedColumn *columns = self->columns;
    Py_ssize_t count = self->count;
    self->columns = NULL;
    self->count = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_XDECREF(columns[i].name);
        Py_XDECREF(columns[i].type_text);
        Py_XDECREF(columns[i].plan);
    }
    PyMem_Free(columns);
}

static void
table_plan_dealloc(TablePlan *self)
{
    PyObject_GC_UnTrack(self);
    table_plan_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
table_plan_repr(TablePlan *self)
{
    return PyUnicode_FromFormat("TablePlan(%R)", self->types ? self->types : Py_None);
}

static PyTypeObject TablePlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ticdc_lake.protocols.native._canal_speedups.TablePlan",
    .tp_basicsize = sizeof(TablePlan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "How the rows of one table are decoded; made by table_plan().",
    .tp_traverse = (traverseproc)table_plan_traverse,
    .tp_dealloc = (destructor)table_plan_dealloc,
    .tp_repr = (reprfunc)table_plan_repr,
};

/* table_plan(mysql_types, plans): mysql_types the dict of name → str the specs were made from,
 * plans a dict of name → ColumnPlan with the same names. */
static PyObject *
canal_table_plan(PyObject *module, PyObject *args)
{
    PyObject *types, *by_name;
    if (!PyArg_ParseTuple(args, "O!O!:table_plan", &PyDict_Type, &types, &PyDict_Type, &by_name))
        return NULL;
    if (!PyDict_CheckExact(types) || !PyDict_CheckExact(by_name)
        || PyDict_GET_SIZE(types) != PyDict_GET_SIZE(by_name)) {
        PyErr_SetString(PyExc_ValueError, "mysql_types and plans must be dicts of the same names");
        return NULL;
    }
    TablePlan *self = PyObject_GC_New(TablePlan, &TablePlanType);
    if (self == NULL)
        return NULL;
    self->types = Py_NewRef(types);
    self->by_name = Py_NewRef(by_name);
    self->count = 0;
    Py_ssize_t size = PyDict_GET_SIZE(types);
    self->columns = PyMem_Calloc(size > 0 ? (size_t)size : 1, sizeof(PlannedColumn));
    /* Grown from empty, as the reference's `{}`: the compact str-keys layout, which copies keep. */
    self->template = PyDict_New();
    if (self->columns == NULL || self->template == NULL) {
        Py_DECREF(self);
        return self->columns == NULL ? PyErr_NoMemory() : NULL;
    }
    PyObject_GC_Track(self);
    Py_ssize_t pos = 0;
    PyObject *name, *type_text;
    while (PyDict_Next(types, &pos, &name, &type_text)) {
        if (self->count >= size) { /* the dict changed size under us */
            PyErr_SetString(PyExc_RuntimeError, "mysql_types changed while it was read");
            Py_DECREF(self);
            return NULL;
        }
        PyObject *plan = PyDict_GetItemWithError(by_name, name);
        if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(type_text) || plan == NULL
            || !Py_IS_TYPE(plan, &ColumnPlanType)) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "column %R: needs a str type and a ColumnPlan",
                             name);
            Py_DECREF(self);
            return NULL;
        }
        if (PyDict_SetItem(self->template, name, Py_None) < 0) {
            Py_DECREF(self);
            return NULL;
        }
        PlannedColumn *column = &self->columns[self->count++];
        column->name = Py_NewRef(name);
        column->type_text = Py_NewRef(type_text);
        column->plan = Py_NewRef(plan);
    }
    return (PyObject *)self;
}

/* ---------------------------------------------------------------------------------------------
 * Values. Each returns OK with *out a new reference, BAIL, or ERROR. */

/* The reference's own conversion, for the forms the fast paths leave alone. */
static int
call_converter(const ColumnPlan *plan, PyObject *text, PyObject **out)
{
    *out = PyObject_CallOneArg(plan->convert, text);
    return *out != NULL ? OK : bail_or_error();
}

/* `-?[0-9]+` → sign and magnitude; 0 for any other text or a magnitude beyond 64 bits. */
static int
parse_integer(const char *s, Py_ssize_t n, int *negative, unsigned long long *magnitude)
{
    *negative = n > 0 && s[0] == '-';
    Py_ssize_t i = *negative;
    if (i >= n)
        return 0;
    unsigned long long value = 0;
    for (; i < n; i++) {
        unsigned d = (unsigned char)s[i] - (unsigned)'0';
        if (d > 9)
            return 0;
        /* value * 10 + d <= ULLONG_MAX (18446744073709551615) */
        if (value >= 1844674407370955161ULL && (value > 1844674407370955161ULL || d > 5))
            return 0;
        value = value * 10 + d;
    }
    *magnitude = value;
    return 1;
}

static int
integer_value(const ColumnPlan *plan, PyObject *text, const char *s, Py_ssize_t n,
              PyObject **out)
{
    int negative;
    unsigned long long magnitude;
    /* int() also takes `+`, spaces, `_` and non-ASCII digits, and the reference rejects some of
     * those: whatever is not plain digits is the converter's to judge. */
    if (s == NULL || !parse_integer(s, n, &negative, &magnitude))
        return call_converter(plan, text, out);
    if (negative && magnitude != 0) {
        /* -magnitude >= low, with low <= 0: magnitude <= -low, computed without overflow. */
        if (plan->low == 0 || magnitude > (unsigned long long)(-(plan->low + 1)) + 1)
            return call_converter(plan, text, out); /* raises: out of range */
        *out = magnitude == (1ULL << 63) ? PyLong_FromLongLong(LLONG_MIN)
                                         : PyLong_FromLongLong(-(long long)magnitude);
    }
    else {
        if (magnitude > plan->high)
            return call_converter(plan, text, out); /* raises: out of range */
        *out = PyLong_FromUnsignedLongLong(magnitude);
    }
    return *out != NULL ? OK : ERROR;
}

/* Exact powers of ten: every one up to 1e22 is a double. */
static const double powers_of_ten[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Clinger's fast path for `-?digits[.digits]`: when the digits, as an integer, fit in 53 bits
 * and there are at most 22 after the point, digits / 10**k is one correctly rounded IEEE
 * division of two exact doubles, which is the correctly rounded value of the text: the same
 * double as float() gives. Needs arithmetic in double precision (no x87 excess precision). */
static int
short_double(const char *s, Py_ssize_t n, double *value)
{
#if FLT_EVAL_METHOD == 0
    Py_ssize_t i = n > 0 && s[0] == '-';
    int negative = (int)i;
    unsigned long long digits = 0;
    Py_ssize_t whole = 0, fraction = 0;
    for (; i < n && (unsigned)(s[i] - '0') <= 9; i++, whole++) {
        digits = digits * 10 + (unsigned)(s[i] - '0');
        if (digits > (1ULL << 53))
            return 0;
    }
    if (whole == 0)
        return 0;
    if (i < n && s[i] == '.') {
        for (i++; i < n && (unsigned)(s[i] - '0') <= 9; i++, fraction++) {
            digits = digits * 10 + (unsigned)(s[i] - '0');
            if (digits > (1ULL << 53) || fraction >= 22)
                return 0;
        }
        if (fraction == 0)
            return 0;
    }
    if (i != n)
        return 0;
    double x = (double)digits / powers_of_ten[fraction];
    *value = negative ? -x : x;
    return 1;
#else
    return 0;
#endif
}

/* float(text) for ASCII text: PyOS_string_to_double is what float() itself calls once it has
 * stripped spaces and `_` and mapped non-ASCII digits, so text it reads to the end gets the
 * same double. */
static int
parse_double(const char *s, Py_ssize_t n, double *value)
{
    if (s == NULL || n == 0)
        return 0;
    if (short_double(s, n, value))
        return 1;
    char *end;
    double x = PyOS_string_to_double(s, &end, NULL);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear(); /* ValueError: not a number; the converter will say so */
        return 0;
    }
    if (end != s + n) /* trailing text, or a NUL inside the str */
        return 0;
    *value = x;
    return 1;
}

static int
float_value(const ColumnPlan *plan, PyObject *text, const char *s, Py_ssize_t n, int float32,
            PyObject **out)
{
    double x;
    if (!parse_double(s, n, &x))
        return call_converter(plan, text, out);
    if (float32) {
        /* struct.pack("<f") is PyFloat_Pack4: a plain conversion, overflow an error. */
        float y = (float)x;
        if (isinf(y) && !isinf(x))
            return call_converter(plan, text, out); /* raises OverflowError */
        x = (double)y;
    }
    *out = PyFloat_FromDouble(x);
    return *out != NULL ? OK : ERROR;
}

/* `-?digits(.digits)?`, exactly the ASCII text _decimal_text accepts. */
static int
decimal_value(const ColumnPlan *plan, PyObject *text, const char *s, Py_ssize_t n,
              PyObject **out)
{
    if (s == NULL)
        return call_converter(plan, text, out);
    Py_ssize_t i = n > 0 && s[0] == '-', whole = 0, fraction = 0;
    for (; i < n && (unsigned)(s[i] - '0') <= 9; i++)
        whole++;
    if (i < n && s[i] == '.') {
        for (i++; i < n && (unsigned)(s[i] - '0') <= 9; i++)
            fraction++;
        if (fraction == 0)
            return BAIL; /* the reference raises */
    }
    if (whole == 0 || i != n)
        return BAIL;
    *out = Py_NewRef(text);
    return OK;
}

/* One value of a column; text is an exact str. */
static int
convert_value(const ColumnPlan *plan, PyObject *text, PyObject **out)
{
    if (plan->kind == K_TEXT) {
        *out = Py_NewRef(text);
        return OK;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0)
        return ERROR;
#endif
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    /* ASCII text is its own UTF-8 and NUL-terminated: the number parsers read it directly. */
    const char *ascii = PyUnicode_IS_ASCII(text) ? (const char *)PyUnicode_1BYTE_DATA(text) : NULL;
    switch (plan->kind) {
    case K_INTEGER:
        return integer_value(plan, text, ascii, n, out);
    case K_FLOAT32:
        return float_value(plan, text, ascii, n, 1, out);
    case K_DOUBLE:
        return float_value(plan, text, ascii, n, 0, out);
    case K_DECIMAL:
        return decimal_value(plan, text, ascii, n, out);
    case K_LATIN1:
        /* One byte per character is ISO-8859-1 already; a wider str has a character beyond
         * U+00FF, which the converter rejects. */
        if (PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND) {
            *out = PyBytes_FromStringAndSize((const char *)PyUnicode_1BYTE_DATA(text), n);
            return *out != NULL ? OK : ERROR;
        }
        return call_converter(plan, text, out);
    default:
        return call_converter(plan, text, out);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Images. */

/* `data`/`old`: a one-element list holding a dict (borrowed), or NULL. */
static PyObject *
single_row(PyObject *rows)
{
    if (rows == NULL || !PyList_CheckExact(rows) || PyList_GET_SIZE(rows) != 1)
        return NULL;
    PyObject *row = PyList_GET_ITEM(rows, 0);
    return PyDict_CheckExact(row) ? row : NULL;
}

/* _image: each column's value converted by its plan; null stays None. */
static int
build_image(PyObject *row, TablePlan *table, PyObject **out)
{
    /* The row's columns come in mysqlType order, the plan's order (TiCDC writes both from one
     * column list): the image starts as a copy of the plan's template, which saves growing and
     * rehashing a dict, and takes each value in turn. A row with other columns or another order
     * starts again from an empty dict, its plans looked up by name. */
    int in_order = PyDict_GET_SIZE(row) == table->count;
    PyObject *image = in_order ? PyDict_Copy(table->template) : PyDict_New();
    if (image == NULL)
        return ERROR;
    Py_ssize_t pos = 0, index = 0;
    PyObject *name, *text;
    int rc = OK;
    while (PyDict_Next(row, &pos, &name, &text)) {
        PyObject *plan;
        if (!in_order)
            plan = PyDict_GetItemWithError(table->by_name, name);
        else if (index < table->count && PyUnicode_CheckExact(name)
                 && same_str(table->columns[index].name, name))
            plan = table->columns[index++].plan;
        else {
            Py_SETREF(image, PyDict_New());
            if (image == NULL)
                return ERROR;
            in_order = 0;
            pos = 0;
            continue;
        }
        if (plan == NULL || !Py_IS_TYPE(plan, &ColumnPlanType)) {
            rc = PyErr_Occurred() ? bail_or_error() : BAIL; /* no mysqlType entry */
            break;
        }
        if (text != Py_None && !PyUnicode_CheckExact(text)) {
            rc = BAIL; /* not a string or null */
            break;
        }
        /* Held until the image has the column: a converter runs Python code, which must not be
         * able to free what this loop only borrows. */
        Py_INCREF(name);
        Py_INCREF(text);
        Py_INCREF(plan);
        const ColumnPlan *p = (const ColumnPlan *)plan;
        PyObject *value = NULL;
        if (text == Py_None)
            value = Py_NewRef(Py_None);
        else
            rc = convert_value(p, text, &value);
        if (rc == OK) {
            PyObject *column = new_column(p->type_code, p->flags, value, p->mysql_type);
            if (column == NULL || PyDict_SetItem(image, name, column) < 0)
                rc = ERROR;
            Py_XDECREF(column);
        }
        Py_DECREF(plan);
        Py_DECREF(text);
        Py_DECREF(name);
        if (rc != OK)
            break;
    }
    if (rc != OK) {
        Py_DECREF(image);
        return rc;
    }
    *out = image;
    return OK;
}

/* _complete_old_image: an UPDATE's old row, whole. Steals `old`. */
static int
complete_old_image(PyObject *old, PyObject *new, PyObject **out)
{
    if (PyDict_GET_SIZE(old) >= PyDict_GET_SIZE(new)) {
        *out = old;
        return OK;
    }
    PyObject *complete = PyDict_New();
    if (complete == NULL)
        goto error;
    Py_ssize_t pos = 0;
    PyObject *name, *column;
    while (PyDict_Next(new, &pos, &name, &column)) {
        PyObject *previous = PyDict_GetItemWithError(old, name);
        PyObject *kept;
        if (previous != NULL)
            kept = Py_NewRef(previous);
        else if (PyErr_Occurred())
            goto error;
        else {
            /* A copy, not the new row's object: the two images stay independent. */
            kept = new_column(slot_get(column, &column_class, COLUMN_TYPE_CODE),
                              slot_get(column, &column_class, COLUMN_FLAGS),
                              Py_NewRef(slot_get(column, &column_class, COLUMN_VALUE)),
                              slot_get(column, &column_class, COLUMN_MYSQL_TYPE));
            if (kept == NULL)
                goto error;
        }
        int set = PyDict_SetItem(complete, name, kept);
        Py_DECREF(kept);
        if (set < 0)
            goto error;
    }
    pos = 0;
    while (PyDict_Next(old, &pos, &name, &column)) { /* a column only the old row has: keep it */
        if (PyDict_SetDefault(complete, name, column) == NULL)
            goto error;
    }
    Py_DECREF(old);
    *out = complete;
    return OK;
error:
    Py_XDECREF(complete);
    Py_DECREF(old);
    return ERROR;
}

/* cached == seen for a mysqlType dict. The common case, the same names and types in the same
 * order, is walked side by side; anything else gets the general dict comparison. 1, 0 or -1. */
static int
same_types(TablePlan *table, PyObject *seen)
{
    if (!PyDict_CheckExact(seen))
        return PyObject_RichCompareBool(table->types, seen, Py_EQ);
    if (PyDict_GET_SIZE(seen) != table->count || PyDict_GET_SIZE(table->types) != table->count)
        return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *name, *type_text;
    while (PyDict_Next(seen, &pos, &name, &type_text) && i < table->count) {
        const PlannedColumn *column = &table->columns[i++];
        if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(type_text)
            || !same_str(column->name, name) || !same_str(column->type_text, type_text))
            return PyObject_RichCompareBool(table->types, seen, Py_EQ);
    }
    return 1;
}

/* cached == seen for pkNames: lists of the same strs side by side, else the general
 * comparison. 1, 0 or -1. */
static int
same_names(PyObject *cached, PyObject *seen)
{
    if (!PyList_CheckExact(cached) || !PyList_CheckExact(seen))
        return PyObject_RichCompareBool(cached, seen, Py_EQ);
    Py_ssize_t n = PyList_GET_SIZE(cached);
    if (PyList_GET_SIZE(seen) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyList_GET_ITEM(cached, i), *b = PyList_GET_ITEM(seen, i);
        if (!PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b) || !same_str(a, b))
            return PyObject_RichCompareBool(cached, seen, Py_EQ);
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * The row event. */

/* The message fields the decoder reads, each borrowed, NULL when absent: one pass over the
 * entries instead of a lookup each. */
typedef struct {
    PyObject *type, *is_ddl, *tidb, *database, *table, *mysql_type, *pk_names, *data, *old;
} Message;

static void
read_message(PyObject *message, Message *m)
{
    memset(m, 0, sizeof *m);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(message, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key))
            continue;
        switch (PyUnicode_GET_LENGTH(key)) {
        case 3:
            if (IS_NAME(key, "old"))
                m->old = value;
            break;
        case 4:
            if (IS_NAME(key, "type"))
                m->type = value;
            else if (IS_NAME(key, "data"))
                m->data = value;
            break;
        case 5:
            if (IS_NAME(key, "isDdl"))
                m->is_ddl = value;
            else if (IS_NAME(key, "table"))
                m->table = value;
            else if (IS_NAME(key, "_tidb"))
                m->tidb = value;
            break;
        case 7:
            if (IS_NAME(key, "pkNames"))
                m->pk_names = value;
            break;
        case 8:
            if (IS_NAME(key, "database"))
                m->database = value;
            break;
        case 9:
            if (IS_NAME(key, "mysqlType"))
                m->mysql_type = value;
            break;
        }
    }
}

typedef struct {
    PyObject *claim_check, *commit_ts, *commit_ts_old, *only_handle_key;
} Extension;

static void
read_extension(PyObject *extension, Extension *e)
{
    memset(e, 0, sizeof *e);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(extension, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key))
            continue;
        if (IS_NAME(key, "commitTs"))
            e->commit_ts = value;
        else if (IS_NAME(key, "commit-ts"))
            e->commit_ts_old = value;
        else if (IS_NAME(key, "onlyHandleKey"))
            e->only_handle_key = value;
        else if (IS_NAME(key, "claimCheckLocation"))
            e->claim_check = value;
    }
}

static int
make_row_event(PyObject *message, PyObject *tables, PyObject *const *where, PyObject **out)
{
    Message m;
    read_message(message, &m);
    if (m.type == NULL || !PyUnicode_CheckExact(m.type) || !PyUnicode_IS_ASCII(m.type))
        return BAIL;
    if (m.is_ddl != NULL && m.is_ddl != Py_False)
        return BAIL; /* DDL, or a malformed isDdl */
    PyObject *op;
    if (IS_NAME(m.type, "INSERT"))
        op = op_insert;
    else if (IS_NAME(m.type, "UPDATE"))
        op = op_update;
    else if (IS_NAME(m.type, "DELETE"))
        op = op_delete;
    else
        return BAIL; /* a watermark, or unknown */

    /* _extension_ts(_tidb, "commitTs", "commit-ts") and onlyHandleKey. */
    PyObject *commit_ts = Py_None;
    int handle_key_only = 0;
    if (m.tidb != NULL && m.tidb != Py_None) {
        if (!PyDict_CheckExact(m.tidb))
            return BAIL;
        Extension e;
        read_extension(m.tidb, &e);
        if (e.claim_check != NULL && e.claim_check != Py_None)
            return BAIL; /* a claim-check reference: the reference path fetches it */
        PyObject *ts = e.commit_ts != NULL && e.commit_ts != Py_None ? e.commit_ts
                                                                     : e.commit_ts_old;
        if (ts != NULL && ts != Py_None) {
            if (!PyLong_CheckExact(ts))
                return BAIL;
            /* 0 <= ts < 2**64; the signed reading is the cheap one and settles any real TSO. */
            int overflow;
            long long signed_ts = PyLong_AsLongLongAndOverflow(ts, &overflow);
            if (signed_ts == -1 && PyErr_Occurred())
                return bail_or_error();
            if (overflow < 0 || (overflow == 0 && signed_ts < 0))
                return BAIL;
            if (overflow > 0) {
                PyLong_AsUnsignedLongLong(ts);
                if (PyErr_Occurred())
                    return bail_or_error();
            }
            commit_ts = ts;
        }
        handle_key_only = e.only_handle_key == Py_True;
    }
    if (m.database == NULL || m.table == NULL || !PyUnicode_CheckExact(m.database)
        || !PyUnicode_CheckExact(m.table))
        return BAIL;

    /* The table's cached plan, if the message's mysqlType and pkNames are the cached ones. */
    PyObject *key = PyTuple_Pack(2, m.database, m.table);
    if (key == NULL)
        return ERROR;
    PyObject *cached = PyDict_GetItemWithError(tables, key);
    Py_DECREF(key);
    if (cached == NULL)
        return PyErr_Occurred() ? bail_or_error() : BAIL;
    if (!PyTuple_CheckExact(cached) || PyTuple_GET_SIZE(cached) != 4
        || !Py_IS_TYPE(PyTuple_GET_ITEM(cached, 3), &TablePlanType))
        return BAIL;
    Py_INCREF(cached); /* __eq__ below is Python code: keep the entry alive meanwhile */
    TablePlan *table = (TablePlan *)PyTuple_GET_ITEM(cached, 3);
    PyObject *image = NULL, *old_image = NULL;
    int rc;
    int same = same_types(table, m.mysql_type ? m.mysql_type : Py_None);
    if (same == 1)
        same = same_names(PyTuple_GET_ITEM(cached, 1), m.pk_names ? m.pk_names : Py_None);
    if (same != 1) {
        rc = same < 0 ? bail_or_error() : BAIL;
        goto done;
    }
    PyObject *row = single_row(m.data);
    if (row == NULL) {
        rc = BAIL;
        goto done;
    }
    rc = build_image(row, table, &image);
    if (rc != OK)
        goto done;
    if (m.old != NULL && m.old != Py_None && op != op_delete) { /* DELETE ignores `old` */
        PyObject *old_row = single_row(m.old);
        if (op == op_insert || old_row == NULL) {
            rc = BAIL; /* an INSERT with an `old` row, or a malformed one */
            goto done;
        }
        PyObject *partial;
        rc = build_image(old_row, table, &partial);
        if (rc == OK)
            rc = complete_old_image(partial, image, &old_image);
        if (rc != OK)
            goto done;
    }
    PyObject *event = slot_new(&row_class);
    if (event == NULL) {
        rc = ERROR;
        goto done;
    }
    int delete = op == op_delete;
    slot_set(event, &row_class, ROW_COMMIT_TS, Py_NewRef(commit_ts));
    slot_set(event, &row_class, ROW_SCHEMA, Py_NewRef(m.database));
    slot_set(event, &row_class, ROW_TABLE, Py_NewRef(m.table));
    slot_set(event, &row_class, ROW_OP, Py_NewRef(op));
    slot_set(event, &row_class, ROW_COLUMNS, delete ? Py_NewRef(Py_None) : image);
    slot_set(event, &row_class, ROW_OLD_COLUMNS,
             delete ? image : (old_image ? old_image : Py_NewRef(Py_None)));
    image = old_image = NULL; /* the event owns them now */
    slot_set(event, &row_class, ROW_TOPIC, Py_NewRef(where[0]));
    slot_set(event, &row_class, ROW_PARTITION, Py_NewRef(where[1]));
    slot_set(event, &row_class, ROW_OFFSET, Py_NewRef(where[2]));
    slot_set(event, &row_class, ROW_INDEX, Py_NewRef(zero));
    slot_set(event, &row_class, ROW_PARTITION_ID, Py_NewRef(Py_None));
    slot_set(event, &row_class, ROW_HANDLE_KEY_ONLY,
             Py_NewRef(handle_key_only ? Py_True : Py_False));
    *out = event;
done:
    Py_XDECREF(image);
    Py_XDECREF(old_image);
    Py_DECREF(cached);
    return rc;
}

/* row_event(message, tables, topic, partition, offset) -> [RowEvent], or None: decode it in
 * Python. `message` is the parsed dict, or the uncompressed value (bytes) to parse here. */
static PyObject *
canal_row_event(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured)
        return not_configured("_canal_speedups");
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "row_event(message, tables, topic, partition, offset)");
        return NULL;
    }
    if (!PyDict_CheckExact(args[1]))
        Py_RETURN_NONE;
    PyObject *message;
    if (PyDict_CheckExact(args[0]))
        message = Py_NewRef(args[0]);
    else if (PyBytes_CheckExact(args[0]) && PyBytes_GET_SIZE(args[0]) > 0) {
        message = PyObject_CallOneArg(json_loads, args[0]);
        if (message == NULL) /* not JSON: the reference path says why */
            return bail_or_error() == BAIL ? Py_NewRef(Py_None) : NULL;
    }
    else
        Py_RETURN_NONE;
    PyObject *event = NULL;
    int rc = PyDict_CheckExact(message) ? make_row_event(message, args[1], args + 2, &event)
                                        : BAIL;
    Py_DECREF(message);
    if (rc != OK)
        return rc == BAIL ? Py_NewRef(Py_None) : NULL;
    PyObject *events = PyList_New(1);
    if (events == NULL) {
        Py_DECREF(event);
        return NULL;
    }
    PyList_SET_ITEM(events, 0, event);
    return events;
}

/* ---------------------------------------------------------------------------------------------
 * configure(Column, RowEvent, INSERT, UPDATE, DELETE, loads) */

static PyObject *
canal_configure(PyObject *module, PyObject *args)
{
    PyObject *column, *row, *insert, *update, *delete, *loads;
    if (!PyArg_ParseTuple(args, "OOUUUO:configure", &column, &row, &insert, &update, &delete,
                          &loads))
        return NULL;
    configured = 0;
    if (!PyCallable_Check(loads)) {
        PyErr_SetString(PyExc_TypeError, "loads must be callable");
        return NULL;
    }
    if (bind_class(column, column_fields, &column_class) < 0
        || bind_class(row, row_fields, &row_class) < 0)
        return NULL;
    bind_ops(insert, update, delete);
    Py_INCREF(loads);
    Py_XSETREF(json_loads, loads);
    configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef canal_methods[] = {
    {"configure", canal_configure, METH_VARARGS,
     "configure(Column, RowEvent, INSERT, UPDATE, DELETE, loads): bind the event model and "
     "the JSON parser."},
    {"column_plan", canal_column_plan, METH_VARARGS,
     "column_plan(kind, type_code, flags, mysql_type, convert, low=0, high=0) -> ColumnPlan"},
    {"table_plan", canal_table_plan, METH_VARARGS,
     "table_plan(mysql_types, plans) -> TablePlan: the column plans in mysqlType order"},
    {"row_event", (PyCFunction)(void (*)(void))canal_row_event, METH_FASTCALL,
     "row_event(message, tables, topic, partition, offset) -> [RowEvent], or None when the "
     "pure-Python decoder must decide; message is a parsed dict or an uncompressed value"},
    EVENTS_FIT_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef canal_module = {
    PyModuleDef_HEAD_INIT, "_canal_speedups",
    "Compiled Canal-JSON row decoding; see ticdc_lake.protocols.canal_json.", -1, canal_methods,
};

PyMODINIT_FUNC
PyInit__canal_speedups(void)
{
    zero = PyLong_FromLong(0);
    if (zero == NULL || PyType_Ready(&ColumnPlanType) < 0 || PyType_Ready(&TablePlanType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&canal_module);
    if (module == NULL)
        return NULL;
    static const struct {
        const char *name;
        int value;
    } kinds[] = {{"KIND_TEXT", K_TEXT},     {"KIND_INTEGER", K_INTEGER}, {"KIND_FLOAT32", K_FLOAT32},
                 {"KIND_DOUBLE", K_DOUBLE}, {"KIND_DECIMAL", K_DECIMAL}, {"KIND_LATIN1", K_LATIN1},
                 {"KIND_CALL", K_CALL}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (PyModule_AddIntConstant(module, kinds[i].name, kinds[i].value) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    }
    Py_INCREF(&ColumnPlanType);
    if (PyModule_AddObject(module, "ColumnPlan", (PyObject *)&ColumnPlanType) < 0) {
        Py_DECREF(&ColumnPlanType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&TablePlanType);
    if (PyModule_AddObject(module, "TablePlan", (PyObject *)&TablePlanType) < 0) {
        Py_DECREF(&TablePlanType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
