/*
 * The decode stage's hot loop in C: silver's change rows written straight into Arrow's buffers
 * (lake/silver.py: ChangeRows and ImageColumns on Python lists are the reference and the
 * fallback).
 *
 * ChangeBuffers().add(event, bronze_batch, handle_flag, event_id)
 *     one events.RowEvent as a row of silver.CHANGES_SCHEMA; `event_id(identity)` (silver's
 *     _event_id) gives its id from ["row", commit_ts, schema, table, op, partition_id, new, old].
 * ImageBuffers().add(image, handle_flag) -> (identity, handle)
 *     one image's columns (ChangeBuffers keeps two of these, for the new and the old image).
 *
 * `image` is a dict of column name -> events.Column. Each column's value becomes its
 * (text, binary) form as silver.value_fields gives it, and each of the six columns (name,
 * type_code, flags, mysql_type, text, binary: silver.COLUMN_TYPE) gets one entry. `identity` is
 * [[name, text, binary], ...] (what the event id hashes), `handle` the names whose flags have
 * `handle_flag` set (events.RowEvent.handle_key). Attributes are read by name, so any object
 * with RowEvent's or Column's attributes works as it does in Python.
 *
 * Why buffers, not lists: converting lists of Python objects to Arrow cost as much as filling
 * them. A value a column cannot hold (a partition beyond 32 bits, a schema that is not a str)
 * fails the row as it is added, and a failed add leaves nothing of its row. `truncate(n)` keeps
 * the first n rows (entries); `export()` gives the Arrow buffers as bytes (validity, offsets,
 * data), for pyarrow's Array.from_buffers.
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

/* An int that fits the column's width (1: a bool, any object's truth), or None (null). */
static int
column_append_integer(Column *column, Py_ssize_t index, PyObject *value, const char *what)
{
    if (value == Py_None)
        return column_append(column, index, NULL, 0);
    if (column->width == 1) {
        int truth = PyObject_IsTrue(value);
        if (truth < 0)
            return -1;
        char flag = (char)truth;
        return column_append(column, index, &flag, 1);
    }
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be int or None, not %.100s", what,
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    long long number = PyLong_AsLongLong(value);
    if (number == -1 && PyErr_Occurred())
        return -1;
    if (column->width == 4) {
        if (number < INT32_MIN || number > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "%s %lld does not fit 32 bits", what, number);
            return -1;
        }
        int32_t narrow = (int32_t)number;
        return column_append(column, index, &narrow, 4);
    }
    int64_t wide = (int64_t)number;
    return column_append(column, index, &wide, 8);
}

static void
column_free(Column *column)
{
    PyMem_Free(column->validity.data);
    PyMem_Free(column->offsets.data);
    PyMem_Free(column->values.data);
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
    for (int i = 0; i < COLUMNS; i++)
        column_free(&self->columns[i]);
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
        || column_append_integer(&columns[TYPE_CODE], index, attrs[0], "an image's type code") < 0
        || column_append_integer(&columns[FLAGS], index, attrs[1], "an image's flags") < 0
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

/* (identity, handle) of one image appended; NULL on failure, the columns left as they were
 * after the image's earlier columns (the caller truncates). */
static PyObject *
image_add(ImageBuffers *self, PyObject *image, PyObject *handle_flag)
{
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

static void
image_truncate(ImageBuffers *self, Py_ssize_t entries)
{
    for (int i = 0; i < COLUMNS; i++)
        column_truncate(&self->columns[i], entries);
    self->entries = entries;
}

static PyObject *
ImageBuffers_add(ImageBuffers *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "add takes 2 arguments (image, handle_flag), got %zd",
                     nargs);
        return NULL;
    }
    return image_add(self, args[0], args[1]);
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
    image_truncate(self, entries);
    Py_RETURN_NONE;
}

static PyObject *
as_bytes(const Bytes *bytes, Py_ssize_t size)
{
    return PyBytes_FromStringAndSize(bytes->data ? bytes->data : "", size);
}

/* A column's first `entries` entries as Arrow buffers: (validity, values) for fixed widths,
 * (validity, offsets, data) for strings and binaries. */
static PyObject *
column_export(const Column *column, Py_ssize_t entries)
{
    if (column->width)
        return Py_BuildValue("(NN)", as_bytes(&column->validity, (entries + 7) / 8),
                             as_bytes(&column->values, entries * column->width));
    int32_t end;
    memcpy(&end, column->offsets.data + entries * sizeof end, sizeof end);
    return Py_BuildValue("(NNN)", as_bytes(&column->validity, (entries + 7) / 8),
                         as_bytes(&column->offsets, (entries + 1) * 4),
                         as_bytes(&column->values, end));
}

/* column_export of each of `count` columns, as a tuple. */
static PyObject *
columns_export(const Column *columns, int count, Py_ssize_t entries)
{
    PyObject *result = PyTuple_New(count);
    if (result == NULL)
        return NULL;
    for (int i = 0; i < count; i++) {
        PyObject *item = column_export(&columns[i], entries);
        if (item == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, item);
    }
    return result;
}

static PyObject *
ImageBuffers_export(ImageBuffers *self, PyObject *Py_UNUSED(ignored))
{
    return columns_export(self->columns, COLUMNS, self->entries);
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

/* --- change rows: silver.CHANGES_SCHEMA's columns, the images' included ------------------- */

/* The scalar columns, in CHANGES_SCHEMA's order (handle_key and the images apart). */
enum {
    EVENT_ID, COMMIT_TS, SCHEMA, TABLE, OP, PARTITION_ID, HANDLE_KEY_ONLY, TOPIC, PARTITION,
    OFFSET, INDEX, BRONZE_BATCH, SCALARS
};
static const int SCALAR_WIDTHS[SCALARS] = {0, 8, 0, 0, 0, 8, 1, 0, 4, 8, 4, 8};
/* The RowEvent attributes read, by position. */
enum { A_COLUMNS, A_OLD_COLUMNS, A_COMMIT_TS, A_SCHEMA, A_TABLE, A_OP, A_PARTITION_ID,
       A_HANDLE_KEY_ONLY, A_TOPIC, A_PARTITION, A_OFFSET, A_INDEX, ATTRIBUTES };
static const char *const ATTRIBUTE_NAMES[ATTRIBUTES] = {
    "columns", "old_columns", "commit_ts", "schema", "table", "op", "partition_id",
    "handle_key_only", "topic", "partition", "offset", "index"};
static PyObject *attribute_names[ATTRIBUTES];
static PyObject *s_row;

/* A list<...> column: its offsets and validity; the values are another column's entries. */
typedef struct {
    Bytes offsets, validity;
} List;

static int
list_append(List *list, Py_ssize_t row, Py_ssize_t end, int valid)
{
    if (end > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a batch's change rows hold over 2^31 list entries");
        return -1;
    }
    if (row % 8 == 0) {
        char zero = 0;
        if (bytes_append(&list->validity, &zero, 1) < 0)
            return -1;
    }
    if (valid)
        list->validity.data[row / 8] |= (char)(1 << (row % 8));
    int32_t offset = (int32_t)end;
    return bytes_append(&list->offsets, &offset, sizeof offset);
}

/* Keeps `rows` rows; returns where their values end. */
static Py_ssize_t
list_truncate(List *list, Py_ssize_t rows)
{
    list->validity.size = (rows + 7) / 8;
    if (rows % 8)
        list->validity.data[rows / 8] &= (char)((1 << (rows % 8)) - 1);
    list->offsets.size = (rows + 1) * (Py_ssize_t)sizeof(int32_t);
    int32_t end;
    memcpy(&end, list->offsets.data + rows * sizeof end, sizeof end);
    return end;
}

static PyObject *
list_export(const List *list, Py_ssize_t rows)
{
    return Py_BuildValue("(NN)", as_bytes(&list->validity, (rows + 7) / 8),
                         as_bytes(&list->offsets, (rows + 1) * 4));
}

typedef struct {
    PyObject_HEAD
    Py_ssize_t rows;
    Column scalars[SCALARS];
    List handle_key;
    Column handle_names; /* handle_key's values */
    Py_ssize_t handle_names_count;
    List image_lists[2];       /* columns, old_columns */
    ImageBuffers *images[2];   /* their values */
} ChangeBuffers;

static void
ChangeBuffers_dealloc(ChangeBuffers *self)
{
    for (int i = 0; i < SCALARS; i++)
        column_free(&self->scalars[i]);
    PyMem_Free(self->handle_key.offsets.data);
    PyMem_Free(self->handle_key.validity.data);
    column_free(&self->handle_names);
    for (int i = 0; i < 2; i++) {
        PyMem_Free(self->image_lists[i].offsets.data);
        PyMem_Free(self->image_lists[i].validity.data);
        Py_XDECREF(self->images[i]);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
ChangeBuffers_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "ChangeBuffers() takes no arguments");
        return NULL;
    }
    ChangeBuffers *self = (ChangeBuffers *)type->tp_alloc(type, 0); /* zeroed */
    if (self == NULL)
        return NULL;
    int32_t zero = 0;
    for (int i = 0; i < SCALARS; i++) {
        self->scalars[i].width = SCALAR_WIDTHS[i];
        if (!SCALAR_WIDTHS[i] && bytes_append(&self->scalars[i].offsets, &zero, 4) < 0)
            goto fail;
    }
    if (bytes_append(&self->handle_names.offsets, &zero, 4) < 0
        || bytes_append(&self->handle_key.offsets, &zero, 4) < 0)
        goto fail;
    for (int i = 0; i < 2; i++) {
        if (bytes_append(&self->image_lists[i].offsets, &zero, 4) < 0)
            goto fail;
        self->images[i] = (ImageBuffers *)PyObject_CallNoArgs((PyObject *)&ImageBuffersType);
        if (self->images[i] == NULL)
            goto fail;
    }
    return (PyObject *)self;
fail:
    ChangeBuffers_dealloc(self);
    return NULL;
}

/* Keeps the first `rows` rows: also what a failed add left of a row beyond them. */
static void
change_truncate(ChangeBuffers *self, Py_ssize_t rows)
{
    for (int i = 0; i < SCALARS; i++)
        column_truncate(&self->scalars[i], rows);
    self->handle_names_count = list_truncate(&self->handle_key, rows);
    column_truncate(&self->handle_names, self->handle_names_count);
    for (int i = 0; i < 2; i++)
        image_truncate(self->images[i], list_truncate(&self->image_lists[i], rows));
    self->rows = rows;
}

/* One image (or None) appended: its identity (None for None) and handle names, new references
 * in *identity and *handle; -1 on failure. */
static int
change_image(ChangeBuffers *self, int which, PyObject *image, PyObject *handle_flag,
             PyObject **identity, PyObject **handle)
{
    ImageBuffers *images = self->images[which];
    if (image == Py_None) {
        *identity = Py_NewRef(Py_None);
        *handle = PyList_New(0);
    } else {
        PyObject *added = image_add(images, image, handle_flag);
        if (added == NULL)
            return -1;
        *identity = Py_NewRef(PyTuple_GET_ITEM(added, 0));
        *handle = Py_NewRef(PyTuple_GET_ITEM(added, 1));
        Py_DECREF(added);
    }
    if (*handle == NULL || list_append(&self->image_lists[which], self->rows, images->entries,
                                       image != Py_None) < 0) {
        Py_CLEAR(*identity);
        Py_CLEAR(*handle);
        return -1;
    }
    return 0;
}

static int
change_scalars(ChangeBuffers *self, PyObject *const *attrs, PyObject *event_id,
               PyObject *bronze_batch)
{
    Column *c = self->scalars;
    Py_ssize_t row = self->rows;
    return column_append_object(&c[EVENT_ID], row, event_id, "event id", 0) < 0
        || column_append_integer(&c[COMMIT_TS], row, attrs[A_COMMIT_TS], "commit_ts") < 0
        || column_append_object(&c[SCHEMA], row, attrs[A_SCHEMA], "schema", 0) < 0
        || column_append_object(&c[TABLE], row, attrs[A_TABLE], "table", 0) < 0
        || column_append_object(&c[OP], row, attrs[A_OP], "op", 0) < 0
        || column_append_integer(&c[PARTITION_ID], row, attrs[A_PARTITION_ID], "partition_id") < 0
        || column_append_integer(&c[HANDLE_KEY_ONLY], row, attrs[A_HANDLE_KEY_ONLY], "") < 0
        || column_append_object(&c[TOPIC], row, attrs[A_TOPIC], "topic", 0) < 0
        || column_append_integer(&c[PARTITION], row, attrs[A_PARTITION], "partition") < 0
        || column_append_integer(&c[OFFSET], row, attrs[A_OFFSET], "offset") < 0
        || column_append_integer(&c[INDEX], row, attrs[A_INDEX], "index") < 0
        || column_append_integer(&c[BRONZE_BATCH], row, bronze_batch, "bronze_batch") < 0
        ? -1 : 0;
}

static int
change_handle(ChangeBuffers *self, PyObject *names)
{
    Py_ssize_t count = PyList_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (column_append_object(&self->handle_names, self->handle_names_count,
                                 PyList_GET_ITEM(names, i), "handle key", 0) < 0)
            return -1;
        self->handle_names_count++;
    }
    return list_append(&self->handle_key, self->rows, self->handle_names_count, 1);
}

/* add(event, bronze_batch, handle_flag, event_id): one RowEvent's row; event_id(identity)
 * gives its id from ["row", commit_ts, schema, table, op, partition_id, new, old]. */
static PyObject *
ChangeBuffers_add(ChangeBuffers *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "add takes 4 arguments (event, bronze_batch, handle_flag, "
                     "event_id), got %zd", nargs);
        return NULL;
    }
    PyObject *event = args[0], *bronze_batch = args[1], *handle_flag = args[2];
    PyObject *attrs[ATTRIBUTES] = {NULL};
    PyObject *identities[2] = {NULL, NULL}, *handles[2] = {NULL, NULL};
    PyObject *row = NULL, *id = NULL;
    int ok = 0;
    for (int i = 0; i < ATTRIBUTES; i++) {
        attrs[i] = PyObject_GetAttr(event, attribute_names[i]);
        if (attrs[i] == NULL)
            goto done;
    }
    for (int i = 0; i < 2; i++) {
        if (change_image(self, i, attrs[A_COLUMNS + i], handle_flag, &identities[i],
                         &handles[i]) < 0)
            goto done;
    }
    row = PyList_New(8);
    if (row == NULL)
        goto done;
    PyObject *const items[8] = {s_row, attrs[A_COMMIT_TS], attrs[A_SCHEMA], attrs[A_TABLE],
                                attrs[A_OP], attrs[A_PARTITION_ID], identities[0],
                                identities[1]};
    for (int i = 0; i < 8; i++)
        PyList_SET_ITEM(row, i, Py_NewRef(items[i]));
    id = PyObject_CallOneArg(args[3], row);
    if (id == NULL || change_scalars(self, attrs, id, bronze_batch) < 0)
        goto done;
    /* RowEvent.handle_key: the new image's when there is one. */
    if (change_handle(self, handles[attrs[A_COLUMNS] == Py_None ? 1 : 0]) < 0)
        goto done;
    self->rows++;
    ok = 1;
done:
    if (!ok)
        change_truncate(self, self->rows);
    for (int i = 0; i < ATTRIBUTES; i++)
        Py_XDECREF(attrs[i]);
    for (int i = 0; i < 2; i++) {
        Py_XDECREF(identities[i]);
        Py_XDECREF(handles[i]);
    }
    Py_XDECREF(row);
    Py_XDECREF(id);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
ChangeBuffers_truncate(ChangeBuffers *self, PyObject *arg)
{
    Py_ssize_t rows = PyLong_AsSsize_t(arg);
    if (rows == -1 && PyErr_Occurred())
        return NULL;
    if (rows < 0 || rows > self->rows) {
        PyErr_Format(PyExc_ValueError, "cannot truncate %zd rows to %zd", self->rows, rows);
        return NULL;
    }
    change_truncate(self, rows);
    Py_RETURN_NONE;
}

/* (scalars, handle_key, images): each scalar column's buffers (column_export), handle_key's
 * (list_export, its names' buffers), and per image column (list_export, ImageBuffers export). */
static PyObject *
ChangeBuffers_export(ChangeBuffers *self, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue(
        "(N(NN)((NN)(NN)))", columns_export(self->scalars, SCALARS, self->rows),
        list_export(&self->handle_key, self->rows),
        column_export(&self->handle_names, self->handle_names_count),
        list_export(&self->image_lists[0], self->rows),
        ImageBuffers_export(self->images[0], NULL),
        list_export(&self->image_lists[1], self->rows),
        ImageBuffers_export(self->images[1], NULL));
}

static Py_ssize_t
ChangeBuffers_len(ChangeBuffers *self)
{
    return self->rows;
}

static PyMethodDef ChangeBuffers_methods[] = {
    {"add", (PyCFunction)(void (*)(void))ChangeBuffers_add, METH_FASTCALL,
     "add(event, bronze_batch, handle_flag, event_id)"},
    {"truncate", (PyCFunction)ChangeBuffers_truncate, METH_O, "truncate(rows): keep these"},
    {"export", (PyCFunction)ChangeBuffers_export, METH_NOARGS,
     "export() -> (scalars, handle_key, images) as Arrow buffers"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods ChangeBuffers_sequence = {.sq_length = (lenfunc)ChangeBuffers_len};

static PyTypeObject ChangeBuffersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ticdc_lake.lake._silver_speedups.ChangeBuffers",
    .tp_doc = "silver.CHANGES_SCHEMA's columns of many row events, as Arrow buffers.",
    .tp_basicsize = sizeof(ChangeBuffers),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = ChangeBuffers_new,
    .tp_dealloc = (destructor)ChangeBuffers_dealloc,
    .tp_methods = ChangeBuffers_methods,
    .tp_as_sequence = &ChangeBuffers_sequence,
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
    for (int i = 0; i < ATTRIBUTES; i++) {
        attribute_names[i] = PyUnicode_InternFromString(ATTRIBUTE_NAMES[i]);
        if (attribute_names[i] == NULL)
            return NULL;
    }
    s_row = PyUnicode_InternFromString("row");
    if (s_row == NULL || PyType_Ready(&ImageBuffersType) < 0
        || PyType_Ready(&ChangeBuffersType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "ImageBuffers", (PyObject *)&ImageBuffersType) < 0
        || PyModule_AddObjectRef(module, "ChangeBuffers", (PyObject *)&ChangeBuffersType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
