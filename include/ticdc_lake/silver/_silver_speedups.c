/*
 * The decode stage's hot loop in C: silver's change rows written straight into Arrow's buffers
 * (silver/rows.py: ChangeRows and ImageColumns on Python lists are the reference and the
 * fallback).
 *
 * ChangeBuffers().add(event, bronze_batch, handle_flag, event_id)
 *     one events.RowEvent as a row of silver.CHANGES_SCHEMA. Its id is silver.event_id's:
 *     hashed here from the identity ["row", commit_ts, schema, table, op, partition_id, new,
 *     old] written as JSON, or given by `event_id(event)` for one holding what this does not
 *     write as orjson does.
 * ImageBuffers().add(image, handle_flag) -> (identity, handle)
 *     one image's columns (ChangeBuffers keeps two of these, for the new and the old image).
 * sink
 *     a capsule through which a compiled decoder adds rows from its own values, with no
 *     RowEvent or Column in between (_silver_speedups.h; _open_speedups.decode_into).
 *
 * `image` is a dict of column name -> events.Column. Each column's value becomes its
 * (text, binary) form as silver.value_fields gives it, and each of the six columns (name,
 * type_code, flags, mysql_type, text, binary: silver.COLUMN_TYPE) gets one entry. `identity` is
 * [[name, text, binary], ...] (what the event id hashes), `handle` the names whose flags have
 * `handle_flag` set (events.RowEvent.handle_key). Attributes are read as getattr reads them
 * (from the slots of a slots class), so any object with RowEvent's or Column's attributes works
 * as it does in Python.
 *
 * Why buffers, not lists: converting lists of Python objects to Arrow cost as much as filling
 * them. A value a column cannot hold (a partition beyond 32 bits, a schema that is not a str)
 * fails the row as it is added, and a failed add leaves nothing of its row. `truncate(n)` keeps
 * the first n rows (entries); `export()` gives the Arrow buffers as bytes (validity, offsets,
 * data), for pyarrow's Array.from_buffers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_silver_speedups.h"

#ifdef Py_T_OBJECT_EX
#define SLOT_OBJECT_EX Py_T_OBJECT_EX
#else
#define SLOT_OBJECT_EX T_OBJECT_EX
#endif

/* --- attributes read from slots ------------------------------------------------------------ */

/* Events and Columns are slots dataclasses: once a type's slots are known, their attributes
 * are read straight from the instance (a getattr each cost a tenth of a change row). Any other
 * object, an unset slot, or a type changed since, is read by name. */
#define MAX_SLOTS 12
typedef struct {
    PyObject *const *names;
    int count;
    PyTypeObject *slotted;    /* the type whose offsets these are */
    unsigned int version;     /* its tp_version_tag then */
    Py_ssize_t offsets[MAX_SLOTS];
    PyTypeObject *unslotted; /* the last type found not to be one */
} SlotReader;

/* Whether `type` reads each name from an object slot, and where: 1, learnt; 0 when it does
 * not (remembered, so it is not looked at again); -1 when it cannot tell its changes apart
 * (no version tag: read by name this time). */
static int
learn_slots(SlotReader *reader, PyTypeObject *type)
{
    Py_ssize_t offsets[MAX_SLOTS];
    if (type->tp_getattro != PyObject_GenericGetAttr)
        goto not_slotted;
    for (int i = 0; i < reader->count; i++) {
        PyObject *descriptor = _PyType_Lookup(type, reader->names[i]); /* tags the type */
        if (descriptor == NULL || !Py_IS_TYPE(descriptor, &PyMemberDescr_Type))
            goto not_slotted;
        PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
        if (member->type != SLOT_OBJECT_EX)
            goto not_slotted;
        offsets[i] = member->offset;
    }
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG))
        return -1;
    memcpy(reader->offsets, offsets, sizeof offsets);
    reader->version = type->tp_version_tag;
    Py_XSETREF(reader->slotted, (PyTypeObject *)Py_NewRef(type));
    return 1;
not_slotted:
    Py_XSETREF(reader->unslotted, (PyTypeObject *)Py_NewRef(type));
    return 0;
}

/* The reader's attributes of `object` into `out` (new references); -1 with the getattr's
 * exception. */
static int
read_attributes(SlotReader *reader, PyObject *object, PyObject **out)
{
    PyTypeObject *type = Py_TYPE(object);
    int slotted = type == reader->slotted && type->tp_version_tag == reader->version
                  && PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG);
    if (!slotted && type != reader->unslotted)
        slotted = learn_slots(reader, type) == 1;
    int i = 0;
    if (slotted) {
        for (; i < reader->count; i++) {
            PyObject *value = *(PyObject **)((char *)object + reader->offsets[i]);
            if (value == NULL)
                break; /* unset: getattr raises its AttributeError */
            out[i] = Py_NewRef(value);
        }
    }
    for (; i < reader->count; i++) {
        out[i] = PyObject_GetAttr(object, reader->names[i]);
        if (out[i] == NULL) {
            while (i-- > 0)
                Py_CLEAR(out[i]);
            return -1;
        }
    }
    return 0;
}

/* --- growable bytes ------------------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Bytes;

#if defined(__GNUC__) || defined(__clang__)
#define OUT_OF_LINE __attribute__((noinline))
#else
#define OUT_OF_LINE
#endif

/* Room for `more` bytes, grown by doubling; out of line, so the appends stay small. */
static OUT_OF_LINE int
bytes_grow(Bytes *bytes, Py_ssize_t more)
{
    if (more > PY_SSIZE_T_MAX - bytes->size) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t needed = bytes->size + more;
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

static inline int
bytes_reserve(Bytes *bytes, Py_ssize_t more)
{
    return more <= bytes->capacity - bytes->size ? 0 : bytes_grow(bytes, more);
}

static inline int
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
static inline int
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
static inline int
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

/* --- the event id: BLAKE2b with a 16-byte digest (RFC 7693) of the identity's JSON ---------- */

/* silver._event_id hashes orjson.dumps(identity, default=_bytes_hex). Writing that JSON here and
 * hashing it here gives the same id for a fraction of the cost of building it in Python; an
 * identity holding anything orjson and this writer might write differently is left to it. */

static const uint64_t BLAKE2B_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t BLAKE2B_SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0}};

static inline uint64_t
rotate_right(uint64_t word, int bits)
{
    return (word >> bits) | (word << (64 - bits));
}

/* The mixing function G on v[a], v[b], v[c], v[d] with message words x and y. */
static inline void
blake2b_mix(uint64_t *v, int a, int b, int c, int d, uint64_t x, uint64_t y)
{
    v[a] = v[a] + v[b] + x;
    v[d] = rotate_right(v[d] ^ v[a], 32);
    v[c] = v[c] + v[d];
    v[b] = rotate_right(v[b] ^ v[c], 24);
    v[a] = v[a] + v[b] + y;
    v[d] = rotate_right(v[d] ^ v[a], 16);
    v[c] = v[c] + v[d];
    v[b] = rotate_right(v[b] ^ v[c], 63);
}

/* The compression function F: one 128-byte block into the state `h`; `counted` bytes so far. */
static void
blake2b_compress(uint64_t *h, const uint8_t *block, uint64_t counted, int last)
{
    uint64_t v[16], m[16];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(m, block, sizeof m); /* the words are little-endian, as this machine's */
#else
    for (int i = 0; i < 16; i++) {
        uint64_t word = 0;
        for (int j = 7; j >= 0; j--)
            word = (word << 8) | block[8 * i + j];
        m[i] = word;
    }
#endif
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = BLAKE2B_IV[i];
    }
    v[12] ^= counted; /* the counter's high word stays 0: no message here nears 2^64 bytes */
    if (last)
        v[14] = ~v[14];
    /* Unrolled, the message schedule's indexes are constants and v stays in registers: the
     * digest of a 1.2 KB identity took 0.52-0.66 s per 300k against 0.94-1.07 s. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 12
#endif
    for (int round = 0; round < 12; round++) {
        const uint8_t *s = BLAKE2B_SIGMA[round % 10];
        blake2b_mix(v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
        blake2b_mix(v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
        blake2b_mix(v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
        blake2b_mix(v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
        blake2b_mix(v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
        blake2b_mix(v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
        blake2b_mix(v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
        blake2b_mix(v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
}

enum { DIGEST_SIZE = 16 };

/* The unkeyed 16-byte BLAKE2b digest of `size` bytes at `data`, as 32 lowercase hex digits. */
static void
blake2b_hex(const uint8_t *data, size_t size, char hex[2 * DIGEST_SIZE])
{
    uint64_t h[8];
    memcpy(h, BLAKE2B_IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ DIGEST_SIZE; /* parameter block: digest size, no key, fanout 1, depth 1 */
    uint64_t counted = 0;
    while (size > 128) {
        counted += 128;
        blake2b_compress(h, data, counted, 0);
        data += 128;
        size -= 128;
    }
    uint8_t last[128] = {0};
    if (size)
        memcpy(last, data, size);
    blake2b_compress(h, last, counted + size, 1);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < DIGEST_SIZE; i++) {
        uint8_t byte = (uint8_t)(h[i / 8] >> (8 * (i % 8)));
        hex[2 * i] = digits[byte >> 4];
        hex[2 * i + 1] = digits[byte & 15];
    }
}

/* JSON_LEFT: the value is one orjson (or _bytes_hex) may write differently; left to Python. */
enum { JSON_LEFT = 1 };

/* How many bytes more than one orjson writes for this byte of a string's UTF-8. */
static int
json_escape_width(unsigned char byte)
{
    if (byte == '"' || byte == '\\')
        return 1;
    if (byte >= 0x20)
        return 0;
    return byte == '\b' || byte == '\t' || byte == '\n' || byte == '\f' || byte == '\r' ? 1 : 5;
}

/* UTF-8 `text` as the JSON string orjson writes. */
static int
json_text(Bytes *out, const char *text, Py_ssize_t size)
{
    /* Reserved exactly (a value may be megabytes): its length once escaped, counted first. */
    Py_ssize_t escaped = size + 2;
    for (Py_ssize_t i = 0; i < size; i++)
        escaped += json_escape_width((unsigned char)text[i]);
    if (bytes_reserve(out, escaped) < 0)
        return -1;
    static const char digits[] = "0123456789abcdef";
    char *at = out->data + out->size;
    *at++ = '"';
    if (escaped == size + 2) { /* nothing to escape, as in most values */
        memcpy(at, text, (size_t)size);
        at += size;
        *at++ = '"';
        out->size = at - out->data;
        return 0;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char byte = (unsigned char)text[i];
        if (byte == '"' || byte == '\\') {
            *at++ = '\\';
            *at++ = (char)byte;
        } else if (byte >= 0x20) {
            *at++ = (char)byte;
        } else {
            *at++ = '\\';
            switch (byte) {
            case '\b': *at++ = 'b'; break;
            case '\t': *at++ = 't'; break;
            case '\n': *at++ = 'n'; break;
            case '\f': *at++ = 'f'; break;
            case '\r': *at++ = 'r'; break;
            default:
                memcpy(at, "u00", 3);
                at += 3;
                *at++ = digits[byte >> 4];
                *at++ = digits[byte & 15];
            }
        }
    }
    *at++ = '"';
    out->size = at - out->data;
    return 0;
}

static int
json_string(Bytes *out, PyObject *value)
{
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(value, &size);
    if (text == NULL) { /* surrogates: orjson's error to raise, not ours */
        PyErr_Clear();
        return JSON_LEFT;
    }
    return json_text(out, text, size);
}

#define NUMBER_TEXT 24 /* 20 digits and a sign at most */

/* The decimal text of an exact int within 64 bits (signed or unsigned), as str() writes it:
 * written at the end of `buffer`, its start returned; NULL beyond 64 bits. */
static const char *
integer_text(PyObject *value, char buffer[NUMBER_TEXT], Py_ssize_t *size)
{
    int overflow;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    unsigned long long magnitude;
    if (!overflow) {
        magnitude = number < 0 ? 0ULL - (unsigned long long)number : (unsigned long long)number;
    } else {
        magnitude = PyLong_AsUnsignedLongLong(value);
        if (magnitude == (unsigned long long)-1 && PyErr_Occurred()) { /* beyond 64 bits */
            PyErr_Clear();
            return NULL;
        }
    }
    char *end = buffer + NUMBER_TEXT, *at = end;
    do {
        *--at = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (!overflow && number < 0)
        *--at = '-';
    *size = end - at;
    return at;
}

static int
json_integer(Bytes *out, PyObject *value)
{
    char buffer[NUMBER_TEXT];
    Py_ssize_t size;
    const char *text = integer_text(value, buffer, &size);
    return text == NULL ? JSON_LEFT : bytes_append(out, text, size);
}

/* `value` (None, str, int, bytes as hex) appended as orjson writes it: 0, JSON_LEFT for a value
 * this leaves to Python, or -1 with an exception set. */
static int
json_write(Bytes *out, PyObject *value)
{
    if (value == Py_None)
        return bytes_append(out, "null", 4);
    if (PyUnicode_CheckExact(value))
        return json_string(out, value);
    if (PyLong_CheckExact(value))
        return json_integer(out, value);
    if (!PyBytes_Check(value))
        return JSON_LEFT;
    Py_ssize_t size = PyBytes_GET_SIZE(value);
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(value);
    if (size > (PY_SSIZE_T_MAX - 2) / 2 || bytes_reserve(out, 2 + 2 * size) < 0)
        return -1;
    static const char digits[] = "0123456789abcdef";
    char *at = out->data + out->size;
    *at++ = '"';
    for (Py_ssize_t i = 0; i < size; i++) {
        *at++ = digits[data[i] >> 4];
        *at++ = digits[data[i] & 15];
    }
    *at++ = '"';
    out->size = at - out->data;
    return 0;
}

/* A change's identity, ["row", commit_ts, schema, table, op, partition_id, new, old] with each
 * image [[name, text, binary], ...] or null, written as JSON while the row is added. `left`: it
 * holds a value this leaves to Python, which then gives the id from the event. */
typedef struct {
    Bytes json;
    int left;
} Identity;

/* Punctuation (`text`), then `value` unless NULL. */
static int
identity_write(Identity *identity, const char *text, PyObject *value)
{
    if (identity == NULL || identity->left)
        return 0;
    if (bytes_append(&identity->json, text, (Py_ssize_t)strlen(text)) < 0)
        return -1;
    int written = value == NULL ? 0 : json_write(&identity->json, value);
    if (written == JSON_LEFT)
        identity->left = 1;
    return written < 0 ? -1 : 0;
}

/* Punctuation (`text`), then `string` as a JSON string, quoted as it is: a number's text, or
 * a sink's text (SinkColumn), neither of which holds a byte JSON escapes. */
static int
identity_write_text(Identity *identity, const char *text, const char *string, Py_ssize_t size)
{
    if (identity == NULL || identity->left)
        return 0;
    Py_ssize_t punctuation = (Py_ssize_t)strlen(text);
    if (size > PY_SSIZE_T_MAX - 2 - punctuation
        || bytes_reserve(&identity->json, punctuation + size + 2) < 0)
        return -1;
    char *at = identity->json.data + identity->json.size;
    memcpy(at, text, (size_t)punctuation);
    at += punctuation;
    *at++ = '"';
    memcpy(at, string, (size_t)size);
    at += size;
    *at++ = '"';
    identity->json.size = at - identity->json.data;
    return 0;
}

/* The 32 hex digits of the identity's id, as a str; NULL (nothing set) when it is left. */
static PyObject *
identity_id(const Identity *identity)
{
    if (identity->left)
        return NULL;
    char hex[2 * DIGEST_SIZE];
    blake2b_hex((const uint8_t *)identity->json.data, (size_t)identity->json.size, hex);
    return PyUnicode_FromStringAndSize(hex, sizeof hex);
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

/* has_flag of flags given as a number. */
static int
has_flag_bits(long bits, PyObject *flag)
{
    int overflow = 0;
    long mask = PyLong_CheckExact(flag) ? PyLong_AsLongAndOverflow(flag, &overflow) : -1;
    if (!overflow && mask >= 0)
        return (bits & mask) != 0;
    PyObject *flags = PyLong_FromLong(bits);
    if (flags == NULL)
        return -1;
    int result = has_flag(flags, flag);
    Py_DECREF(flags);
    return result;
}

/* The events.Column attributes read, by position. */
enum { C_TYPE_CODE, C_FLAGS, C_VALUE, C_MYSQL_TYPE, COLUMN_ATTRIBUTES };
static const char *const COLUMN_ATTRIBUTE_NAMES[COLUMN_ATTRIBUTES] = {
    "type_code", "flags", "value", "mysql_type"};
static PyObject *column_attribute_names[COLUMN_ATTRIBUTES];
static SlotReader column_attributes = {column_attribute_names, COLUMN_ATTRIBUTES};

/* The text of an exact int within 64 bits or of an exact float, as str() and repr() write
 * them, without making the str: in `buffer`, or for a float in a block returned in *allocated
 * (PyMem_Free it). NULL for any other value (value_fields makes its text). */
static const char *
number_text(PyObject *value, char buffer[NUMBER_TEXT], Py_ssize_t *size, char **allocated)
{
    if (PyFloat_CheckExact(value)) {
        /* what float.__repr__ writes */
        *allocated = PyOS_double_to_string(PyFloat_AS_DOUBLE(value), 'r', 0, Py_DTSF_ADD_DOT_0,
                                           NULL);
        if (*allocated == NULL)
            PyErr_Clear(); /* value_fields tries again, and raises what repr() raises */
        else
            *size = (Py_ssize_t)strlen(*allocated);
        return *allocated;
    }
    return PyLong_CheckExact(value) ? integer_text(value, buffer, size) : NULL;
}

/* Appends one column of an image, its attributes (borrowed) in `attrs`: to `entries` its
 * identity entry [name, text, binary] and to `identity` its JSON after `opening`, each unless
 * NULL; -1 on failure (the columns may then hold part of it: truncate undoes it). A decoder's
 * column (`given`, else NULL) has its type code and flags as numbers, not in `attrs`, and when
 * attrs[C_VALUE] is NULL its value as text. */
static int
add_fields(ImageBuffers *self, PyObject *name, PyObject *const *attrs, const SinkColumn *given,
           PyObject *handle, PyObject *handle_flag, Identity *identity, const char *opening,
           PyObject *entries)
{
    PyObject *text = NULL, *binary = NULL, *entry = NULL;
    Py_ssize_t index = self->entries, number_size = 0;
    Column *columns = self->columns;
    int is_handle, ok = 0;
    char digits[NUMBER_TEXT], *allocated = NULL;
    int32_t given_code = given ? (int32_t)given->type_code : 0;
    int64_t given_flags = given ? (int64_t)given->flags : 0;
    /* A number's text is written from C; `entries` (the Python-visible add) takes a str. */
    const char *number = NULL;
    if (attrs[C_VALUE] == NULL) {
        number = given->text;
        number_size = given->text_size;
    } else if (entries == NULL) {
        number = number_text(attrs[C_VALUE], digits, &number_size, &allocated);
    }
    if (number == NULL && value_fields(attrs[C_VALUE], &text, &binary) < 0)
        goto done;
    if (column_append_object(&columns[NAME], index, name, "column name", 0) < 0
        || (given ? column_append(&columns[TYPE_CODE], index, &given_code, 4)
                  : column_append_integer(&columns[TYPE_CODE], index, attrs[C_TYPE_CODE],
                                          "an image's type code")) < 0
        || (given ? column_append(&columns[FLAGS], index, &given_flags, 8)
                  : column_append_integer(&columns[FLAGS], index, attrs[C_FLAGS],
                                          "an image's flags")) < 0
        || column_append_object(&columns[MYSQL_TYPE], index, attrs[C_MYSQL_TYPE], "MySQL type",
                                0) < 0
        || (number ? column_append(&columns[TEXT], index, number, number_size)
                   : column_append_object(&columns[TEXT], index, text, "text", 0)) < 0
        || (number ? column_append(&columns[BINARY], index, NULL, 0)
                   : column_append_object(&columns[BINARY], index, binary, "binary", 1)) < 0) {
        /* Some columns have this entry and some not: none keeps it. */
        for (int i = 0; i < COLUMNS; i++)
            column_truncate(&columns[i], index);
        goto done;
    }
    self->entries++;
    is_handle = given ? has_flag_bits(given->flags, handle_flag)
                      : has_flag(attrs[C_FLAGS], handle_flag);
    if (is_handle < 0 || (is_handle && PyList_Append(handle, name) < 0))
        goto done;
    if (identity_write(identity, opening, name) < 0
        || (number ? identity_write_text(identity, ",", number, number_size)
                   : identity_write(identity, ",", text)) < 0
        || identity_write(identity, ",", number ? Py_None : binary) < 0
        || identity_write(identity, "]", NULL) < 0)
        goto done;
    if (entries != NULL) {
        entry = PyList_New(3);
        if (entry == NULL)
            goto done;
        PyList_SET_ITEM(entry, 0, Py_NewRef(name));
        PyList_SET_ITEM(entry, 1, Py_NewRef(text));
        PyList_SET_ITEM(entry, 2, Py_NewRef(binary));
        if (PyList_Append(entries, entry) < 0)
            goto done;
    }
    ok = 1;
done:
    PyMem_Free(allocated);
    Py_XDECREF(text);
    Py_XDECREF(binary);
    Py_XDECREF(entry);
    return ok ? 0 : -1;
}

/* add_fields of an events.Column. */
static int
add_column(ImageBuffers *self, PyObject *name, PyObject *column, PyObject *handle,
           PyObject *handle_flag, Identity *identity, const char *opening, PyObject *entries)
{
    PyObject *attrs[COLUMN_ATTRIBUTES] = {NULL};
    int rc = read_attributes(&column_attributes, column, attrs) < 0
                 ? -1
                 : add_fields(self, name, attrs, NULL, handle, handle_flag, identity, opening,
                              entries);
    for (int i = 0; i < COLUMN_ATTRIBUTES; i++)
        Py_XDECREF(attrs[i]);
    return rc;
}

/* An image of a row: an event's (`dict`: a dict of Columns, or None) or a decoder's
 * (`columns`, when `dict` is NULL; NULL too for None). */
typedef struct {
    PyObject *dict;
    const SinkColumn *columns;
    Py_ssize_t count;
} ImageSource;

static int
image_absent(const ImageSource *image)
{
    return image->dict == Py_None || (image->dict == NULL && image->columns == NULL);
}

/* The image's next column, from `*at` on, appended as add_column appends it: 1; 0 when there
 * is none; -1 on failure. */
static int
image_next(ImageBuffers *self, const ImageSource *image, Py_ssize_t *at, PyObject *handle,
           PyObject *handle_flag, Identity *identity, const char *opening, PyObject *entries)
{
    if (image->dict == NULL) {
        if (*at >= image->count)
            return 0;
        const SinkColumn *column = &image->columns[(*at)++];
        PyObject *attrs[COLUMN_ATTRIBUTES] = {NULL, NULL, column->value, Py_None};
        return add_fields(self, column->name, attrs, column, handle, handle_flag, identity,
                          opening, entries) < 0 ? -1 : 1;
    }
    PyObject *name, *column;
    if (!PyDict_Next(image->dict, at, &name, &column))
        return 0;
    /* Held: str() of a value may run Python code (the dict is not changed by the decoders). */
    Py_INCREF(name);
    Py_INCREF(column);
    int added = add_column(self, name, column, handle, handle_flag, identity, opening, entries);
    Py_DECREF(name);
    Py_DECREF(column);
    return added < 0 ? -1 : 1;
}

/* One image appended (its identity to `identity` and `entries`, as add_column); its handle
 * names, a new reference, or NULL on failure, the columns left as they were after the image's
 * earlier columns (the caller truncates). */
static PyObject *
image_add(ImageBuffers *self, const ImageSource *image, PyObject *handle_flag,
          Identity *identity, PyObject *entries)
{
    if (image->dict != NULL && !PyDict_Check(image->dict)) {
        PyErr_Format(PyExc_TypeError, "image must be a dict, not %.100s",
                     Py_TYPE(image->dict)->tp_name);
        return NULL;
    }
    PyObject *handle = PyList_New(0);
    if (handle == NULL || identity_write(identity, "[", NULL) < 0)
        goto fail;
    Py_ssize_t at = 0;
    const char *opening = "[";
    int next;
    while ((next = image_next(self, image, &at, handle, handle_flag, identity, opening,
                              entries)) == 1)
        opening = ",[";
    if (next < 0 || identity_write(identity, "]", NULL) < 0)
        goto fail;
    return handle;
fail:
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
    PyObject *identity = PyList_New(0);
    if (identity == NULL)
        return NULL;
    ImageSource image = {args[0], NULL, 0};
    PyObject *handle = image_add(self, &image, args[1], NULL, identity);
    PyObject *result = handle == NULL ? NULL : PyTuple_Pack(2, identity, handle);
    Py_DECREF(identity);
    Py_XDECREF(handle);
    return result;
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
    .tp_name = "ticdc_lake.silver._silver_speedups.ImageBuffers",
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
_Static_assert(ATTRIBUTES <= MAX_SLOTS, "a SlotReader holds MAX_SLOTS offsets");
static SlotReader event_attributes = {attribute_names, ATTRIBUTES};
/* The sink's fields (_silver_speedups.h) are these attributes after the images, in order. */
#define SINK_AT(field) (A_##field == A_COMMIT_TS + SINK_##field)
_Static_assert(SINK_AT(COMMIT_TS) && SINK_AT(SCHEMA) && SINK_AT(TABLE) && SINK_AT(OP)
                   && SINK_AT(PARTITION_ID) && SINK_AT(HANDLE_KEY_ONLY) && SINK_AT(TOPIC)
                   && SINK_AT(PARTITION) && SINK_AT(OFFSET) && SINK_AT(INDEX)
                   && A_COMMIT_TS + SINK_FIELDS == ATTRIBUTES,
               "the sink's fields are RowEvent's attributes after the images, in order");

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
    Identity identity;         /* the row's, written to be hashed */
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
    PyMem_Free(self->identity.json.data);
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

/* One image (or None) appended, and written to the row's identity; its handle names, a new
 * reference in *handle; -1 on failure. */
static int
change_image(ChangeBuffers *self, int which, const ImageSource *image, PyObject *handle_flag,
             PyObject **handle)
{
    ImageBuffers *images = self->images[which];
    int absent = image_absent(image);
    if (absent)
        *handle = identity_write(&self->identity, "null", NULL) < 0 ? NULL : PyList_New(0);
    else
        *handle = image_add(images, image, handle_flag, &self->identity, NULL);
    if (*handle == NULL
        || list_append(&self->image_lists[which], self->rows, images->entries, !absent) < 0) {
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

/* One row: its attributes in `attrs` (A_COLUMNS and A_OLD_COLUMNS unused), its images in
 * `images`. 1 added; 0 when its identity holds a value this leaves to Python (JSON_LEFT) and
 * `event_id` is NULL (nothing added); -1 on failure (nothing added). With `event_id`, the id of
 * such a row is event_id(event). */
static int
change_add(ChangeBuffers *self, PyObject *const *attrs, const ImageSource *images,
           PyObject *bronze_batch, PyObject *handle_flag, PyObject *event_id, PyObject *event)
{
    PyObject *handles[2] = {NULL, NULL};
    PyObject *id = NULL;
    Identity *identity = &self->identity;
    int rc = -1;
    identity->json.size = 0;
    identity->left = 0;
    if (identity_write(identity, "[\"row\",", attrs[A_COMMIT_TS]) < 0
        || identity_write(identity, ",", attrs[A_SCHEMA]) < 0
        || identity_write(identity, ",", attrs[A_TABLE]) < 0
        || identity_write(identity, ",", attrs[A_OP]) < 0
        || identity_write(identity, ",", attrs[A_PARTITION_ID]) < 0)
        goto done;
    for (int i = 0; i < 2; i++) {
        if (identity_write(identity, ",", NULL) < 0
            || change_image(self, i, &images[i], handle_flag, &handles[i]) < 0)
            goto done;
    }
    if (identity_write(identity, "]", NULL) < 0)
        goto done;
    if (identity->left && event_id == NULL) {
        rc = 0;
        goto done;
    }
    id = identity->left ? PyObject_CallOneArg(event_id, event) : identity_id(identity);
    if (id == NULL || change_scalars(self, attrs, id, bronze_batch) < 0)
        goto done;
    /* RowEvent.handle_key: the new image's when there is one. */
    if (change_handle(self, handles[image_absent(&images[0]) ? 1 : 0]) < 0)
        goto done;
    self->rows++;
    rc = 1;
done:
    if (rc != 1)
        change_truncate(self, self->rows);
    for (int i = 0; i < 2; i++)
        Py_XDECREF(handles[i]);
    Py_XDECREF(id);
    return rc;
}

/* add(event, bronze_batch, handle_flag, event_id): one RowEvent's row. Its id is hashed here,
 * or given by event_id(event) when its identity holds a value this leaves to Python. */
static PyObject *
ChangeBuffers_add(ChangeBuffers *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "add takes 4 arguments (event, bronze_batch, handle_flag, "
                     "event_id), got %zd", nargs);
        return NULL;
    }
    PyObject *attrs[ATTRIBUTES] = {NULL};
    int rc = -1;
    if (read_attributes(&event_attributes, args[0], attrs) == 0) {
        ImageSource images[2] = {{attrs[A_COLUMNS], NULL, 0}, {attrs[A_OLD_COLUMNS], NULL, 0}};
        rc = change_add(self, attrs, images, args[1], args[2], args[3], args[0]);
    }
    for (int i = 0; i < ATTRIBUTES; i++)
        Py_XDECREF(attrs[i]);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* --- the sink: rows from compiled decoders (_silver_speedups.h) ---------------------------- */

static int
sink_add_row(PyObject *buffers, const SinkRow *row, PyObject *bronze_batch,
             PyObject *handle_flag)
{
    PyObject *attrs[ATTRIBUTES] = {NULL, NULL};
    for (int i = 0; i < SINK_FIELDS; i++)
        attrs[A_COMMIT_TS + i] = row->fields[i];
    ImageSource images[2];
    for (int i = 0; i < 2; i++)
        images[i] = (ImageSource){NULL, row->images[i], row->counts[i]};
    return change_add((ChangeBuffers *)buffers, attrs, images, bronze_batch, handle_flag, NULL,
                      NULL);
}

static Py_ssize_t
sink_rows(PyObject *buffers)
{
    return ((ChangeBuffers *)buffers)->rows;
}

static void
sink_truncate(PyObject *buffers, Py_ssize_t rows)
{
    change_truncate((ChangeBuffers *)buffers, rows);
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
    .tp_name = "ticdc_lake.silver._silver_speedups.ChangeBuffers",
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

static int
intern_names(const char *const *texts, PyObject **names, int count)
{
    for (int i = 0; i < count; i++) {
        names[i] = PyUnicode_InternFromString(texts[i]);
        if (names[i] == NULL)
            return -1;
    }
    return 0;
}

PyMODINIT_FUNC
PyInit__silver_speedups(void)
{
    if (intern_names(COLUMN_ATTRIBUTE_NAMES, column_attribute_names, COLUMN_ATTRIBUTES) < 0
        || intern_names(ATTRIBUTE_NAMES, attribute_names, ATTRIBUTES) < 0
        || PyType_Ready(&ImageBuffersType) < 0
        || PyType_Ready(&ChangeBuffersType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    static SilverSink sink = {SILVER_SINK_VERSION, &ChangeBuffersType, sink_add_row, sink_rows,
                              sink_truncate};
    PyObject *capsule = PyCapsule_New(&sink, SILVER_SINK_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(module, "sink", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "ImageBuffers", (PyObject *)&ImageBuffersType) < 0
        || PyModule_AddObjectRef(module, "ChangeBuffers", (PyObject *)&ChangeBuffersType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
