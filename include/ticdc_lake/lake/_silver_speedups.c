/*
 * The decode stage's hot loop in C: one image's columns appended to silver's flat image columns
 * (lake/silver.py, ImageColumns.add_python is the reference and the fallback).
 *
 * add_image(image, names, type_codes, flags, mysql_types, texts, binaries, handle_flag)
 *     -> (identity, handle)
 *
 * `image` is a dict of column name -> events.Column. Each column's value becomes its
 * (text, binary) form as silver.value_fields gives it, and the six lists get one entry each.
 * `identity` is [[name, text, binary], ...] (what the event id hashes), `handle` the names whose
 * flags have `handle_flag` set (events.RowEvent.handle_key). Attributes are read by name, so any
 * object with Column's attributes works as it does in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *name_type_code, *name_flags, *name_value, *name_mysql_type;

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

/* Append one column to the six lists and return its identity entry; NULL on failure (the
 * lists may then hold part of the image: ImageColumns.truncate undoes it). */
static PyObject *
add_column(PyObject *name, PyObject *column, PyObject *const *lists, PyObject *handle,
           PyObject *handle_flag)
{
    PyObject *attrs[4] = {NULL, NULL, NULL, NULL};
    PyObject *const attr_names[4] = {name_type_code, name_flags, name_value, name_mysql_type};
    PyObject *text = NULL, *binary = NULL, *entry = NULL;
    int is_handle;
    for (int i = 0; i < 4; i++) {
        attrs[i] = PyObject_GetAttr(column, attr_names[i]);
        if (attrs[i] == NULL)
            goto done;
    }
    if (value_fields(attrs[2], &text, &binary) < 0)
        goto done;
    /* names, type_codes, flags, mysql_types, texts, binaries */
    PyObject *const row[6] = {name, attrs[0], attrs[1], attrs[3], text, binary};
    for (int i = 0; i < 6; i++) {
        if (PyList_Append(lists[i], row[i]) < 0)
            goto done;
    }
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
add_image(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "add_image takes 8 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *image = args[0], *handle_flag = args[7];
    if (!PyDict_Check(image)) {
        PyErr_Format(PyExc_TypeError, "image must be a dict, not %.100s", Py_TYPE(image)->tp_name);
        return NULL;
    }
    for (int i = 1; i < 7; i++) {
        if (!PyList_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "the image columns must be lists");
            return NULL;
        }
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
        PyObject *entry = add_column(name, column, args + 1, handle, handle_flag);
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

static PyMethodDef methods[] = {
    {"add_image", (PyCFunction)(void (*)(void))add_image, METH_FASTCALL,
     "add_image(image, names, type_codes, flags, mysql_types, texts, binaries, handle_flag)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_silver_speedups", "Silver image columns built in C.", -1, methods,
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
    return PyModule_Create(&module_def);
}
