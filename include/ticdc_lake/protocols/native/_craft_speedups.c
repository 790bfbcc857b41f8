/*
 * Compiled Craft decoder (PROTOCOLS.md §3): one call parses a whole Kafka value and returns the
 * event-model objects (events.RowEvent / DdlEvent / ResolvedEvent with events.Column images).
 *
 * It mirrors craft.decode_message, the pure-Python reference, check for check and message for
 * message, so both raise the same DecodeError (reason and byte offset) on the same bytes; the
 * tests hold them to that on a round-trip corpus and on fuzzed input.
 *
 * Safety: every read goes through a Reader whose [pos, end) window lies inside the buffer, and
 * every length or count taken from the message is compared with the bytes left before use. No
 * size read from the message is trusted for an allocation it could not fill.
 *
 * Speed: the event classes are slots dataclasses without __post_init__; `configure` checks that
 * and records each field's slot offset, so objects are made with tp_alloc and their slots filled
 * directly instead of running the dataclass __init__ (the bulk of the cost otherwise).
 */
#include "_speedups.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define VERSION 1
#define EVENT_ROW 1
#define EVENT_DDL 2
#define EVENT_RESOLVED 3
#define GROUP_NEW 1
#define GROUP_OLD 2
#define FLAG_BINARY 0x01
#define FLAG_UNSIGNED 0x80
#define MIN_BYTES_PER_COLUMN 4
#define STACK_COLUMNS 64

/* Value layouts by type code (§3.3); the table is filled by `configure` from craft.VALUE_LAYOUT
 * so the two decoders cannot disagree about which code is which. */
enum {
    L_UNKNOWN = 0,
    L_SIGNED_OR_UNSIGNED = 1,
    L_ZIGZAG = 2,
    L_UVARINT = 3,
    L_FLOAT = 4,
    L_DOUBLE = 5,
    L_STRING_BYTES = 6,
    L_TEXT = 7,
    L_NO_VALUE = 8,
};
static unsigned char value_layout[256];

/* ---------------------------------------------------------------------------------------------
 * The event model beyond _speedups.h: DDL and resolved events. */

enum {
    DDL_COMMIT_TS, DDL_SCHEMA, DDL_TABLE, DDL_QUERY, DDL_DDL_TYPE, DDL_TOPIC, DDL_PARTITION,
    DDL_OFFSET, DDL_INDEX, DDL_NFIELDS
};
static const char *const ddl_fields[] = {
    "commit_ts", "schema", "table", "query", "ddl_type", "topic", "partition", "offset", "index",
    NULL};

static SlotClass ddl_class, resolved_class;
static PyObject *decode_error;  /* ticdc_lake.errors.DecodeError */
static PyObject *empty_str;

/* ---------------------------------------------------------------------------------------------
 * Errors: DecodeError(reason, byte_offset=byte). */

static int
fail_with(Py_ssize_t byte, PyObject *reason)
{
    if (reason == NULL)
        return -1;
    PyObject *args = PyTuple_Pack(1, reason);
    Py_DECREF(reason);
    if (args == NULL)
        return -1;
    PyObject *kwargs = Py_BuildValue("{s:n}", "byte_offset", byte);
    if (kwargs == NULL) {
        Py_DECREF(args);
        return -1;
    }
    PyObject *exc = PyObject_Call(decode_error, args, kwargs);
    Py_DECREF(args);
    Py_DECREF(kwargs);
    if (exc == NULL)
        return -1;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return -1;
}

#define FAIL(byte, ...) fail_with((byte), PyUnicode_FromFormat(__VA_ARGS__))

/* Where a reader is, for messages: "message", "body of event 3", "value of column 'id'", ... */
enum { R_MESSAGE, R_SIZE_TABLES, R_HEADERS, R_DICTIONARY, R_BODY, R_GROUP, R_VALUE };

typedef struct {
    int kind;
    Py_ssize_t event;
    Py_ssize_t group;
    PyObject *column; /* borrowed; R_VALUE only */
} Region;

static PyObject *
region_name(const Region *region)
{
    switch (region->kind) {
    case R_MESSAGE:
        return PyUnicode_FromString("message");
    case R_SIZE_TABLES:
        return PyUnicode_FromString("size tables");
    case R_HEADERS:
        return PyUnicode_FromString("headers");
    case R_DICTIONARY:
        return PyUnicode_FromString("term dictionary");
    case R_BODY:
        return PyUnicode_FromFormat("body of event %zd", region->event);
    case R_GROUP:
        return PyUnicode_FromFormat("column group %zd of event %zd", region->group,
                                    region->event);
    default:
        return PyUnicode_FromFormat("value of column %R", region->column);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Bounds-checked reads of buf[pos:end]; positions are absolute offsets in the Kafka value. */

typedef struct {
    const uint8_t *buf;
    Py_ssize_t pos;
    Py_ssize_t end;
    Region region;
    Py_ssize_t what_index; /* fills a %zd in a `what` label ("size table %zd"), on error only */
} Reader;

/* A `what` label as text: labels may hold one %zd, rendered only when a message needs it. */
static const char *
render_what(char *buf, size_t size, const char *what, Py_ssize_t index)
{
    snprintf(buf, size, what, index);
    return buf;
}

#define WHAT(r, what) render_what(what_buf, sizeof what_buf, (what), (r)->what_index)

static inline void
reader_init(Reader *r, const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end, int kind,
            Py_ssize_t event, Py_ssize_t group, PyObject *column)
{
    r->buf = buf;
    r->pos = pos;
    r->end = end;
    r->region.kind = kind;
    r->region.event = event;
    r->region.group = group;
    r->region.column = column;
    r->what_index = 0;
}

static int
fail_past_end(const Reader *r, const char *what, const char *kind, Py_ssize_t start)
{
    char what_buf[64];
    PyObject *name = region_name(&r->region);
    if (name == NULL)
        return -1;
    int rc = FAIL(start, "%s: %s starting at byte %zd runs past the end of the %U (byte %zd)",
                  WHAT(r, what), kind, start, name, r->end);
    Py_DECREF(name);
    return rc;
}

/* LEB128 uint64: at most 10 bytes, the 10th no larger than 1 (Go binary.Uvarint). */
static int
read_uvarint_slow(Reader *r, const char *what, const char *kind, uint64_t *out)
{
    Py_ssize_t start = r->pos, pos = r->pos;
    uint64_t result = 0;
    unsigned shift = 0;
    for (;;) {
        if (pos >= r->end)
            return fail_past_end(r, what, kind, start);
        uint8_t byte = r->buf[pos++];
        if (shift == 63 && byte > 1) {
            char what_buf[64];
            return FAIL(start, "%s: %s starting at byte %zd overflows 64 bits", WHAT(r, what),
                        kind, start);
        }
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            r->pos = pos;
            *out = result;
            return 0;
        }
        shift += 7;
    }
}

static inline int
read_uvarint(Reader *r, const char *what, uint64_t *out)
{
    Py_ssize_t pos = r->pos;
    if (pos < r->end && r->buf[pos] < 0x80) { /* one-byte values are the common case */
        *out = r->buf[pos];
        r->pos = pos + 1;
        return 0;
    }
    return read_uvarint_slow(r, what, "uvarint", out);
}

static inline int64_t
unzigzag(uint64_t value)
{
    return (int64_t)((value >> 1) ^ (~(value & 1) + 1));
}

/* A zigzag-encoded int64. */
static inline int
read_varint(Reader *r, const char *what, int64_t *out)
{
    Py_ssize_t pos = r->pos;
    uint64_t raw;
    if (pos < r->end && r->buf[pos] < 0x80) {
        raw = r->buf[pos];
        r->pos = pos + 1;
    }
    else if (read_uvarint_slow(r, what, "varint", &raw) < 0) {
        return -1;
    }
    *out = unzigzag(raw);
    return 0;
}

static int
read_byte(Reader *r, const char *what, uint8_t *out)
{
    if (r->pos >= r->end) {
        char what_buf[64];
        PyObject *name = region_name(&r->region);
        if (name == NULL)
            return -1;
        int rc = FAIL(r->pos, "%s: byte %zd is past the end of the %U (byte %zd)",
                      WHAT(r, what), r->pos, name, r->end);
        Py_DECREF(name);
        return rc;
    }
    *out = r->buf[r->pos++];
    return 0;
}

/* A uvarint element count, refused when its elements could not fit in what is left. */
static int
read_count(Reader *r, const char *what, Py_ssize_t min_bytes_each, Py_ssize_t *out)
{
    Py_ssize_t start = r->pos;
    uint64_t count;
    if (read_uvarint(r, what, &count) < 0)
        return -1;
    Py_ssize_t left = r->end - r->pos;
    if (count > (uint64_t)(left / min_bytes_each)) {
        char what_buf[64];
        PyObject *name = region_name(&r->region);
        if (name == NULL)
            return -1;
        int rc = FAIL(start, "%s %llu at byte %zd cannot fit in the %zd bytes left in the %U",
                      WHAT(r, what), (unsigned long long)count, start, left, name);
        Py_DECREF(name);
        return rc;
    }
    *out = (Py_ssize_t)count;
    return 0;
}

/* Start of the next `length` bytes, which must lie inside the reader's window. */
static int
take(Reader *r, uint64_t length, const char *what, PyObject *column, Py_ssize_t *start_out)
{
    Py_ssize_t start = r->pos;
    if (length > (uint64_t)(r->end - start)) {
        char what_buf[64];
        PyObject *name = region_name(&r->region);
        if (name == NULL)
            return -1;
        int rc;
        if (column != NULL)
            rc = FAIL(start, "value of column %R (%llu bytes at byte %zd) runs past the end of "
                      "the %U (byte %zd)", column, (unsigned long long)length, start, name, r->end);
        else
            rc = FAIL(start, "%s (%llu bytes at byte %zd) runs past the end of the %U (byte %zd)",
                      WHAT(r, what), (unsigned long long)length, start, name, r->end);
        Py_DECREF(name);
        return rc;
    }
    r->pos = start + (Py_ssize_t)length;
    *start_out = start;
    return 0;
}

static int
expect_end(const Reader *r)
{
    if (r->pos == r->end)
        return 0;
    PyObject *name = region_name(&r->region);
    if (name == NULL)
        return -1;
    int rc = FAIL(r->pos, "%zd unread bytes at byte %zd at the end of the %U", r->end - r->pos,
                  r->pos, name);
    Py_DECREF(name);
    return rc;
}

/* UTF-8 text; `what` (%zd = what_index), or else "value of column <column>", names it. */
static PyObject *
utf8_text(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, const char *what,
          Py_ssize_t what_index, PyObject *column)
{
    PyObject *text = PyUnicode_DecodeUTF8((const char *)buf + start, end - start, NULL);
    if (text != NULL || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        return text;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    Py_ssize_t bad = 0;
    int got = value != NULL ? PyUnicodeDecodeError_GetStart(value, &bad) : -1;
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (got < 0)
        return NULL;
    if (column != NULL)
        FAIL(start + bad, "value of column %R at byte %zd is not valid UTF-8 (bad byte at %zd)",
             column, start, start + bad);
    else
    {
        char what_buf[64];
        FAIL(start + bad, "%s at byte %zd is not valid UTF-8 (bad byte at %zd)",
             render_what(what_buf, sizeof what_buf, what, what_index), start, start + bad);
    }
    return NULL;
}

/* The trailer: uvarint bytes stored in reverse at the end of the buffer, the last byte holding
 * the least-significant 7 bits; the backwards walk may not go below `floor`. */
static int
read_uvarint_reversed(const uint8_t *buf, Py_ssize_t size, Py_ssize_t floor, uint64_t *value,
                      Py_ssize_t *nbytes)
{
    Py_ssize_t last = size - 1, pos = size - 1;
    uint64_t result = 0;
    unsigned shift = 0;
    for (;;) {
        if (pos < floor)
            return FAIL(last, "size-tables length: reversed uvarint ending at byte %zd runs past "
                        "the start of the message body (byte %zd)", last, floor);
        uint8_t byte = buf[pos];
        if (shift == 63 && byte > 1)
            return FAIL(last, "size-tables length: reversed uvarint ending at byte %zd overflows "
                        "64 bits", last);
        result |= (uint64_t)(byte & 0x7F) << shift;
        pos -= 1;
        if (byte < 0x80) {
            *value = result;
            *nbytes = last - pos;
            return 0;
        }
        shift += 7;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Message layout: version, trailer and size tables. */

typedef struct {
    int64_t *entries;      /* all tables' entries back to back */
    Py_ssize_t *starts;    /* table k holds entries[starts[k] .. starts[k + 1]) */
    Py_ssize_t count;      /* number of tables */
    Py_ssize_t body_start; /* first byte after the version */
    Py_ssize_t headers_end;
    Py_ssize_t dict_start;
    Py_ssize_t dict_end; /* = start of the size tables */
} Layout;

static inline Py_ssize_t
table_len(const Layout *layout, Py_ssize_t table)
{
    return layout->starts[table + 1] - layout->starts[table];
}

static inline const int64_t *
table_at(const Layout *layout, Py_ssize_t table)
{
    return layout->entries + layout->starts[table];
}

static void
layout_free(Layout *layout)
{
    PyMem_Free(layout->entries);
    PyMem_Free(layout->starts);
}

static PyObject *
pylong_from_u128(unsigned __int128 value)
{
    PyObject *high = PyLong_FromUnsignedLongLong((unsigned long long)(value >> 64));
    PyObject *low = PyLong_FromUnsignedLongLong((unsigned long long)value);
    PyObject *shift = PyLong_FromLong(64);
    PyObject *result = NULL;
    if (high != NULL && low != NULL && shift != NULL) {
        PyObject *shifted = PyNumber_Lshift(high, shift);
        if (shifted != NULL) {
            result = PyNumber_Or(shifted, low);
            Py_DECREF(shifted);
        }
    }
    Py_XDECREF(high);
    Py_XDECREF(low);
    Py_XDECREF(shift);
    return result;
}

/* Tables until the region ends, each a uvarint count plus a delta-varint chunk. */
static int
parse_size_tables(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, Layout *layout)
{
    Py_ssize_t room = end - start; /* every table and entry takes at least one byte */
    layout->entries = PyMem_Malloc(sizeof(int64_t) * (size_t)(room + 1));
    layout->starts = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(room + 2));
    if (layout->entries == NULL || layout->starts == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Reader r;
    reader_init(&r, buf, start, end, R_SIZE_TABLES, 0, 0, NULL);
    Py_ssize_t tables = 0, used = 0;
    while (r.pos < end) {
        r.what_index = tables;
        Py_ssize_t count;
        if (read_count(&r, "size table %zd count", 1, &count) < 0)
            return -1;
        layout->starts[tables++] = used;
        int64_t last = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t delta;
            if (read_varint(&r, "size table %zd", &delta) < 0)
                return -1;
            last = (int64_t)((uint64_t)last + (uint64_t)delta);
            layout->entries[used++] = last;
        }
    }
    layout->starts[tables] = used;
    layout->count = tables;
    if (tables < 2)
        return FAIL(start, "size tables hold %zd table(s); expected at least 2 (meta sizes, "
                    "body sizes)", tables);
    if (table_len(layout, 0) != 2)
        return FAIL(start, "meta size table holds %zd entries; expected 2 (header size, "
                    "dictionary size)", table_len(layout, 0));
    return 0;
}

static int
parse_layout(const uint8_t *buf, Py_ssize_t size, Layout *layout)
{
    Reader r;
    reader_init(&r, buf, 0, size, R_MESSAGE, 0, 0, NULL);
    uint64_t version;
    if (read_uvarint(&r, "version", &version) < 0)
        return -1;
    if (version != VERSION)
        return FAIL(0, "unsupported craft version %llu at byte 0; expected %d",
                    (unsigned long long)version, VERSION);
    Py_ssize_t body_start = r.pos, trailer_bytes;
    uint64_t length;
    if (read_uvarint_reversed(buf, size, body_start, &length, &trailer_bytes) < 0)
        return -1;
    Py_ssize_t tables_end = size - trailer_bytes;
    Py_ssize_t available = tables_end - body_start;
    if (length > (uint64_t)available)
        return FAIL(tables_end, "size tables claim %llu bytes but only %zd bytes lie between the "
                    "version and the trailer", (unsigned long long)length, available);
    Py_ssize_t tables_start = tables_end - (Py_ssize_t)length;
    if (parse_size_tables(buf, tables_start, tables_end, layout) < 0)
        return -1;
    const int64_t *meta = table_at(layout, 0), *bodies = table_at(layout, 1);
    Py_ssize_t count = table_len(layout, 1);
    int64_t header_size = meta[0], dict_size = meta[1];
    if (header_size < 0)
        return FAIL(tables_start, "header size %lld is negative", (long long)header_size);
    if (dict_size < 0)
        return FAIL(tables_start, "dictionary size %lld is negative", (long long)dict_size);
    unsigned __int128 body_total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (bodies[i] < 0)
            return FAIL(tables_start, "body size %lld of event %zd is negative",
                        (long long)bodies[i], i);
        body_total += (uint64_t)bodies[i];
    }
    unsigned __int128 claimed = body_total + (uint64_t)header_size + (uint64_t)dict_size;
    Py_ssize_t between = tables_start - body_start;
    if (claimed != (unsigned __int128)between) {
        PyObject *claimed_obj = pylong_from_u128(claimed);
        PyObject *bodies_obj = pylong_from_u128(body_total);
        int rc = -1;
        if (claimed_obj != NULL && bodies_obj != NULL)
            rc = FAIL(body_start, "size tables claim %S bytes of headers (%lld), bodies (%S) and "
                      "term dictionary (%lld) but %zd bytes lie between the version and the "
                      "size tables", claimed_obj, (long long)header_size, bodies_obj,
                      (long long)dict_size, between);
        Py_XDECREF(claimed_obj);
        Py_XDECREF(bodies_obj);
        return rc;
    }
    layout->body_start = body_start;
    layout->headers_end = body_start + (Py_ssize_t)header_size;
    layout->dict_start = layout->headers_end + (Py_ssize_t)body_total;
    layout->dict_end = tables_start;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Term dictionary: `uvarint count` + string chunk, absent when empty. Besides the terms, each
 * id gets the id of the first equal term, so duplicate column names are found by id. */

typedef struct {
    PyObject *terms; /* list of str */
    Py_ssize_t *canonical;
    Py_ssize_t *seen_in_group; /* last group serial that used the canonical id */
} Terms;

static void
terms_free(Terms *terms)
{
    Py_XDECREF(terms->terms);
    PyMem_Free(terms->canonical);
    PyMem_Free(terms->seen_in_group);
}

static int
parse_terms(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, Terms *out)
{
    Py_ssize_t count = 0;
    Reader r;
    reader_init(&r, buf, start, end, R_DICTIONARY, 0, 0, NULL);
    if (start != end && read_count(&r, "term count", 1, &count) < 0)
        return -1;
    out->terms = PyList_New(count);
    out->canonical = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count + 1));
    out->seen_in_group = PyMem_Calloc((size_t)(count + 1), sizeof(Py_ssize_t));
    if (out->terms == NULL || out->canonical == NULL || out->seen_in_group == NULL) {
        if (out->terms != NULL)
            PyErr_NoMemory();
        return -1;
    }
    if (start == end)
        return 0;
    uint64_t *lengths = PyMem_Malloc(sizeof(uint64_t) * (size_t)(count + 1));
    PyObject *first_ids = PyDict_New();
    int rc = -1;
    if (lengths == NULL || first_ids == NULL) {
        if (lengths == NULL)
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (read_uvarint(&r, "term length", &lengths[i]) < 0)
            goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        r.what_index = i;
        Py_ssize_t term_start;
        if (take(&r, lengths[i], "term %zd", NULL, &term_start) < 0)
            goto done;
        PyObject *term = utf8_text(buf, term_start, r.pos, "term %zd", i, NULL);
        if (term == NULL)
            goto done;
        PyList_SET_ITEM(out->terms, i, term);
        PyObject *first = PyDict_GetItemWithError(first_ids, term);
        if (first != NULL) {
            out->canonical[i] = PyLong_AsSsize_t(first);
        }
        else {
            if (PyErr_Occurred())
                goto done;
            PyObject *id = PyLong_FromSsize_t(i);
            if (id == NULL || PyDict_SetItem(first_ids, term, id) < 0) {
                Py_XDECREF(id);
                goto done;
            }
            Py_DECREF(id);
            out->canonical[i] = i;
        }
    }
    rc = expect_end(&r);
done:
    PyMem_Free(lengths);
    Py_XDECREF(first_ids);
    return rc;
}

/* The term `id` names (borrowed), or an error naming `what` and the byte. */
static PyObject *
lookup_term(const Terms *terms, int64_t id, const char *what, Py_ssize_t byte)
{
    Py_ssize_t count = PyList_GET_SIZE(terms->terms);
    if (id >= 0 && id < count)
        return PyList_GET_ITEM(terms->terms, id);
    FAIL(byte, "%s id %lld at byte %zd is not in the term dictionary (%zd terms)", what,
         (long long)id, byte, count);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Headers: ts delta-uvarint, type uvarint, partition / schema id / table id delta-varint chunks. */

typedef struct {
    uint64_t *timestamps;
    uint8_t *types;
    int64_t *partitions;
    PyObject **schemas; /* borrowed from the term list, or empty_str */
    PyObject **tables;
} Headers;

static void
headers_free(Headers *headers)
{
    PyMem_Free(headers->timestamps);
    PyMem_Free(headers->types);
    PyMem_Free(headers->partitions);
    PyMem_Free(headers->schemas);
    PyMem_Free(headers->tables);
}

static int
parse_names(Reader *r, Py_ssize_t count, const Terms *terms, const char *what,
            const char *id_what, PyObject **out)
{
    int64_t last = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t byte = r->pos;
        int64_t delta;
        if (read_varint(r, id_what, &delta) < 0)
            return -1;
        last = (int64_t)((uint64_t)last + (uint64_t)delta);
        if (last == -1) {
            out[i] = empty_str;
        }
        else if ((out[i] = lookup_term(terms, last, what, byte)) == NULL) {
            return -1;
        }
    }
    return 0;
}

static int
parse_headers(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
              const Terms *terms, Headers *h)
{
    size_t n = (size_t)count + 1;
    h->timestamps = PyMem_Malloc(sizeof(uint64_t) * n);
    h->types = PyMem_Malloc(n);
    h->partitions = PyMem_Malloc(sizeof(int64_t) * n);
    h->schemas = PyMem_Malloc(sizeof(PyObject *) * n);
    h->tables = PyMem_Malloc(sizeof(PyObject *) * n);
    if (!h->timestamps || !h->types || !h->partitions || !h->schemas || !h->tables) {
        PyErr_NoMemory();
        return -1;
    }
    Reader r;
    reader_init(&r, buf, start, end, R_HEADERS, 0, 0, NULL);
    uint64_t ts = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t delta;
        if (read_uvarint(&r, "commit ts", &delta) < 0)
            return -1;
        ts += delta;
        h->timestamps[i] = ts;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t byte = r.pos;
        uint64_t type;
        if (read_uvarint(&r, "event type", &type) < 0)
            return -1;
        if (type != EVENT_ROW && type != EVENT_DDL && type != EVENT_RESOLVED)
            return FAIL(byte, "event type %llu at byte %zd; expected 1 (row), 2 (DDL) or "
                        "3 (resolved)", (unsigned long long)type, byte);
        h->types[i] = (uint8_t)type;
    }
    int64_t partition = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t byte = r.pos;
        int64_t delta;
        if (read_varint(&r, "partition id", &delta) < 0)
            return -1;
        partition = (int64_t)((uint64_t)partition + (uint64_t)delta);
        if (partition < -1)
            return FAIL(byte, "partition id %lld at byte %zd; expected -1 (none) or a physical "
                        "table id", (long long)partition, byte);
        h->partitions[i] = partition;
    }
    if (parse_names(&r, count, terms, "schema", "schema id", h->schemas) < 0)
        return -1;
    if (parse_names(&r, count, terms, "table", "table id", h->tables) < 0)
        return -1;
    return expect_end(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Column values (§3.3). */

/* A value that must be exactly one (zigzag) varint filling buf[start:end]. */
static PyObject *
varint_value(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, PyObject *column,
             const char *label, int is_signed)
{
    uint64_t raw;
    if (end - start == 1 && buf[start] < 0x80) {
        raw = buf[start];
    }
    else {
        Reader r;
        reader_init(&r, buf, start, end, R_VALUE, 0, 0, column);
        if (read_uvarint_slow(&r, label, is_signed ? "varint" : "uvarint", &raw) < 0)
            return NULL;
        if (expect_end(&r) < 0)
            return NULL;
    }
    if (is_signed)
        return PyLong_FromLongLong(unzigzag(raw));
    return PyLong_FromUnsignedLongLong(raw);
}

static PyObject *
float_value(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, PyObject *column, int layout)
{
    const char *label = layout == L_FLOAT ? "FLOAT" : "DOUBLE";
    if (end - start != 8) {
        FAIL(start, "%s value of column %R at byte %zd is %zd bytes; expected 8", label, column,
             start, end - start);
        return NULL;
    }
    uint64_t bits = 0;
    for (int i = 7; i >= 0; i--) /* little-endian whatever the host */
        bits = (bits << 8) | buf[start + i];
    double value;
    memcpy(&value, &bits, sizeof value);
    if (layout == L_DOUBLE)
        return PyFloat_FromDouble(value);
    /* Round through float32 as mysql.float32 (struct "<f") does, overflow included. */
    float narrowed = (float)value;
    if (isinf(narrowed) && !isinf(value)) {
        PyObject *shown = PyFloat_FromDouble(value);
        if (shown != NULL) {
            FAIL(start, "FLOAT value of column %R at byte %zd (%R) is outside the float32 range",
                 column, start, shown);
            Py_DECREF(shown);
        }
        return NULL;
    }
    return PyFloat_FromDouble((double)narrowed);
}

static PyObject *
decode_value(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, PyObject *column,
             uint64_t type_code, uint64_t flags)
{
    int layout = value_layout[type_code];
    switch (layout) {
    case L_STRING_BYTES:
        if (flags & FLAG_BINARY)
            return PyBytes_FromStringAndSize((const char *)buf + start, end - start);
        return utf8_text(buf, start, end, NULL, 0, column);
    case L_SIGNED_OR_UNSIGNED:
        if (flags & FLAG_UNSIGNED)
            return varint_value(buf, start, end, column, "unsigned integer", 0);
        return varint_value(buf, start, end, column, "signed integer", 1);
    case L_TEXT:
        return utf8_text(buf, start, end, NULL, 0, column);
    case L_FLOAT:
    case L_DOUBLE:
        return float_value(buf, start, end, column, layout);
    case L_UVARINT:
        return varint_value(buf, start, end, column, "ENUM/SET/BIT value", 0);
    case L_ZIGZAG:
        return varint_value(buf, start, end, column, "YEAR", 1);
    default:
        FAIL(start, "column %R has type code %llu, which carries no value in craft, but a "
             "%zd-byte value is at byte %zd", column, (unsigned long long)type_code,
             end - start, start);
        return NULL;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Row, DDL and resolved bodies. */

typedef struct {
    const uint8_t *buf;
    Terms *terms;
    Py_ssize_t group_serial; /* tells one group's duplicate-name marks from the last one's */
} Context;

/* One column group: type byte, column count, name-id delta-varint chunk, type and flag uvarint
 * chunks, nullable-bytes value chunk. Returns the image; *group_type receives the type. */
static PyObject *
parse_column_group(Context *ctx, Py_ssize_t start, Py_ssize_t end, Py_ssize_t event,
                   Py_ssize_t group, uint8_t *group_type)
{
    Reader r;
    reader_init(&r, ctx->buf, start, end, R_GROUP, event, group, NULL);
    if (read_byte(&r, "column group type", group_type) < 0)
        return NULL;
    if (*group_type != GROUP_NEW && *group_type != GROUP_OLD) {
        FAIL(start, "column group type %d at byte %zd; expected 1 (new values) or 2 (old values)",
             (int)*group_type, start);
        return NULL;
    }
    Py_ssize_t count;
    if (read_count(&r, "column count", MIN_BYTES_PER_COLUMN, &count) < 0)
        return NULL;

    PyObject *stack_names[STACK_COLUMNS];
    uint64_t stack_codes[STACK_COLUMNS], stack_flags[STACK_COLUMNS];
    int64_t stack_lengths[STACK_COLUMNS];
    PyObject **names = stack_names;
    uint64_t *codes = stack_codes, *flags = stack_flags;
    int64_t *lengths = stack_lengths;
    PyObject *image = NULL;
    if (count > STACK_COLUMNS) {
        names = PyMem_Malloc(sizeof(PyObject *) * (size_t)count);
        codes = PyMem_Malloc(sizeof(uint64_t) * (size_t)count);
        flags = PyMem_Malloc(sizeof(uint64_t) * (size_t)count);
        lengths = PyMem_Malloc(sizeof(int64_t) * (size_t)count);
        if (!names || !codes || !flags || !lengths) {
            PyErr_NoMemory();
            goto done;
        }
    }

    Py_ssize_t serial = ++ctx->group_serial;
    int64_t last = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t byte = r.pos;
        int64_t delta;
        if (read_varint(&r, "column name id", &delta) < 0)
            goto done;
        last = (int64_t)((uint64_t)last + (uint64_t)delta);
        PyObject *name = lookup_term(ctx->terms, last, "column name", byte);
        if (name == NULL)
            goto done;
        Py_ssize_t canonical = ctx->terms->canonical[last];
        if (ctx->terms->seen_in_group[canonical] == serial) {
            PyObject *region = region_name(&r.region);
            if (region != NULL) {
                FAIL(byte, "column %R appears twice in the %U", name, region);
                Py_DECREF(region);
            }
            goto done;
        }
        ctx->terms->seen_in_group[canonical] = serial;
        names[i] = name;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t byte = r.pos;
        if (read_uvarint(&r, "column type", &codes[i]) < 0)
            goto done;
        if (codes[i] > 0xFF) {
            FAIL(byte, "column type %llu at byte %zd is not a MySQL type code (0-255)",
                 (unsigned long long)codes[i], byte);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (read_uvarint(&r, "column flags", &flags[i]) < 0)
            goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t byte = r.pos;
        if (read_varint(&r, "value length", &lengths[i]) < 0)
            goto done;
        if (lengths[i] < -1) {
            FAIL(byte, "value length %lld at byte %zd; expected -1 (NULL) or a byte count",
                 (long long)lengths[i], byte);
            goto done;
        }
    }

    image = new_image_dict(count);
    if (image == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *value;
        if (lengths[i] == -1) {
            value = Py_NewRef(Py_None);
        }
        else {
            Py_ssize_t value_start;
            if (take(&r, (uint64_t)lengths[i], NULL, names[i], &value_start) < 0)
                goto fail;
            value = decode_value(ctx->buf, value_start, r.pos, names[i], codes[i], flags[i]);
            if (value == NULL)
                goto fail;
        }
        PyObject *type_code = PyLong_FromUnsignedLongLong(codes[i]);
        PyObject *flag_value = PyLong_FromUnsignedLongLong(flags[i]);
        PyObject *column = slot_new(&column_class);
        if (type_code == NULL || flag_value == NULL || column == NULL) {
            Py_DECREF(value);
            Py_XDECREF(type_code);
            Py_XDECREF(flag_value);
            Py_XDECREF(column);
            goto fail;
        }
        slot_set(column, &column_class, COLUMN_TYPE_CODE, type_code);
        slot_set(column, &column_class, COLUMN_FLAGS, flag_value);
        slot_set(column, &column_class, COLUMN_VALUE, value);
        slot_set(column, &column_class, COLUMN_MYSQL_TYPE, Py_NewRef(Py_None));
        int rc = PyDict_SetItem(image, names[i], column);
        Py_DECREF(column);
        if (rc < 0)
            goto fail;
    }
    if (expect_end(&r) < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(image);
done:
    if (names != stack_names) {
        PyMem_Free(names);
        PyMem_Free(codes);
        PyMem_Free(flags);
        PyMem_Free(lengths);
    }
    return image;
}

/* (new image, old image) of a row body: one or two column groups; NULL on error. */
static int
parse_row_body(Context *ctx, Py_ssize_t start, Py_ssize_t end, Py_ssize_t event,
               const int64_t *sizes, Py_ssize_t groups, PyObject **new_image,
               PyObject **old_image)
{
    if (groups == 0)
        return FAIL(start, "row event %zd has no column groups", event);
    if (groups > 2)
        return FAIL(start, "row event %zd has %zd column groups; expected 1 or 2", event, groups);
    uint64_t total = 0;
    for (Py_ssize_t g = 0; g < groups; g++) {
        if (sizes[g] < 0)
            return FAIL(start, "column group %zd of event %zd has negative size %lld", g, event,
                        (long long)sizes[g]);
    }
    for (Py_ssize_t g = 0; g < groups; g++)
        total += (uint64_t)sizes[g];
    if (total != (uint64_t)(end - start))
        return FAIL(start, "column groups of event %zd add up to %llu bytes but its body holds "
                    "%zd", event, (unsigned long long)total, end - start);
    *new_image = *old_image = NULL;
    Py_ssize_t group_start = start;
    for (Py_ssize_t g = 0; g < groups; g++) {
        uint8_t type;
        PyObject *image = parse_column_group(ctx, group_start, group_start + (Py_ssize_t)sizes[g],
                                             event, g, &type);
        if (image == NULL)
            goto fail;
        PyObject **slot = type == GROUP_NEW ? new_image : old_image;
        if (*slot != NULL) {
            Py_DECREF(image);
            FAIL(group_start, "second %s-value column group at byte %zd in event %zd",
                 type == GROUP_NEW ? "new" : "old", group_start, event);
            goto fail;
        }
        *slot = image;
        group_start += (Py_ssize_t)sizes[g];
    }
    return 0;
fail:
    Py_CLEAR(*new_image);
    Py_CLEAR(*old_image);
    return -1;
}

static PyObject *
make_row_event(Context *ctx, const Layout *layout, const Headers *h, Py_ssize_t index,
               Py_ssize_t start, Py_ssize_t end, PyObject *topic, PyObject *partition,
               PyObject *offset, int delete_handle_key_only)
{
    PyObject *new_image, *old_image;
    if (parse_row_body(ctx, start, end, index, table_at(layout, 2 + index),
                       table_len(layout, 2 + index), &new_image, &old_image) < 0)
        return NULL;
    PyObject *op = new_image && old_image ? op_update : new_image ? op_insert : op_delete;
    PyObject *commit_ts = PyLong_FromUnsignedLongLong(h->timestamps[index]);
    PyObject *position = PyLong_FromSsize_t(index);
    PyObject *partition_id =
        h->partitions[index] == -1 ? Py_NewRef(Py_None) : PyLong_FromLongLong(h->partitions[index]);
    PyObject *event = slot_new(&row_class);
    if (commit_ts == NULL || position == NULL || partition_id == NULL || event == NULL) {
        Py_XDECREF(new_image);
        Py_XDECREF(old_image);
        Py_XDECREF(commit_ts);
        Py_XDECREF(position);
        Py_XDECREF(partition_id);
        Py_XDECREF(event);
        return NULL;
    }
    int key_only = delete_handle_key_only && op == op_delete;
    slot_set(event, &row_class, ROW_COMMIT_TS, commit_ts);
    slot_set(event, &row_class, ROW_SCHEMA, Py_NewRef(h->schemas[index]));
    slot_set(event, &row_class, ROW_TABLE, Py_NewRef(h->tables[index]));
    slot_set(event, &row_class, ROW_OP, Py_NewRef(op));
    slot_set(event, &row_class, ROW_COLUMNS, new_image ? new_image : Py_NewRef(Py_None));
    slot_set(event, &row_class, ROW_OLD_COLUMNS, old_image ? old_image : Py_NewRef(Py_None));
    slot_set(event, &row_class, ROW_TOPIC, Py_NewRef(topic));
    slot_set(event, &row_class, ROW_PARTITION, Py_NewRef(partition));
    slot_set(event, &row_class, ROW_OFFSET, Py_NewRef(offset));
    slot_set(event, &row_class, ROW_INDEX, position);
    slot_set(event, &row_class, ROW_PARTITION_ID, partition_id);
    slot_set(event, &row_class, ROW_HANDLE_KEY_ONLY, Py_NewRef(key_only ? Py_True : Py_False));
    return event;
}

/* DDL body: uvarint ActionType, uvarint length + UTF-8 query. */
static PyObject *
make_ddl_event(Context *ctx, const Headers *h, Py_ssize_t index, Py_ssize_t start,
               Py_ssize_t end, PyObject *topic, PyObject *partition, PyObject *offset)
{
    Reader r;
    reader_init(&r, ctx->buf, start, end, R_BODY, index, 0, NULL);
    uint64_t action, length;
    Py_ssize_t query_start;
    if (read_uvarint(&r, "DDL type", &action) < 0 || read_uvarint(&r, "query length", &length) < 0
        || take(&r, length, "query", NULL, &query_start) < 0)
        return NULL;
    PyObject *query = utf8_text(ctx->buf, query_start, r.pos, "query", 0, NULL);
    if (query == NULL)
        return NULL;
    if (expect_end(&r) < 0) {
        Py_DECREF(query);
        return NULL;
    }
    /* ActionNone (0) means TiCDC had no type to give. */
    PyObject *ddl_type = action ? PyLong_FromUnsignedLongLong(action) : Py_NewRef(Py_None);
    PyObject *commit_ts = PyLong_FromUnsignedLongLong(h->timestamps[index]);
    PyObject *position = PyLong_FromSsize_t(index);
    PyObject *event = slot_new(&ddl_class);
    if (ddl_type == NULL || commit_ts == NULL || position == NULL || event == NULL) {
        Py_DECREF(query);
        Py_XDECREF(ddl_type);
        Py_XDECREF(commit_ts);
        Py_XDECREF(position);
        Py_XDECREF(event);
        return NULL;
    }
    slot_set(event, &ddl_class, DDL_COMMIT_TS, commit_ts);
    slot_set(event, &ddl_class, DDL_SCHEMA, Py_NewRef(h->schemas[index]));
    slot_set(event, &ddl_class, DDL_TABLE, Py_NewRef(h->tables[index]));
    slot_set(event, &ddl_class, DDL_QUERY, query);
    slot_set(event, &ddl_class, DDL_DDL_TYPE, ddl_type);
    slot_set(event, &ddl_class, DDL_TOPIC, Py_NewRef(topic));
    slot_set(event, &ddl_class, DDL_PARTITION, Py_NewRef(partition));
    slot_set(event, &ddl_class, DDL_OFFSET, Py_NewRef(offset));
    slot_set(event, &ddl_class, DDL_INDEX, position);
    return event;
}

static PyObject *
make_resolved_event(const Headers *h, Py_ssize_t index, Py_ssize_t start, Py_ssize_t end,
                    PyObject *topic, PyObject *partition, PyObject *offset)
{
    if (end != start) {
        FAIL(start, "resolved event %zd has a %zd-byte body at byte %zd; expected an empty body",
             index, end - start, start);
        return NULL;
    }
    PyObject *ts = PyLong_FromUnsignedLongLong(h->timestamps[index]);
    PyObject *position = PyLong_FromSsize_t(index);
    PyObject *event = slot_new(&resolved_class);
    if (ts == NULL || position == NULL || event == NULL) {
        Py_XDECREF(ts);
        Py_XDECREF(position);
        Py_XDECREF(event);
        return NULL;
    }
    slot_set(event, &resolved_class, RES_TS, ts);
    slot_set(event, &resolved_class, RES_TOPIC, Py_NewRef(topic));
    slot_set(event, &resolved_class, RES_PARTITION, Py_NewRef(partition));
    slot_set(event, &resolved_class, RES_OFFSET, Py_NewRef(offset));
    slot_set(event, &resolved_class, RES_INDEX, position);
    return event;
}

/* ---------------------------------------------------------------------------------------------
 * decode(value, topic, partition, offset, delete_handle_key_only=False) -> list of events */

static PyObject *
decode_events(const uint8_t *buf, Py_ssize_t size, PyObject *topic, PyObject *partition,
              PyObject *offset, int delete_handle_key_only)
{
    Layout layout = {0};
    Terms terms = {0};
    Headers headers = {0};
    PyObject *events = NULL;
    if (parse_layout(buf, size, &layout) < 0)
        goto done;
    if (parse_terms(buf, layout.dict_start, layout.dict_end, &terms) < 0)
        goto done;
    Py_ssize_t count = table_len(&layout, 1);
    if (parse_headers(buf, layout.body_start, layout.headers_end, count, &terms, &headers) < 0)
        goto done;
    int has_rows = 0;
    for (Py_ssize_t i = 0; i < count; i++)
        has_rows |= headers.types[i] == EVENT_ROW;
    Py_ssize_t expected = has_rows ? 2 + count : 2;
    if (layout.count != expected) {
        FAIL(layout.dict_end, "size tables hold %zd tables; expected %zd for %zd events%s",
             layout.count, expected, count, has_rows ? " with column groups" : "");
        goto done;
    }
    events = PyList_New(count);
    if (events == NULL)
        goto done;
    Context ctx = {buf, &terms, 0};
    const int64_t *body_sizes = table_at(&layout, 1);
    Py_ssize_t start = layout.headers_end;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t end = start + (Py_ssize_t)body_sizes[i];
        PyObject *event;
        if (headers.types[i] == EVENT_ROW)
            event = make_row_event(&ctx, &layout, &headers, i, start, end, topic, partition,
                                   offset, delete_handle_key_only);
        else if (headers.types[i] == EVENT_DDL)
            event = make_ddl_event(&ctx, &headers, i, start, end, topic, partition, offset);
        else
            event = make_resolved_event(&headers, i, start, end, topic, partition, offset);
        if (event == NULL) {
            Py_CLEAR(events);
            goto done;
        }
        PyList_SET_ITEM(events, i, event);
        start = end;
    }
done:
    layout_free(&layout);
    terms_free(&terms);
    headers_free(&headers);
    return events;
}

static PyObject *
craft_decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured)
        return not_configured("_craft_speedups");
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "decode(value, topic, partition, offset, delete_handle_key_only=False)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int key_only = nargs == 5 ? PyObject_IsTrue(args[4]) : 0;
    PyObject *events = NULL;
    if (key_only >= 0)
        events = decode_events(view.buf, view.len, args[1], args[2], args[3], key_only);
    PyBuffer_Release(&view);
    return events;
}

/* ---------------------------------------------------------------------------------------------
 * configure(Column, RowEvent, DdlEvent, ResolvedEvent, DecodeError, INSERT, UPDATE, DELETE,
 *           value_layout) */

static PyObject *
craft_configure(PyObject *module, PyObject *args)
{
    PyObject *column, *row, *ddl, *resolved, *error, *insert, *update, *delete, *layouts;
    if (!PyArg_ParseTuple(args, "OOOOOUUUO!:configure", &column, &row, &ddl, &resolved, &error,
                          &insert, &update, &delete, &PyDict_Type, &layouts))
        return NULL;
    configured = 0;
    if (bind_class(column, column_fields, &column_class) < 0
        || bind_class(row, row_fields, &row_class) < 0
        || bind_class(ddl, ddl_fields, &ddl_class) < 0
        || bind_class(resolved, resolved_fields, &resolved_class) < 0)
        return NULL;
    if (!PyType_Check(error) || !PyType_IsSubtype((PyTypeObject *)error,
                                                  (PyTypeObject *)PyExc_Exception)) {
        PyErr_SetString(PyExc_TypeError, "DecodeError must be an exception class");
        return NULL;
    }
    unsigned char table[256] = {0};
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(layouts, &pos, &key, &value)) {
        long code = PyLong_AsLong(key), layout = PyLong_AsLong(value);
        if (PyErr_Occurred())
            return NULL;
        if (code < 0 || code > 255 || layout < L_SIGNED_OR_UNSIGNED || layout > L_NO_VALUE) {
            PyErr_Format(PyExc_ValueError, "value layout %R: %R is out of range", key, value);
            return NULL;
        }
        table[code] = (unsigned char)layout;
    }
    memcpy(value_layout, table, sizeof table);
    Py_INCREF(error);
    Py_XSETREF(decode_error, error);
    bind_ops(insert, update, delete);
    configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef craft_methods[] = {
    {"configure", craft_configure, METH_VARARGS,
     "configure(Column, RowEvent, DdlEvent, ResolvedEvent, DecodeError, INSERT, UPDATE, DELETE, "
     "value_layout): bind the event model."},
    {"decode", (PyCFunction)(void (*)(void))craft_decode, METH_FASTCALL,
     "decode(value, topic, partition, offset, delete_handle_key_only=False) -> list of events"},
    EVENTS_FIT_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef craft_module = {
    PyModuleDef_HEAD_INIT, "_craft_speedups",
    "Compiled Craft decoder; see ticdc_lake.protocols.craft.", -1, craft_methods,
};

PyMODINIT_FUNC
PyInit__craft_speedups(void)
{
    empty_str = PyUnicode_FromString("");
    if (empty_str == NULL)
        return NULL;
    return PyModule_Create(&craft_module);
}
