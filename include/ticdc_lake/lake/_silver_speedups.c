/*
 * The decode stage's hot loop in C: images appended to silver's flat image columns, written
 * straight into Arrow's buffers (lake/silver.py: ImageColumns.add_python, on Python lists, is
 * the reference and the fallback).
 *
 * ImageBuffers().add(image, handle_flag) -> (identity, handle)
 *
 * `image` is a dict of column name -> events.Column. Each column's value becomes its
 * (text, binary) form as silver.value_fields gives it, and each of the six columns (name,
 * type_code, flags, mysql_type, text, binary: silver.COLUMN_TYPE) gets one entry. `identity` is
 * [[name, text, binary], ...] (what the event id hashes), `handle` the names whose flags have
 * `handle_flag` set (events.RowEvent.handle_key). Attributes are read by name, so any object
 * with Column's attributes works as it does in Python.
 *
 * Why buffers, not lists: converting the lists' Python objects to Arrow cost as much as filling
 * them. `truncate(entries)` undoes adds (a failed one included); `export()` gives each column's
 * Arrow buffers as bytes (validity, offsets, data), for pyarrow's Array.from_buffers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *name_type_code, *name_flags, *name_value, *name_mysql_type;

/* --- growable bytes ------------------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Bytes;

static int
bytes_reserve(Bytes *bytes, Py_ssize_t more)
{
    if (more > PY_SSIZE_T_MAX - bytes->size) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t needed = bytes->size + more;
    if (needed <= bytes->capacity)
        return 0;
    Py_ssize_t capacity = bytes->capacity ? bytes->capacity : 256;
    while (capacity < needed)
        capacity = capacity > PY_SSIZE_T_MAX / 2 ? needed : capacity * 2;
    char *data = PyMem_Realloc(bytes->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    bytes->data = data;
    bytes->capacity = capacity;
    return 0;
}

static int
bytes_append(Bytes *bytes, const void *data, Py_ssize_t size)
{
    if (bytes_reserve(bytes, size) < 0)
        return -1;
    if (size)
        memcpy(bytes->data + bytes->size, data, (size_t)size);
    bytes->size += size;
    return 0;
}

/* --- one Arrow column: validity bitmap, and offsets + data (strings, binaries) or fixed-width
 * values (integers) -------------------------------------------------------------------------- */

typedef struct {
    Bytes validity, offsets, values;
    int width; /* 0: variable width (offsets are int32); else bytes per value */
} Column;

enum { NAME, TYPE_CODE, FLAGS, MYSQL_TYPE, TEXT, BINARY, COLUMNS };
static const int WIDTHS[COLUMNS] = {0, 4, 8, 0, 0, 0};

/* Sets bit `index` of the validity bitmap to `valid`. */
static int
column_mark(Column *column, Py_ssize_t index, int valid)
{
    if (index % 8 == 0) {
        char zero = 0;
        if (bytes_append(&column->validity, &zero, 1) < 0)
            return -1;
    }
    if (valid)
        column->validity.data[index / 8] |= (char)(1 << (index % 8));
    return 0;
}

/* Appends entry `index`: `size` bytes at `data`, or null when `data` is NULL. */
static int
column_append(Column *column, Py_ssize_t index, const void *data, Py_ssize_t size)
{
    if (column_mark(column, index, data != NULL) < 0)
        return -1;
    if (column->width) {
        static const char zeros[8] = {0};
        return bytes_append(&column->values, data ? data : zeros, column->width);
    }
    if (data != NULL && bytes_append(&column->values, data, size) < 0)
        return -1;
    if (column->values.size > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an image column holds more than 2 GiB of text");
        return -1;
    }
    int32_t end = (int32_t)column->values.size;
    return bytes_append(&column->offsets, &end, sizeof end);
}

/* A str (UTF-8), bytes, or None (null); anything else is a TypeError, as pyarrow makes it. */
static int
column_append_object(Column *column, Py_ssize_t index, PyObject *value, const char *what,
                     int is_binary)
{
    if (value == Py_None)
        return column_append(column, index, NULL, 0);
    if (!is_binary && PyUnicode_Check(value)) {
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(value, &size);
        return text == NULL ? -1 : column_append(column, index, text, size);
    }
    if (is_binary && PyBytes_Check(value))
        return column_append(column, index, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
    PyErr_Format(PyExc_TypeError, "an image's %s must be %s or None, not %.100s", what,
                 is_binary ? "bytes" : "str", Py_TYPE(value)->tp_name);
    return -1;
}

/* An int that fits the column's width, or None (null). */
static int
column_append_integer(Column *column, Py_ssize_t index, PyObject *value)
{
    if (value == Py_None)
        return column_append(column, index, NULL, 0);
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "an image's type code and flags must be int or None, "
                     "not %.100s", Py_TYPE(value)->tp_name);
        return -1;
    }
    long long number = PyLong_AsLongLong(value);
    if (number == -1 && PyErr_Occurred())
        return -1;
    if (column->width == 4) {
        if (number < INT32_MIN || number > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "type code %lld does not fit 32 bits", number);
            return -1;
        }
        int32_t narrow = (int32_t)number;
        return column_append(column, index, &narrow, 4);
    }
    int64_t wide = (int64_t)number;
    return column_append(column, index, &wide, 8);
}

/* Keeps the first `entries` entries. */
static void
column_truncate(Column *column, Py_ssize_t entries)
{
    column->validity.size = (entries + 7) / 8;
    if (entries % 8)
        column->validity.data[entries / 8] &= (char)((1 << (entries % 8)) - 1);
    if (column->width) {
        column->values.size = entries * column->width;
        return;
    }
    column->offsets.size = (entries + 1) * (Py_ssize_t)sizeof(int32_t);
    int32_t end;
    memcpy(&end, column->offsets.data + entries * sizeof end, sizeof end);
    column->values.size = end;
}

/* --- the type ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t entries;
    Column columns[COLUMNS];
} ImageBuffers;

static void ImageBuffers_dealloc(ImageBuffers *self);

static PyObject *
ImageBuffers_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "ImageBuffers() takes no arguments");
        return NULL;
    }
    ImageBuffers *self = (ImageBuffers *)type->tp_alloc(type, 0); /* zeroed */
    if (self == NULL)
        return NULL;
    for (int i = 0; i < COLUMNS; i++) {
        Column *column = &self->columns[i];
        column->width = WIDTHS[i];
        int32_t zero = 0;
        if (!column->width && bytes_append(&column->offsets, &zero, sizeof zero) < 0) {
            ImageBuffers_dealloc(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

static void
ImageBuffers_dealloc(ImageBuffers *self)
{
    for (int i = 0; i < COLUMNS; i++) {
        PyMem_Free(self->columns[i].validity.data);
        PyMem_Free(self->columns[i].offsets.data);
        PyMem_Free(self->columns[i].values.data);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* (text, binary) of a value, new references; -1 with an exception set on failure. */
static int
value_fields(PyObject *value, PyObject **text, PyObject **binary)
{
    *binary = Py_NewRef(Py_None);
    if (PyUnicode_CheckExact(value) || value == Py_None) {
        *text = Py_NewRef(value);
        return 0;
    }
    if (PyBytes_Check(value)) {
        *text = Py_NewRef(Py_None);
        Py_SETREF(*binary, Py_NewRef(value));
        return 0;
    }
    /* Floats by repr (the shortest text that reads back the same); everything else by str. */
    *text = PyFloat_Check(value) ? PyObject_Repr(value) : PyObject_Str(value);
    if (*text == NULL) {
        Py_CLEAR(*binary);
        return -1;
    }
    return 0;
}

/* Whether `flags & flag` is set, as Python computes it: 1, 0, or -1 with an exception set. */
static int
has_flag(PyObject *flags, PyObject *flag)
{
    if (PyLong_CheckExact(flags) && PyLong_CheckExact(flag)) {
        int overflow_flags, overflow_flag;
        long bits = PyLong_AsLongAndOverflow(flags, &overflow_flags);
        long mask = PyLong_AsLongAndOverflow(flag, &overflow_flag);
        if (!overflow_flags && !overflow_flag && bits >= 0 && mask >= 0)
            return (bits & mask) != 0;
    }
    PyObject *masked = PyNumber_And(flags, flag);
    if (masked == NULL)
        return -1;
    int result = PyObject_IsTrue(masked);
    Py_DECREF(masked);
    return result;
}

/* Appends one column of an image and returns its identity entry; NULL on failure (the columns
 * may then hold part of it: truncate undoes it). */
static PyObject *
add_column(ImageBuffers *self, PyObject *name, PyObject *column, PyObject *handle,
           PyObject *handle_flag)
{
    PyObject *attrs[4] = {NULL, NULL, NULL, NULL};
    PyObject *const attr_names[4] = {name_type_code, name_flags, name_value, name_mysql_type};
    PyObject *text = NULL, *binary = NULL, *entry = NULL;
    Py_ssize_t index = self->entries;
    Column *columns = self->columns;
    int is_handle;
    for (int i = 0; i < 4; i++) {
        attrs[i] = PyObject_GetAttr(column, attr_names[i]);
        if (attrs[i] == NULL)
            goto done;
    }
    if (value_fields(attrs[2], &text, &binary) < 0)
        goto done;
    if (column_append_object(&columns[NAME], index, name, "column name", 0) < 0
        || column_append_integer(&columns[TYPE_CODE], index, attrs[0]) < 0
        || column_append_integer(&columns[FLAGS], index, attrs[1]) < 0
        || column_append_object(&columns[MYSQL_TYPE], index, attrs[3], "MySQL type", 0) < 0
        || column_append_object(&columns[TEXT], index, text, "text", 0) < 0
        || column_append_object(&columns[BINARY], index, binary, "binary", 1) < 0) {
        /* Some columns have this entry and some not: none keeps it. */
        for (int i = 0; i < COLUMNS; i++)
            column_truncate(&columns[i], index);
        goto done;
    }
    self->entries++;
    is_handle = has_flag(attrs[1], handle_flag);
    if (is_handle < 0 || (is_handle && PyList_Append(handle, name) < 0))
        goto done;
    entry = PyList_New(3);
    if (entry == NULL)
        goto done;
    PyList_SET_ITEM(entry, 0, Py_NewRef(name));
    PyList_SET_ITEM(entry, 1, Py_NewRef(text));
    PyList_SET_ITEM(entry, 2, Py_NewRef(binary));
done:
    for (int i = 0; i < 4; i++)
        Py_XDECREF(attrs[i]);
    Py_XDECREF(text);
    Py_XDECREF(binary);
    return entry;
}

static PyObject *
ImageBuffers_add(ImageBuffers *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "add takes 2 arguments (image, handle_flag), got %zd",
                     nargs);
        return NULL;
    }
    PyObject *image = args[0], *handle_flag = args[1];
    if (!PyDict_Check(image)) {
        PyErr_Format(PyExc_TypeError, "image must be a dict, not %.100s", Py_TYPE(image)->tp_name);
        return NULL;
    }
    PyObject *identity = PyList_New(0);
    PyObject *handle = PyList_New(0);
    if (identity == NULL || handle == NULL)
        goto fail;
    Py_ssize_t position = 0;
    PyObject *name, *column;
    while (PyDict_Next(image, &position, &name, &column)) {
        /* Held: str() of a value may run Python code (the dict is not changed by the decoders). */
        Py_INCREF(name);
        Py_INCREF(column);
        PyObject *entry = add_column(self, name, column, handle, handle_flag);
        Py_DECREF(name);
        Py_DECREF(column);
        if (entry == NULL || PyList_Append(identity, entry) < 0) {
            Py_XDECREF(entry);
            goto fail;
        }
        Py_DECREF(entry);
    }
    PyObject *result = PyTuple_Pack(2, identity, handle);
    Py_DECREF(identity);
    Py_DECREF(handle);
    return result;
fail:
    Py_XDECREF(identity);
    Py_XDECREF(handle);
    return NULL;
}

static PyObject *
ImageBuffers_truncate(ImageBuffers *self, PyObject *arg)
{
    Py_ssize_t entries = PyLong_AsSsize_t(arg);
    if (entries == -1 && PyErr_Occurred())
        return NULL;
    if (entries < 0 || entries > self->entries) {
        PyErr_Format(PyExc_ValueError, "cannot truncate %zd entries to %zd", self->entries,
                     entries);
        return NULL;
    }
    /* A failed add may have filled some columns one entry further than `entries`: each column
     * is cut on its own terms, so that is undone too. */
    for (int i = 0; i < COLUMNS; i++)
        column_truncate(&self->columns[i], entries);
    self->entries = entries;
    Py_RETURN_NONE;
}

static PyObject *
as_bytes(const Bytes *bytes, Py_ssize_t size)
{
    return PyBytes_FromStringAndSize(bytes->data ? bytes->data : "", size);
}

static PyObject *
ImageBuffers_export(ImageBuffers *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t entries = self->entries;
    PyObject *result = PyTuple_New(COLUMNS);
    if (result == NULL)
        return NULL;
    for (int i = 0; i < COLUMNS; i++) {
        const Column *column = &self->columns[i];
        PyObject *item;
        if (column->width)
            item = Py_BuildValue("(NN)", as_bytes(&column->validity, (entries + 7) / 8),
                                 as_bytes(&column->values, entries * column->width));
        else
            item = Py_BuildValue("(NNN)", as_bytes(&column->validity, (entries + 7) / 8),
                                 as_bytes(&column->offsets, (entries + 1) * 4),
                                 as_bytes(&column->values, column->values.size));
        if (item == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, item);
    }
    return result;
}

static Py_ssize_t
ImageBuffers_len(ImageBuffers *self)
{
    return self->entries;
}

static PyMethodDef ImageBuffers_methods[] = {
    {"add", (PyCFunction)(void (*)(void))ImageBuffers_add, METH_FASTCALL,
     "add(image, handle_flag) -> (identity, handle)"},
    {"truncate", (PyCFunction)ImageBuffers_truncate, METH_O, "truncate(entries): keep these"},
    {"export", (PyCFunction)ImageBuffers_export, METH_NOARGS,
     "export() -> per column (validity, values) or (validity, offsets, data), as bytes"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods ImageBuffers_sequence = {.sq_length = (lenfunc)ImageBuffers_len};

static PyTypeObject ImageBuffersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ticdc_lake.lake._silver_speedups.ImageBuffers",
    .tp_doc = "The six image columns of many images, as Arrow buffers.",
    .tp_basicsize = sizeof(ImageBuffers),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = ImageBuffers_new,
    .tp_dealloc = (destructor)ImageBuffers_dealloc,
    .tp_methods = ImageBuffers_methods,
    .tp_as_sequence = &ImageBuffers_sequence,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_silver_speedups", "Silver image columns built in C.", -1, NULL,
};

PyMODINIT_FUNC
PyInit__silver_speedups(void)
{
    name_type_code = PyUnicode_InternFromString("type_code");
    name_flags = PyUnicode_InternFromString("flags");
    name_value = PyUnicode_InternFromString("value");
    name_mysql_type = PyUnicode_InternFromString("mysql_type");
    if (!name_type_code || !name_flags || !name_value || !name_mysql_type)
        return NULL;
    if (PyType_Ready(&ImageBuffersType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "ImageBuffers", (PyObject *)&ImageBuffersType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
