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

#endif /* TICDC_LAKE_SPEEDUPS_H */
