/*
 * How a compiled decoder hands row events straight to silver's buffers (_silver_speedups.c's
 * ChangeBuffers), with no events.RowEvent or Column objects in between: the values are the
 * event model's, as the decoder would have put them in a RowEvent.
 *
 * _silver_speedups exports a SilverSink in a capsule named SILVER_SINK_CAPSULE; a decoder gets it
 * with PyCapsule_Import and checks `version`.
 */
#ifndef TICDC_LAKE_SILVER_SPEEDUPS_H
#define TICDC_LAKE_SILVER_SPEEDUPS_H
#include <Python.h>

#define SILVER_SINK_CAPSULE "ticdc_lake.silver._silver_speedups.sink"
#define SILVER_SINK_VERSION 2

/* One column of an image (borrowed references): what events.Column holds, mysql_type None,
 * its type code (0..255) and flags as numbers. `value` NULL: the value is a str or an int whose
 * text (str() of it) is the `text_size` bytes at `text`, read from the message with no object
 * made: ASCII that JSON does not escape (no quote, backslash or control byte), as an unescaped
 * JSON string's or an integer's text is. */
typedef struct {
    PyObject *name, *value;
    long type_code, flags;
    const char *text;
    Py_ssize_t text_size;
} SinkColumn;

/* RowEvent's scalar attributes, in this order (borrowed references). */
enum {
    SINK_COMMIT_TS, SINK_SCHEMA, SINK_TABLE, SINK_OP, SINK_PARTITION_ID, SINK_HANDLE_KEY_ONLY,
    SINK_TOPIC, SINK_PARTITION, SINK_OFFSET, SINK_INDEX, SINK_FIELDS
};

/* A row event: its attributes and its new and old images (NULL: None), in the order sent. */
typedef struct {
    PyObject *fields[SINK_FIELDS];
    const SinkColumn *images[2];
    Py_ssize_t counts[2];
} SinkRow;

typedef struct {
    int version;
    PyTypeObject *buffers_type; /* ChangeBuffers */
    /* The row appended: 1; 0 when it holds what only the event path writes (nothing added, no
     * exception); -1 with an exception set (nothing added). */
    int (*add_row)(PyObject *buffers, const SinkRow *row, PyObject *bronze_batch,
                   PyObject *handle_flag);
    Py_ssize_t (*rows)(PyObject *buffers);
    void (*truncate)(PyObject *buffers, Py_ssize_t rows); /* keep the first `rows` */
} SilverSink;

#endif /* TICDC_LAKE_SILVER_SPEEDUPS_H */
