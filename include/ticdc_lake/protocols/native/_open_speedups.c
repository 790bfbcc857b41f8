/*
 * Compiled fast path of the Open Protocol decoder (PROTOCOLS.md §2): one call splits a Kafka
 * message into its entries, reads each key and value JSON, and builds the row events
 * (events.RowEvent with events.Column images) and resolved events.
 *
 * What costs in Python is building the images: one Column per column, a per-value type check
 * or conversion, the dict. Here Columns are made at C level and the common values (integers,
 * text, DOUBLE, FLOAT rounded to float32, Go-quoted binary strings, base64 TEXT/BLOB) are
 * converted in C. The JSON documents of the shape TiCDC writes are read in place, into those
 * Columns; any other document is parsed by orjson and its dicts read.
 *
 * Correctness rests on never deciding anything the pure-Python decoder would decide otherwise:
 *
 * - the extension produces a value only in the unambiguous success cases; for any other column
 *   value it calls open_protocol.decode_value, and if that raises, it hands the whole image to
 *   open_protocol.decode_image, which returns the reference image or raises;
 * - for anything unusual outside an image (framing errors, a key or value that is not the JSON
 *   it should be, DDL events, claim-check keys, a decompression failure) it returns None;
 * - on None or an exception (which only the Python functions it calls can raise, on input the
 *   reference decoder refuses too) the caller decodes the record again in Python, which gives
 *   the reference events or raises the reference DecodeError. Nothing here has side effects,
 *   and the extension never composes an error message of its own.
 *
 * Safety: every read of the framing is bounds-checked against the buffer, lengths from the
 * message are compared with the bytes left before use, and every object taken from a JSON
 * document is type-checked (exact types) before it is read.
 *
 * Speed: the event classes are slots dataclasses without __post_init__; `configure` checks that
 * and records each field's slot offset, so objects are made with tp_alloc and their slots filled
 * directly instead of running the dataclass __init__ (as _craft_speedups.c does).
 */
#include "_speedups.h"
/* decode_into writes rows straight into silver's ChangeBuffers through their sink, so this
 * module is built against silver's header (pyproject.toml lists it in `depends`). */
#include "../../silver/_silver_speedups.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define BATCH_VERSION 1
#define EVENT_ROW 1
#define EVENT_RESOLVED 3
#define FLAG_BINARY 0x01
#define STACK_TEXT 1024

/* How a type code's JSON value becomes the event model's value; the table is filled by
 * `configure` from open_protocol's own type sets, so the two decoders cannot disagree. */
enum {
    K_UNKNOWN = 0,    /* not a known type code: Python names the problem */
    K_INTEGER = 1,    /* JSON integer, as is */
    K_TEXT_VALUE = 2, /* JSON string, as is (DECIMAL, temporal, JSON, VECTOR) */
    K_STRING = 3,     /* CHAR/VARCHAR: text, or Go-quoted bytes when binary */
    K_BLOB = 4,       /* TEXT/BLOB: padded standard base64; TEXT is UTF-8 inside */
    K_FLOAT = 5,      /* JSON number rounded through float32 */
    K_DOUBLE = 6,     /* JSON number as a float */
    K_NULL = 7,       /* only null */
    K_LAST = K_NULL,
};
static unsigned char value_kind[256];

static SlotClass resolved_class; /* beyond _speedups.h: Column and RowEvent are there */
static PyObject *json_loads;        /* orjson.loads */
static PyObject *py_decode_image;   /* open_protocol.decode_image(raw, index, image) */
static PyObject *py_decode_value;   /* open_protocol.decode_value(code, flags, value) */

/* decode_image's `image` argument ("u", "p", "d") and the default schema/table name. */
static PyObject *s_u, *s_p, *s_d, *s_empty;

/* After a failed attempt whose work Python will redo: drop the exception so the reference
 * decoder can raise its own, but let KeyboardInterrupt and the like through (-1). */
static int
give_up(void)
{
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyErr_Clear();
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Values. Each converter returns a new reference, or NULL when it leaves the value to Python
 * (with or without an exception set; the caller sorts that out with give_up). */

static inline int
hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* `count` hex digits at s[0..count) as a number, or -1. */
static inline long
hex_number(const unsigned char *s, int count)
{
    long value = 0;
    for (int i = 0; i < count; i++) {
        int digit = hex_digit(s[i]);
        if (digit < 0)
            return -1;
        value = value * 16 + digit;
    }
    return value;
}

static inline char *
put_utf8(char *out, long code)
{
    if (code < 0x80) {
        *out++ = (char)code;
    }
    else if (code < 0x800) {
        *out++ = (char)(0xC0 | (code >> 6));
        *out++ = (char)(0x80 | (code & 0x3F));
    }
    else if (code < 0x10000) {
        *out++ = (char)(0xE0 | (code >> 12));
        *out++ = (char)(0x80 | ((code >> 6) & 0x3F));
        *out++ = (char)(0x80 | (code & 0x3F));
    }
    else {
        *out++ = (char)(0xF0 | (code >> 18));
        *out++ = (char)(0x80 | ((code >> 12) & 0x3F));
        *out++ = (char)(0x80 | ((code >> 6) & 0x3F));
        *out++ = (char)(0x80 | (code & 0x3F));
    }
    return out;
}

/* go_quote.go_unquote: the bytes strconv.Quote turned into `text`. Works on the UTF-8 form:
 * escapes are ASCII and `"`/newline cannot occur inside a multi-byte sequence, so plain text is
 * copied byte for byte. Every escape is at least as long as the bytes it stands for, so the
 * output never outgrows the input. Any deviation from the grammar is left to Python. */
static PyObject *
go_unquote(PyObject *text)
{
    Py_ssize_t n;
    const unsigned char *s = (const unsigned char *)PyUnicode_AsUTF8AndSize(text, &n);
    if (s == NULL)
        return NULL; /* lone surrogates: Python's text.encode() fails the same way */
    if (memchr(s, '\\', (size_t)n) == NULL) {
        if (memchr(s, '"', (size_t)n) != NULL || memchr(s, '\n', (size_t)n) != NULL)
            return NULL;
        return PyBytes_FromStringAndSize((const char *)s, n);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        return NULL;
    char *start = PyBytes_AS_STRING(out), *o = start;
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c != '\\') {
            if (c == '"' || c == '\n')
                goto bad;
            *o++ = (char)c;
            i++;
            continue;
        }
        if (i + 1 >= n)
            goto bad;
        unsigned char kind = s[i + 1];
        long code;
        switch (kind) {
        case 'a': *o++ = 0x07; i += 2; break;
        case 'b': *o++ = 0x08; i += 2; break;
        case 'f': *o++ = 0x0C; i += 2; break;
        case 'n': *o++ = 0x0A; i += 2; break;
        case 'r': *o++ = 0x0D; i += 2; break;
        case 't': *o++ = 0x09; i += 2; break;
        case 'v': *o++ = 0x0B; i += 2; break;
        case '\\': *o++ = '\\'; i += 2; break;
        case '"': *o++ = '"'; i += 2; break;
        case 'x':
            if (n - i < 4 || (code = hex_number(s + i + 2, 2)) < 0)
                goto bad;
            *o++ = (char)code;
            i += 4;
            break;
        case '0': case '1': case '2': case '3': /* \ooo up to \377 */
            if (n - i < 4 || s[i + 2] < '0' || s[i + 2] > '7' || s[i + 3] < '0' || s[i + 3] > '7')
                goto bad;
            *o++ = (char)(((kind - '0') << 6) | ((s[i + 2] - '0') << 3) | (s[i + 3] - '0'));
            i += 4;
            break;
        case 'u':
        case 'U': {
            int width = kind == 'u' ? 4 : 8;
            if (n - i < 2 + width || (code = hex_number(s + i + 2, width)) < 0
                || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
                goto bad;
            o = put_utf8(o, code);
            i += 2 + width;
            break;
        }
        default:
            goto bad;
        }
    }
    if (_PyBytes_Resize(&out, o - start) < 0)
        return NULL;
    return out;
bad:
    Py_DECREF(out);
    return NULL;
}

static const signed char base64_value[256] = {
    ['A'] = 0,  ['B'] = 1,  ['C'] = 2,  ['D'] = 3,  ['E'] = 4,  ['F'] = 5,  ['G'] = 6,
    ['H'] = 7,  ['I'] = 8,  ['J'] = 9,  ['K'] = 10, ['L'] = 11, ['M'] = 12, ['N'] = 13,
    ['O'] = 14, ['P'] = 15, ['Q'] = 16, ['R'] = 17, ['S'] = 18, ['T'] = 19, ['U'] = 20,
    ['V'] = 21, ['W'] = 22, ['X'] = 23, ['Y'] = 24, ['Z'] = 25, ['a'] = 26, ['b'] = 27,
    ['c'] = 28, ['d'] = 29, ['e'] = 30, ['f'] = 31, ['g'] = 32, ['h'] = 33, ['i'] = 34,
    ['j'] = 35, ['k'] = 36, ['l'] = 37, ['m'] = 38, ['n'] = 39, ['o'] = 40, ['p'] = 41,
    ['q'] = 42, ['r'] = 43, ['s'] = 44, ['t'] = 45, ['u'] = 46, ['v'] = 47, ['w'] = 48,
    ['x'] = 49, ['y'] = 50, ['z'] = 51, ['0'] = 52, ['1'] = 53, ['2'] = 54, ['3'] = 55,
    ['4'] = 56, ['5'] = 57, ['6'] = 58, ['7'] = 59, ['8'] = 60, ['9'] = 61, ['+'] = 62,
    ['/'] = 63,
};
static unsigned char base64_valid[256]; /* 1 for the 64 alphabet characters (module init) */

/* Length of what strict, padded base64 `s[0..n)` decodes to, or -1 when it is not that:
 * whole quads of the standard alphabet, `=` only as one or two final padding characters.
 * That is what binascii.a2b_base64(strict_mode=True) accepts; like it, the unused low bits of
 * a padded quad are ignored. */
static Py_ssize_t
base64_length(const unsigned char *s, Py_ssize_t n)
{
    if (n % 4 != 0)
        return -1;
    if (n == 0)
        return 0;
    int pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    for (Py_ssize_t i = 0; i < n - pad; i++)
        if (!base64_valid[s[i]])
            return -1;
    return n / 4 * 3 - pad;
}

static void
base64_decode(const unsigned char *s, Py_ssize_t n, unsigned char *out)
{
    Py_ssize_t full = n;
    int pad = 0;
    if (n && s[n - 1] == '=') {
        pad = s[n - 2] == '=' ? 2 : 1;
        full = n - 4;
    }
    Py_ssize_t i = 0;
    for (; i < full; i += 4) {
        uint32_t quad = ((uint32_t)base64_value[s[i]] << 18) | ((uint32_t)base64_value[s[i + 1]] << 12)
                        | ((uint32_t)base64_value[s[i + 2]] << 6) | (uint32_t)base64_value[s[i + 3]];
        *out++ = (unsigned char)(quad >> 16);
        *out++ = (unsigned char)(quad >> 8);
        *out++ = (unsigned char)quad;
    }
    if (pad) {
        uint32_t quad = ((uint32_t)base64_value[s[i]] << 18) | ((uint32_t)base64_value[s[i + 1]] << 12);
        if (pad == 1)
            quad |= (uint32_t)base64_value[s[i + 2]] << 6;
        *out++ = (unsigned char)(quad >> 16);
        if (pad == 1)
            *out++ = (unsigned char)(quad >> 8);
    }
}

/* TEXT/BLOB: base64 of the raw bytes; bytes when binary, else the UTF-8 text they hold. */
static PyObject *
blob_value(PyObject *text, long flags)
{
    if (!PyUnicode_IS_ASCII(text))
        return NULL; /* binascii refuses non-ASCII str; Python raises the error */
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t size = base64_length(s, n);
    if (size < 0)
        return NULL;
    if (flags & FLAG_BINARY) {
        PyObject *out = PyBytes_FromStringAndSize(NULL, size);
        if (out != NULL)
            base64_decode(s, n, (unsigned char *)PyBytes_AS_STRING(out));
        return out;
    }
    unsigned char stack[STACK_TEXT];
    unsigned char *raw = size <= STACK_TEXT ? stack : PyMem_Malloc((size_t)size);
    if (raw == NULL)
        return PyErr_NoMemory();
    base64_decode(s, n, raw);
    PyObject *out = PyUnicode_DecodeUTF8((const char *)raw, size, NULL);
    if (raw != stack)
        PyMem_Free(raw);
    return out; /* NULL (UnicodeDecodeError) when not UTF-8: Python names the problem */
}

/* FLOAT: the float32 nearest to the number, as mysql.float32 (struct "<f") rounds it; a finite
 * value beyond the float32 range overflows there, so it is left to Python to raise. */
static PyObject *
float32_value(double value)
{
    float narrowed = (float)value;
    if (isinf(narrowed) && !isinf(value))
        return NULL;
    return PyFloat_FromDouble((double)narrowed);
}

/* The event-model value of `value` for a current-format column, or NULL to let Python decide.
 * Mirrors decode_image's pass-through test and decode_value's conversions for exact types. */
static PyObject *
column_value(long code, long flags, PyObject *value)
{
    if (code < 0 || code > 255)
        return NULL;
    int kind = value_kind[code];
    if (value == Py_None)
        return kind == K_UNKNOWN ? NULL : Py_NewRef(Py_None);
    switch (kind) {
    case K_INTEGER:
        return PyLong_CheckExact(value) ? Py_NewRef(value) : NULL;
    case K_TEXT_VALUE:
        return PyUnicode_CheckExact(value) ? Py_NewRef(value) : NULL;
    case K_STRING:
        if (!PyUnicode_CheckExact(value))
            return NULL;
        return flags & FLAG_BINARY ? go_unquote(value) : Py_NewRef(value);
    case K_BLOB:
        return PyUnicode_CheckExact(value) ? blob_value(value, flags) : NULL;
    case K_DOUBLE:
        if (PyFloat_CheckExact(value))
            return Py_NewRef(value);
        if (PyLong_CheckExact(value)) {
            double converted = PyLong_AsDouble(value);
            return converted == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(converted);
        }
        return NULL;
    case K_FLOAT:
        if (PyFloat_CheckExact(value))
            return float32_value(PyFloat_AS_DOUBLE(value));
        if (PyLong_CheckExact(value)) {
            double converted = PyLong_AsDouble(value);
            return converted == -1.0 && PyErr_Occurred() ? NULL : float32_value(converted);
        }
        return NULL;
    default: /* K_NULL with a value, K_UNKNOWN */
        return NULL;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Images. */

/* The values (borrowed; NULL where absent) of the keys `names` in a JSON object, by one walk
 * over it: cheaper than a lookup per key, each of which ends in a string compare since orjson's
 * key objects are not ours. JSON object keys are exact str; a non-ASCII one matches no name. */
typedef struct {
    const char *text;
    Py_ssize_t length;
} Name;

static inline void
pick(PyObject *object, const Name *names, int count, PyObject **out)
{
    for (int i = 0; i < count; i++)
        out[i] = NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(object, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_COMPACT_ASCII(key))
            continue;
        Py_ssize_t length = PyUnicode_GET_LENGTH(key);
        const char *text = (const char *)PyUnicode_DATA(key);
        for (int i = 0; i < count; i++) {
            if (names[i].length == length && memcmp(names[i].text, text, (size_t)length) == 0) {
                out[i] = value;
                break;
            }
        }
    }
}

#define NAME(literal) {literal, sizeof literal - 1}
enum { C_T, C_F, C_V, C_COUNT };
static const Name column_names[C_COUNT] = {NAME("t"), NAME("f"), NAME("v")};
enum { B_D, B_U, B_P, B_COUNT };
static const Name body_names[B_COUNT] = {NAME("d"), NAME("u"), NAME("p")};
enum { M_TS, M_T, M_SCM, M_TBL, M_PTN, M_OHK, M_CCL, M_COUNT };
static const Name meta_names[M_COUNT] = {NAME("ts"),  NAME("t"),   NAME("scm"), NAME("tbl"),
                                          NAME("ptn"), NAME("ohk"), NAME("ccl")};

/* The keys of a column object as orjson makes them: its key cache hands out the same str
 * object for "t" (and "f", "v") in every document, so after the first column a key is known by
 * a pointer compare. Starts as our own interned strings; any equal str works, only slower. */
static PyObject *column_keys[C_COUNT];

/* `t`, `f` and `v` of a column object (borrowed; NULL where absent), by one walk over it, which
 * costs less than three lookups. A key matched by its text becomes the one compared by pointer
 * from then on. */
static inline void
read_column(PyObject *column, PyObject **fields)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    fields[C_T] = fields[C_F] = fields[C_V] = NULL;
    while (PyDict_Next(column, &pos, &key, &value)) {
        if (key == column_keys[C_T]) {
            fields[C_T] = value;
        }
        else if (key == column_keys[C_F]) {
            fields[C_F] = value;
        }
        else if (key == column_keys[C_V]) {
            fields[C_V] = value;
        }
        else if (PyUnicode_CheckExact(key) && PyUnicode_IS_COMPACT_ASCII(key)
                 && PyUnicode_GET_LENGTH(key) == 1) {
            char text = *(const char *)PyUnicode_DATA(key);
            int field = text == 't' ? C_T : text == 'f' ? C_F : text == 'v' ? C_V : -1;
            if (field >= 0) {
                fields[field] = value;
                Py_INCREF(key);
                Py_SETREF(column_keys[field], key);
            }
        }
    }
}

/* An exact int that fits a C long, read into *out; 0 when it is anything else. */
static inline int
small_int(PyObject *obj, long *out)
{
    if (!PyLong_CheckExact(obj))
        return 0;
    int overflow;
    *out = PyLong_AsLongAndOverflow(obj, &overflow);
    return !overflow;
}

/* open_protocol.decode_image(raw, index, image): column name → Column. Current-format columns
 * with exact-int `t` and `f` are built here; anything else (no `f`, a column that is not an
 * object, a value decode_value refuses) sends the whole image to the Python function, which
 * returns the reference image or raises the reference error. */
static PyObject *
decode_image(PyObject *raw, PyObject *index, PyObject *which)
{
    PyObject *out = NULL;
    if (!PyDict_CheckExact(raw))
        goto python;
    out = new_image_dict(PyDict_GET_SIZE(raw));
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *name, *column;
    while (PyDict_Next(raw, &pos, &name, &column)) {
        if (!PyDict_CheckExact(column))
            goto python;
        PyObject *fields[C_COUNT];
        read_column(column, fields);
        PyObject *code = fields[C_T], *flags = fields[C_F], *value = fields[C_V];
        long code_number, flag_bits;
        if (code == NULL || flags == NULL || value == NULL || !small_int(code, &code_number)
            || !small_int(flags, &flag_bits))
            goto python;
        /* Hold the column's parts: decode_value below is Python code. */
        Py_INCREF(code);
        Py_INCREF(flags);
        Py_INCREF(value);
        PyObject *converted = column_value(code_number, flag_bits, value);
        if (converted == NULL) {
            if (give_up() == 0)
                converted = PyObject_CallFunctionObjArgs(py_decode_value, code, flags, value,
                                                         NULL);
        }
        PyObject *built = converted ? new_column(code, flags, converted, Py_None) : NULL;
        Py_DECREF(code);
        Py_DECREF(flags);
        Py_DECREF(value);
        if (built == NULL) {
            if (give_up() < 0)
                goto error;
            goto python;
        }
        int rc = PyDict_SetItem(out, name, built);
        Py_DECREF(built);
        if (rc < 0)
            goto error;
    }
    return out;
python:
    Py_XDECREF(out);
    return PyObject_CallFunctionObjArgs(py_decode_image, raw, index, which, NULL);
error:
    Py_XDECREF(out);
    return NULL;
}

/* Do two images hold the same column names (dict.keys() equality)? -1 on error. */
static int
same_names(PyObject *a, PyObject *b)
{
    if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b))
        return 0;
    Py_ssize_t pos = 0;
    PyObject *name, *column;
    while (PyDict_Next(a, &pos, &name, &column)) {
        int present = PyDict_Contains(b, name);
        if (present <= 0)
            return present;
    }
    return 1;
}

/* Makes an image's Columns from what the value document holds for it (`which`: "u", "p", "d"). */
typedef PyObject *(*ImageMaker)(PyObject *raw, PyObject *index, PyObject *which);

/* open_protocol.decode_row_value: op and images of `{"u"}`, `{"u","p"}` or `{"d"}`, given the
 * document's `d`, `u` and `p` (NULL where absent). 1 done, 0 leave the message to Python,
 * -1 error. */
static int
row_images(PyObject *deleted, PyObject *new, PyObject *previous, ImageMaker make_image,
           PyObject *index, PyObject **op, PyObject **columns, PyObject **old_columns)
{
    *columns = *old_columns = NULL;
    /* Hold the images: decode_image may run Python code. */
    Py_XINCREF(deleted);
    Py_XINCREF(new);
    Py_XINCREF(previous);
    int rc = 0;
    if (deleted != NULL && deleted != Py_None) {
        if (new != NULL || previous != NULL)
            goto done; /* `d` mixed with `u`/`p` */
        *op = op_delete;
        *columns = Py_NewRef(Py_None);
        *old_columns = make_image(deleted, index, s_d);
        rc = *old_columns ? 1 : -1;
        goto done;
    }
    if (new == NULL || new == Py_None)
        goto done;
    *columns = make_image(new, index, s_u);
    if (*columns == NULL) {
        rc = -1;
        goto done;
    }
    if (previous == NULL || previous == Py_None) {
        *op = op_insert;
        *old_columns = Py_NewRef(Py_None);
        rc = 1;
        goto done;
    }
    *op = op_update;
    *old_columns = make_image(previous, index, s_p);
    if (*old_columns == NULL) {
        rc = -1;
        goto done;
    }
    /* Only the changed columns were sent: the others have their `u` values. */
    int same = same_names(*old_columns, *columns);
    if (same == 0) {
        PyObject *merged = PyDict_Copy(*columns);
        if (merged == NULL || PyDict_Update(merged, *old_columns) < 0) {
            Py_XDECREF(merged);
            same = -1;
        }
        else {
            Py_SETREF(*old_columns, merged);
        }
    }
    rc = same < 0 ? -1 : 1;
done:
    Py_XDECREF(deleted);
    Py_XDECREF(new);
    Py_XDECREF(previous);
    if (rc <= 0) {
        Py_CLEAR(*columns);
        Py_CLEAR(*old_columns);
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Value documents read in place. orjson makes a dict per column, and its keys, which the image
 * builder walks once and drops: a quarter of a row event's decode. This reader takes the shape
 * TiCDC writes, {"u"|"p"|"d": {name: {"t", "h", "f", "v"}}}, straight into Columns. It reads
 * only JSON it reads as orjson does and declines (0) everything else: another key, a repeated
 * one at the top, a nested value, a number orjson would make a float of, a malformed escape or
 * UTF-8. A declined document is read by orjson, as before. */

typedef struct {
    const unsigned char *at, *end;
} Text;

static inline void
skip_space(Text *text)
{
    while (text->at < text->end && *text->at <= ' ' /* most often a token: one compare */
           && (*text->at == ' ' || *text->at == '\t' || *text->at == '\n' || *text->at == '\r'))
        text->at++;
}

/* 1 and past it when the next byte after spaces is `c`; else 0. */
static inline int
take(Text *text, unsigned char c)
{
    skip_space(text);
    if (text->at < text->end && *text->at == c) {
        text->at++;
        return 1;
    }
    return 0;
}

/* 1 and past it when `word` comes next; else 0. */
static inline int
take_word(Text *text, const char *word, Py_ssize_t length)
{
    if (text->end - text->at < length || memcmp(text->at, word, (size_t)length) != 0)
        return 0;
    text->at += length;
    return 1;
}

/* The bytes a JSON string's scan stops at: its end, an escape, a raw control byte. */
#define ONES_8 1, 1, 1, 1, 1, 1, 1, 1
static const unsigned char string_stop[256] = {ONES_8, ONES_8, ONES_8, ONES_8, /* 0x00-0x1f */
                                               ['"'] = 1, ['\\'] = 1};
#undef ONES_8

/* A string next: its bytes between the quotes, escapes as they are; *escaped when it has any.
 * 0 when no well-formed string comes next (a raw control character is not JSON). */
static int
string_span(Text *text, const unsigned char **start, Py_ssize_t *length, int *escaped)
{
    if (!take(text, '"'))
        return 0;
    *escaped = 0;
    for (const unsigned char *at = text->at; at < text->end; at++) {
        if (!string_stop[*at]) /* most bytes: one look-up */
            continue;
        if (*at == '"') {
            *start = text->at;
            *length = at - text->at;
            text->at = at + 1;
            return 1;
        }
        if (*at < 0x20)
            return 0;
        if (*at == '\\') {
            if (text->end - at < 2)
                return 0;
            *escaped = 1;
            at++; /* the escaped byte is no terminator */
        }
    }
    return 0;
}

/* The JSON escapes of s[0..n) decoded into `out`, which has room for n bytes (no escape is
 * shorter than the UTF-8 it stands for); the output's length, or -1 for a malformed escape or a
 * lone surrogate, which orjson refuses. */
static Py_ssize_t
unescape(const unsigned char *s, Py_ssize_t n, char *out)
{
    char *o = out;
    Py_ssize_t i = 0;
    while (i < n) {
        if (s[i] != '\\') {
            *o++ = (char)s[i++];
            continue;
        }
        if (n - i < 2)
            return -1;
        long code;
        switch (s[i + 1]) {
        case '"': *o++ = '"'; i += 2; break;
        case '\\': *o++ = '\\'; i += 2; break;
        case '/': *o++ = '/'; i += 2; break;
        case 'b': *o++ = 0x08; i += 2; break;
        case 'f': *o++ = 0x0C; i += 2; break;
        case 'n': *o++ = 0x0A; i += 2; break;
        case 'r': *o++ = 0x0D; i += 2; break;
        case 't': *o++ = 0x09; i += 2; break;
        case 'u':
            if (n - i < 6 || (code = hex_number(s + i + 2, 4)) < 0 || (code >= 0xDC00 && code <= 0xDFFF))
                return -1;
            i += 6;
            if (code >= 0xD800 && code <= 0xDBFF) { /* a pair's high half: its low half next */
                long low;
                if (n - i < 6 || s[i] != '\\' || s[i + 1] != 'u'
                    || (low = hex_number(s + i + 2, 4)) < 0xDC00 || low > 0xDFFF)
                    return -1;
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                i += 6;
            }
            o = put_utf8(o, code);
            break;
        default:
            return -1;
        }
    }
    return o - out;
}

/* The str of a string's bytes (see string_span); NULL when they are not valid UTF-8. */
static PyObject *
string_value(const unsigned char *s, Py_ssize_t n, int escaped)
{
    if (!escaped)
        return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    char stack[STACK_TEXT];
    char *raw = n <= STACK_TEXT ? stack : PyMem_Malloc((size_t)n);
    if (raw == NULL)
        return PyErr_NoMemory();
    Py_ssize_t size = unescape(s, n, raw);
    PyObject *out = size < 0 ? NULL : PyUnicode_DecodeUTF8(raw, size, NULL);
    if (raw != stack)
        PyMem_Free(raw);
    return out;
}

/* Names (of schemas, tables, columns) repeat from one row to the next: a small table of the
 * names read lately hands out the same str again, its hash computed already, while its bytes
 * come again. Only ASCII names are kept, so a name's bytes are its characters. */
#define RECENT_SLOTS 512
#define RECENT_LONGEST 64
static PyObject *recent_strings[RECENT_SLOTS];

/* FNV-1a of a name's bytes. */
static inline uint32_t
name_hash(const unsigned char *s, Py_ssize_t n)
{
    uint32_t hash = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++)
        hash = (hash ^ s[i]) * 16777619u;
    return hash;
}

/* recent_string of a name whose name_hash is `hash` (any value when escaped or long). */
static PyObject *
recent_string_hashed(const unsigned char *s, Py_ssize_t n, int escaped, uint32_t hash)
{
    if (escaped || n > RECENT_LONGEST)
        return string_value(s, n, escaped);
    PyObject **slot = &recent_strings[hash % RECENT_SLOTS];
    if (*slot != NULL && PyUnicode_GET_LENGTH(*slot) == n
        && memcmp(PyUnicode_DATA(*slot), s, (size_t)n) == 0)
        return Py_NewRef(*slot);
    PyObject *name = string_value(s, n, 0);
    if (name != NULL && PyUnicode_IS_COMPACT_ASCII(name))
        Py_XSETREF(*slot, Py_NewRef(name));
    return name;
}

static PyObject *
recent_string(const unsigned char *s, Py_ssize_t n, int escaped)
{
    return recent_string_hashed(s, n, escaped, escaped ? 0 : name_hash(s, n));
}

static inline const unsigned char *
skip_digits(const unsigned char *at, const unsigned char *end)
{
    while (at < end && *at >= '0' && *at <= '9')
        at++;
    return at;
}

static inline const unsigned char *
skip_zeros(const unsigned char *at, const unsigned char *end)
{
    while (at < end && *at == '0')
        at++;
    return at;
}

/* The end of the JSON number at `start` (NULL when there is none: orjson's grammar, no leading
 * zeros), and in *integer_end the end of its integer part. */
static const unsigned char *
number_end(const unsigned char *start, const unsigned char *end,
           const unsigned char **integer_end)
{
    const unsigned char *digits = start < end && *start == '-' ? start + 1 : start;
    const unsigned char *at = skip_digits(digits, end);
    if (at == digits || (at - digits > 1 && *digits == '0'))
        return NULL;
    *integer_end = at;
    if (at < end && *at == '.') {
        const unsigned char *fraction = at + 1;
        if ((at = skip_digits(fraction, end)) == fraction)
            return NULL;
    }
    if (at < end && (*at == 'e' || *at == 'E')) {
        const unsigned char *exponent = at + 1;
        if (exponent < end && (*exponent == '+' || *exponent == '-'))
            exponent++;
        if ((at = skip_digits(exponent, end)) == exponent)
            return NULL;
    }
    return at;
}

/* The magnitude of the digits [digits, end), or 0 beyond 64 bits. */
static int
digits_value(const unsigned char *digits, const unsigned char *end, uint64_t *value)
{
    *value = 0;
    for (const unsigned char *d = digits; d < end; d++) {
        unsigned digit = *d - '0';
        if (*value > (UINT64_MAX - digit) / 10)
            return 0;
        *value = *value * 10 + digit;
    }
    return 1;
}

/* The JSON integer [start, end) (an optional minus, then digits) as orjson reads it: 1 with
 * *number set, or with *above set when it lies beyond int64 within 64 bits (*magnitude holds
 * it); 0 beyond 64 bits, or below int64 (orjson makes those floats). */
static int
integer_of(const unsigned char *start, const unsigned char *end, long long *number,
           uint64_t *magnitude, int *above)
{
    int negative = *start == '-';
    if (!digits_value(start + negative, end, magnitude)
        || (negative && *magnitude > (uint64_t)INT64_MAX + 1))
        return 0;
    *above = !negative && *magnitude > (uint64_t)INT64_MAX;
    if (negative)
        *number = *magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(long long)*magnitude;
    else
        *number = *above ? 0 : (long long)*magnitude;
    return 1;
}

/* A number next, as orjson reads it: an int when it has neither fraction nor exponent (NULL
 * beyond 64 bits, which orjson makes a float), else the nearest float (NULL when infinite). */
static PyObject *
number_value(Text *text)
{
    const unsigned char *start = text->at, *integer_end;
    const unsigned char *at = number_end(start, text->end, &integer_end);
    if (at == NULL)
        return NULL;
    text->at = at;
    if (at == integer_end) {
        long long number;
        uint64_t magnitude;
        int above;
        if (!integer_of(start, at, &number, &magnitude, &above))
            return NULL;
        return above ? PyLong_FromUnsignedLongLong(magnitude) : PyLong_FromLongLong(number);
    }
    char number[64];
    Py_ssize_t length = at - start;
    if (length >= (Py_ssize_t)sizeof number)
        return NULL;
    memcpy(number, start, (size_t)length);
    number[length] = '\0';
    char *stop;
    double value = PyOS_string_to_double(number, &stop, NULL);
    if (stop != number + length || (value == -1.0 && PyErr_Occurred()) || !isfinite(value))
        return NULL;
    return PyFloat_FromDouble(value);
}

typedef PyObject *(*StringReader)(const unsigned char *s, Py_ssize_t n, int escaped);

/* A string (made by `read_string`), number, true, false or null next; NULL for anything else
 * (an array, an object). */
static PyObject *
scalar_value(Text *text, StringReader read_string)
{
    skip_space(text);
    if (text->at >= text->end)
        return NULL;
    unsigned char c = *text->at;
    if (c == '"') {
        const unsigned char *start;
        Py_ssize_t length;
        int escaped;
        return string_span(text, &start, &length, &escaped) ? read_string(start, length, escaped)
                                                            : NULL;
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return number_value(text);
    if (take_word(text, "null", 4))
        return Py_NewRef(Py_None);
    if (take_word(text, "true", 4))
        return Py_NewRef(Py_True);
    if (take_word(text, "false", 5))
        return Py_NewRef(Py_False);
    return NULL;
}

/* A one-byte key and its colon next: the byte, or 0. */
static int
short_key(Text *text)
{
    skip_space(text);
    const unsigned char *at = text->at;
    if (text->end - at >= 4 && at[0] == '"' && at[2] == '"' && at[1] >= 0x20 && at[1] != '\\'
        && at[1] != '"' && at[3] == ':') { /* "t": as TiCDC writes it */
        text->at += 4;
        return at[1];
    }
    const unsigned char *key;
    Py_ssize_t length;
    int escaped;
    if (!string_span(text, &key, &length, &escaped) || escaped || length != 1 || !take(text, ':'))
        return 0;
    return *key;
}

/* A column object next: its `t` and `f` and the event model's value (new references in
 * `out`, indexed C_T, C_F, C_V), as decode_image makes a Column of it; 0 to decline. */
static int
column_fields_in_place(Text *text, PyObject **out)
{
    if (!take(text, '{'))
        return 0;
    PyObject *fields[C_COUNT] = {NULL, NULL, NULL};
    int found = 0;
    if (!take(text, '}')) {
        do {
            int key = short_key(text);
            int field = key == 't' ? C_T : key == 'f' ? C_F : key == 'v' ? C_V : -1;
            if (field < 0 && key != 'h') /* `h` (handle key) is in the flags too */
                goto done;
            PyObject *value = scalar_value(text, string_value);
            if (value == NULL)
                goto done;
            if (field < 0)
                Py_DECREF(value);
            else
                Py_XSETREF(fields[field], value); /* a repeated key: the last, as in a dict */
        } while (take(text, ','));
        if (!take(text, '}'))
            goto done;
    }
    long code, flags;
    if (fields[C_T] == NULL || fields[C_F] == NULL || fields[C_V] == NULL
        || !small_int(fields[C_T], &code) || !small_int(fields[C_F], &flags))
        goto done;
    PyObject *converted = column_value(code, flags, fields[C_V]);
    if (converted != NULL) {
        out[C_T] = Py_NewRef(fields[C_T]);
        out[C_F] = Py_NewRef(fields[C_F]);
        out[C_V] = converted;
        found = 1;
    }
done:
    for (int i = 0; i < C_COUNT; i++)
        Py_XDECREF(fields[i]);
    return found;
}

/* A column object next, as a Column (what decode_image makes of it); NULL to decline. */
static PyObject *
column_in_place(Text *text)
{
    PyObject *fields[C_COUNT];
    if (!column_fields_in_place(text, fields))
        return NULL;
    PyObject *column = new_column(fields[C_T], fields[C_F], fields[C_V], Py_None);
    Py_DECREF(fields[C_T]);
    Py_DECREF(fields[C_F]);
    return column;
}

/* An image object next, as decode_image's dict; NULL to decline. A repeated name keeps its
 * first place and its last column, as orjson's dict does. */
static PyObject *
image_in_place(Text *text)
{
    if (!take(text, '{'))
        return NULL;
    PyObject *image = PyDict_New();
    if (image == NULL || take(text, '}'))
        return image;
    do {
        const unsigned char *start;
        Py_ssize_t length;
        int escaped;
        if (!string_span(text, &start, &length, &escaped) || !take(text, ':'))
            goto decline;
        PyObject *name = recent_string(start, length, escaped);
        PyObject *column = name ? column_in_place(text) : NULL;
        int rc = column ? PyDict_SetItem(image, name, column) : -1;
        Py_XDECREF(name);
        Py_XDECREF(column);
        if (rc < 0)
            goto decline;
    } while (take(text, ','));
    if (take(text, '}'))
        return image;
decline:
    Py_DECREF(image);
    return NULL;
}

/* An image made already: row_images' ImageMaker for documents read in place. */
static PyObject *
made_already(PyObject *image, PyObject *index, PyObject *which)
{
    return Py_NewRef(image);
}

/* decode_row_value of the value document in buf[0..size), read in place; 0 when the reader
 * declines it (orjson reads it then) or row_images leaves it to Python. */
static int
row_value_in_place(const uint8_t *buf, Py_ssize_t size, PyObject *index, PyObject **op,
                   PyObject **columns, PyObject **old_columns)
{
    Text text = {buf, buf + size};
    PyObject *parts[B_COUNT] = {NULL, NULL, NULL};
    int rc = 0;
    if (!take(&text, '{'))
        goto done;
    if (!take(&text, '}')) {
        do {
            int key = short_key(&text);
            int part = key == 'd' ? B_D : key == 'u' ? B_U : key == 'p' ? B_P : -1;
            if (part < 0 || parts[part] != NULL)
                goto done;
            skip_space(&text);
            parts[part] = take_word(&text, "null", 4) ? Py_NewRef(Py_None) : image_in_place(&text);
            if (parts[part] == NULL)
                goto done;
        } while (take(&text, ','));
        if (!take(&text, '}'))
            goto done;
    }
    skip_space(&text);
    if (text.at == text.end)
        rc = row_images(parts[B_D], parts[B_U], parts[B_P], made_already, index, op, columns,
                        old_columns);
done:
    for (int i = 0; i < B_COUNT; i++)
        Py_XDECREF(parts[i]);
    return rc == 0 ? give_up() : rc;
}

/* The key document in buf[0..size) read in place into `fields` (new references; NULL where
 * absent), the values pick finds in orjson's dict. 1 read; 0 declined (another key, a
 * nested value, what the value reader declines), for orjson to read; -1 error. */
static int
key_in_place(const uint8_t *buf, Py_ssize_t size, PyObject **fields)
{
    Text text = {buf, buf + size};
    for (int i = 0; i < M_COUNT; i++)
        fields[i] = NULL;
    if (!take(&text, '{'))
        goto decline;
    if (!take(&text, '}')) {
        do {
            const unsigned char *key;
            Py_ssize_t length;
            int escaped, field = -1;
            if (!string_span(&text, &key, &length, &escaped) || escaped || !take(&text, ':'))
                goto decline;
            for (int i = 0; i < M_COUNT && field < 0; i++)
                if (meta_names[i].length == length
                    && memcmp(meta_names[i].text, key, (size_t)length) == 0)
                    field = i;
            /* schema and table names repeat: read as recent strings */
            int named = field == M_SCM || field == M_TBL;
            PyObject *value =
                field >= 0 ? scalar_value(&text, named ? recent_string : string_value) : NULL;
            if (value == NULL)
                goto decline;
            Py_XSETREF(fields[field], value); /* a repeated key: the last, as in a dict */
        } while (take(&text, ','));
        if (!take(&text, '}'))
            goto decline;
    }
    skip_space(&text);
    if (text.at == text.end)
        return 1;
decline:
    for (int i = 0; i < M_COUNT; i++)
        Py_CLEAR(fields[i]);
    return give_up();
}

/* decode_row_value of an orjson document. */
static int
decode_row_value(PyObject *body, PyObject *index, PyObject **op, PyObject **columns,
                 PyObject **old_columns)
{
    PyObject *parts[B_COUNT];
    pick(body, body_names, B_COUNT, parts);
    return row_images(parts[B_D], parts[B_U], parts[B_P], decode_image, index, op, columns,
                      old_columns);
}

/* ---------------------------------------------------------------------------------------------
 * Entries. */

static inline uint64_t
read_u64(const uint8_t *p)
{
    uint64_t value = 0;
    for (int i = 0; i < 8; i++) /* big-endian whatever the host */
        value = (value << 8) | p[i];
    return value;
}

typedef struct {
    const uint8_t *key, *value;
    Py_ssize_t key_end, value_end, key_at, value_at;
} Entries;

/* The next entry's [start, end) in key and value; 0 when there is none, -1 when broken. */
static int
next_entry(Entries *e, Py_ssize_t *key_start, Py_ssize_t *value_start)
{
    if (e->key_at >= e->key_end)
        return 0;
    if (e->key_end - e->key_at < 8 || e->value_end - e->value_at < 8)
        return -1;
    uint64_t key_length = read_u64(e->key + e->key_at);
    uint64_t value_length = read_u64(e->value + e->value_at);
    *key_start = e->key_at + 8;
    *value_start = e->value_at + 8;
    if (key_length > (uint64_t)(e->key_end - *key_start)
        || value_length > (uint64_t)(e->value_end - *value_start))
        return -1;
    e->key_at = *key_start + (Py_ssize_t)key_length;
    e->value_at = *value_start + (Py_ssize_t)value_length;
    return 1;
}

/* orjson.loads of buf[start:end] (decompressed first when `decompress` is given); a dict, or
 * NULL to leave the message to Python (nothing set) or on a real error (exception set). */
static PyObject *
load_object(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, PyObject *decompress)
{
    PyObject *data = PyBytes_FromStringAndSize((const char *)buf + start, end - start);
    if (data == NULL)
        return NULL;
    if (decompress != Py_None) {
        Py_SETREF(data, PyObject_CallOneArg(decompress, data));
        if (data == NULL) {
            give_up();
            return NULL;
        }
    }
    PyObject *document = PyObject_CallOneArg(json_loads, data);
    Py_DECREF(data);
    if (document == NULL) {
        give_up();
        return NULL;
    }
    if (!PyDict_CheckExact(document)) {
        Py_DECREF(document);
        return NULL;
    }
    return document;
}

/* One row entry (`fields` are the key's, picked by decode_message); 1 built, 0 leave the
 * message to Python, -1 error. */
static int
row_event(PyObject *const *fields, const uint8_t *value, Py_ssize_t start, Py_ssize_t end,
          PyObject *decompress, PyObject *topic, PyObject *partition, PyObject *offset,
          Py_ssize_t index, PyObject **event_out)
{
    if (fields[M_CCL] != NULL)
        return 0; /* claim-check: Python fetches the full event */
    PyObject *schema = fields[M_SCM] ? fields[M_SCM] : s_empty;
    PyObject *table = fields[M_TBL] ? fields[M_TBL] : s_empty;
    PyObject *partition_id = fields[M_PTN] ? fields[M_PTN] : Py_None;
    if (!PyUnicode_CheckExact(schema) || !PyUnicode_CheckExact(table)
        || (partition_id != Py_None && !PyLong_CheckExact(partition_id)) || start == end)
        return 0;
    /* Keep what came from the key alive: decode_image may run Python code. */
    PyObject *ts = Py_NewRef(fields[M_TS]);
    Py_INCREF(schema);
    Py_INCREF(table);
    Py_INCREF(partition_id);
    PyObject *handle_key_only = Py_NewRef(fields[M_OHK] == Py_True ? Py_True : Py_False);
    PyObject *position = NULL, *body = NULL, *op = NULL, *columns = NULL, *old_columns = NULL;
    int rc = -1;
    position = PyLong_FromSsize_t(index);
    if (position == NULL)
        goto done;
    rc = decompress == Py_None ? row_value_in_place(value + start, end - start, position, &op,
                                                    &columns, &old_columns)
                               : 0;
    if (rc == 0) { /* declined: orjson reads it */
        body = load_object(value, start, end, decompress);
        if (body == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        rc = decode_row_value(body, position, &op, &columns, &old_columns);
    }
    if (rc <= 0)
        goto done;
    PyObject *event = slot_new(&row_class);
    if (event == NULL) {
        rc = -1;
        goto done;
    }
    slot_set(event, &row_class, ROW_COMMIT_TS, ts);
    slot_set(event, &row_class, ROW_SCHEMA, schema);
    slot_set(event, &row_class, ROW_TABLE, table);
    slot_set(event, &row_class, ROW_OP, Py_NewRef(op));
    slot_set(event, &row_class, ROW_COLUMNS, columns);
    slot_set(event, &row_class, ROW_OLD_COLUMNS, old_columns);
    slot_set(event, &row_class, ROW_TOPIC, Py_NewRef(topic));
    slot_set(event, &row_class, ROW_PARTITION, Py_NewRef(partition));
    slot_set(event, &row_class, ROW_OFFSET, Py_NewRef(offset));
    slot_set(event, &row_class, ROW_INDEX, position);
    slot_set(event, &row_class, ROW_PARTITION_ID, partition_id);
    slot_set(event, &row_class, ROW_HANDLE_KEY_ONLY, handle_key_only);
    *event_out = event;
    Py_XDECREF(body);
    return 1;
done:
    Py_DECREF(ts);
    Py_DECREF(schema);
    Py_DECREF(table);
    Py_DECREF(partition_id);
    Py_DECREF(handle_key_only);
    Py_XDECREF(position);
    Py_XDECREF(body);
    Py_XDECREF(columns);
    Py_XDECREF(old_columns);
    return rc;
}

static PyObject *
resolved_event(PyObject *ts, PyObject *topic, PyObject *partition, PyObject *offset,
               Py_ssize_t index)
{
    PyObject *position = PyLong_FromSsize_t(index);
    PyObject *event = position ? slot_new(&resolved_class) : NULL;
    if (event == NULL) {
        Py_XDECREF(position);
        return NULL;
    }
    slot_set(event, &resolved_class, RES_TS, Py_NewRef(ts));
    slot_set(event, &resolved_class, RES_TOPIC, Py_NewRef(topic));
    slot_set(event, &resolved_class, RES_PARTITION, Py_NewRef(partition));
    slot_set(event, &resolved_class, RES_OFFSET, Py_NewRef(offset));
    slot_set(event, &resolved_class, RES_INDEX, position);
    return event;
}

/* A non-negative exact int (any size), as `type(ts) is int and ts >= 0`. */
static int
is_uint(PyObject *obj)
{
    if (!PyLong_CheckExact(obj))
        return 0;
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    return overflow > 0 || (overflow == 0 && value >= 0);
}

/* The events of one message, or None when Python must decode it (see the top of the file). */
static PyObject *
decode_message(const uint8_t *key, Py_ssize_t key_size, const uint8_t *value,
               Py_ssize_t value_size, PyObject *decompress, PyObject *topic, PyObject *partition,
               PyObject *offset)
{
    /* All framing first, as split_entries does before any entry is decoded. */
    if (key_size < 8 || read_u64(key) != BATCH_VERSION)
        Py_RETURN_NONE;
    Entries walk = {key, value, key_size, value_size, 8, 0};
    Py_ssize_t count = 0, key_start, value_start;
    int more;
    while ((more = next_entry(&walk, &key_start, &value_start)) == 1)
        count++;
    if (more < 0 || walk.value_at != value_size)
        Py_RETURN_NONE;

    PyObject *events = PyList_New(count);
    if (events == NULL)
        return NULL;
    Entries entries = {key, value, key_size, value_size, 8, 0};
    for (Py_ssize_t index = 0; index < count; index++) {
        next_entry(&entries, &key_start, &value_start); /* validated above */
        Py_ssize_t key_stop = entries.key_at, value_stop = entries.value_at;
        PyObject *fields[M_COUNT];
        int rc = key_in_place(key + key_start, key_stop - key_start, fields);
        if (rc < 0)
            goto python_or_error;
        if (rc == 0) { /* declined: orjson reads it */
            PyObject *meta = load_object(key, key_start, key_stop, Py_None);
            if (meta == NULL)
                goto python_or_error;
            pick(meta, meta_names, M_COUNT, fields);
            for (int i = 0; i < M_COUNT; i++)
                Py_XINCREF(fields[i]);
            Py_DECREF(meta);
        }
        PyObject *ts = fields[M_TS], *kind = fields[M_T], *event = NULL;
        long kind_number = 0;
        rc = 0; /* unless a row or resolved event is made below, Python decides */
        if (ts != NULL && kind != NULL && is_uint(ts) && small_int(kind, &kind_number)) {
            if (kind_number == EVENT_ROW) {
                rc = row_event(fields, value, value_start, value_stop, decompress, topic,
                               partition, offset, index, &event);
            }
            else if (kind_number == EVENT_RESOLVED && value_start == value_stop) {
                event = resolved_event(ts, topic, partition, offset, index);
                rc = event ? 1 : -1;
            }
        }
        for (int i = 0; i < M_COUNT; i++)
            Py_XDECREF(fields[i]);
        if (rc <= 0)
            goto python_or_error;
        PyList_SET_ITEM(events, index, event);
    }
    return events;
python_or_error:
    Py_DECREF(events);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * Straight to silver: a message's row events written into silver's ChangeBuffers through the
 * sink (silver/_silver_speedups.h), with no Column, image dict or RowEvent made. It takes what the
 * events path above reads in place and declines the rest, leaving the buffers as they were. */

static const SilverSink *silver_sink; /* set by configure_sink */

#define SINK_STACK_COLUMNS 32
/* Slots probed for one name before its message is left to the Python reader: names whose
 * hashes crowd one part of the table (FNV can be made to collide) would cost compares in
 * proportion to their square. Four slots per column keep a fair probe to a few. */
#define SINK_PROBE_LIMIT 64
/* sink_image_find's answers besides an index. */
enum { SINK_ABSENT = -1, SINK_DECLINE = -2 };

/* One image's columns as read: new references, in the order sent, each with its name_hash.
 * `seen` has bit name_hash % 256 set for each name read so far, which tells most new names
 * from all of them with no compare. Past SINK_STACK_COLUMNS names, a table of the columns'
 * places by hash (`slots`, open addressing) finds a name in a compare or two, so a wide row
 * costs compares in proportion to its columns, not to their square. An escaped name (whose
 * bytes are not its text, so whose hash is not its text's) turns both off for the rest of the
 * image (`escaped`): names are then compared one by one, and an image past SINK_STACK_COLUMNS
 * names of which one is escaped is left to the Python reader (rare: TiCDC's Go encoder escapes
 * only quotes, backslashes, control characters, <, >, & and U+2028/U+2029). */
typedef struct {
    SinkColumn *columns;
    uint32_t *hashes;
    Py_ssize_t count, capacity;
    uint64_t seen[4];
    Py_ssize_t *slots; /* per slot, a column's index + 1, or 0 when free; NULL: no table */
    size_t slot_mask;
    int escaped;
    SinkColumn stack[SINK_STACK_COLUMNS];
    uint32_t hash_stack[SINK_STACK_COLUMNS];
} SinkImage;

static void
sink_image_init(SinkImage *image)
{
    image->columns = image->stack;
    image->hashes = image->hash_stack;
    image->count = 0;
    image->capacity = SINK_STACK_COLUMNS;
    memset(image->seen, 0, sizeof image->seen);
    image->slots = NULL;
    image->slot_mask = 0;
    image->escaped = 0;
}

static void
sink_image_clear(SinkImage *image)
{
    for (Py_ssize_t i = 0; i < image->count; i++) {
        Py_DECREF(image->columns[i].name);
        Py_XDECREF(image->columns[i].value);
    }
    if (image->columns != image->stack) {
        PyMem_Free(image->columns);
        PyMem_Free(image->hashes);
    }
    if (image->slots != NULL)
        PyMem_Free(image->slots);
    sink_image_init(image);
}

/* Are two names (exact, ready str) equal? As str's own equality: the same kind and code units.
 * Names of one length often share their start (c_int, c_bit): the last byte tells most apart
 * before memcmp is called. */
static inline int
same_name(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    Py_ssize_t length = PyUnicode_GET_LENGTH(a);
    int kind = PyUnicode_KIND(a);
    if (length != PyUnicode_GET_LENGTH(b) || kind != PyUnicode_KIND(b))
        return 0;
    const char *x = PyUnicode_DATA(a), *y = PyUnicode_DATA(b);
    size_t size = (size_t)length * (size_t)kind;
    return size == 0 || (x[size - 1] == y[size - 1] && memcmp(x, y, size) == 0);
}

/* sink_image_find past the filter: through the slot table, else name by name (their hashes
 * first, unless the names are escaped, when the hashes say nothing). */
static Py_ssize_t
sink_image_search(const SinkImage *image, PyObject *name, uint32_t hash, int hashed)
{
    int by_hash = hashed && !image->escaped;
    if (by_hash && image->slots != NULL) {
        int probes = 0;
        for (size_t at = hash & image->slot_mask; image->slots[at];
             at = (at + 1) & image->slot_mask) {
            Py_ssize_t i = image->slots[at] - 1;
            if (image->hashes[i] == hash && same_name(image->columns[i].name, name))
                return i;
            if (++probes == SINK_PROBE_LIMIT)
                return SINK_DECLINE;
        }
        return SINK_ABSENT;
    }
    if (!by_hash && image->count > SINK_STACK_COLUMNS)
        return SINK_DECLINE;
    for (Py_ssize_t i = 0; i < image->count; i++)
        if ((!by_hash || image->hashes[i] == hash) && same_name(image->columns[i].name, name))
            return i;
    return SINK_ABSENT;
}

/* The index of the column of `image` named `name`, SINK_ABSENT, or SINK_DECLINE when finding
 * out would cost too many compares. `hash` is the name's name_hash, and `hashed` 0 when it has
 * none (an escaped name): then every name is compared. */
static inline Py_ssize_t
sink_image_find(const SinkImage *image, PyObject *name, uint32_t hash, int hashed)
{
    if (hashed && !image->escaped
        && !(image->seen[(hash / 64) % 4] & ((uint64_t)1 << (hash % 64))))
        return SINK_ABSENT; /* most names: new, and told so by the filter */
    return sink_image_search(image, name, hash, hashed);
}

/* Column `i` into the first free slot from its hash's; 0 past SINK_PROBE_LIMIT probes. */
static inline int
sink_image_slot(SinkImage *image, Py_ssize_t i)
{
    size_t at = image->hashes[i] & image->slot_mask;
    for (int probes = 0; image->slots[at]; at = (at + 1) & image->slot_mask)
        if (++probes == SINK_PROBE_LIMIT)
            return 0;
    image->slots[at] = i + 1;
    return 1;
}

/* The slot table built anew, at least four slots per column so probes stay short; 0 on no
 * memory or past SINK_PROBE_LIMIT. */
static int
sink_image_index(SinkImage *image)
{
    size_t size = 256;
    while (size < 4 * (size_t)image->count)
        size *= 2;
    Py_ssize_t *slots = PyMem_Calloc(size, sizeof *slots);
    if (slots == NULL)
        return 0;
    PyMem_Free(image->slots);
    image->slots = slots;
    image->slot_mask = size - 1;
    for (Py_ssize_t i = 0; i < image->count; i++)
        if (!sink_image_slot(image, i))
            return 0;
    return 1;
}

/* The most columns an image may hold (limits.max-table-columns): decode_into sets it for the
 * message it writes; a wider image is declined, and the events path names the limit. */
static Py_ssize_t sink_max_columns = PY_SSIZE_T_MAX;

/* `column` (its name's hash `hash`) after the image's columns; 0 on no memory, past
 * SINK_PROBE_LIMIT or past sink_max_columns, the column then still the caller's. */
static int
sink_image_append(SinkImage *image, SinkColumn column, uint32_t hash)
{
    if (image->count >= sink_max_columns)
        return 0;
    if (image->count == image->capacity) {
        Py_ssize_t capacity = image->capacity * 2;
        SinkColumn *columns = PyMem_Malloc((size_t)capacity * sizeof *columns);
        uint32_t *hashes = PyMem_Malloc((size_t)capacity * sizeof *hashes);
        if (columns == NULL || hashes == NULL) {
            PyMem_Free(columns);
            PyMem_Free(hashes);
            return 0;
        }
        memcpy(columns, image->columns, (size_t)image->count * sizeof *columns);
        memcpy(hashes, image->hashes, (size_t)image->count * sizeof *hashes);
        if (image->columns != image->stack) {
            PyMem_Free(image->columns);
            PyMem_Free(image->hashes);
        }
        image->columns = columns;
        image->hashes = hashes;
        image->capacity = capacity;
    }
    Py_ssize_t i = image->count++;
    image->columns[i] = column;
    image->hashes[i] = hash;
    image->seen[(hash / 64) % 4] |= (uint64_t)1 << (hash % 64);
    if (image->escaped || image->count <= SINK_STACK_COLUMNS)
        return 1;
    int placed = image->slots != NULL && 4 * (size_t)image->count <= image->slot_mask + 1
                     ? sink_image_slot(image, i)
                     : sink_image_index(image);
    if (!placed) {
        image->count--;
        return 0;
    }
    return 1;
}

/* Is every byte of [s, s + n) ASCII? Eight at a time. */
static inline int
all_ascii(const unsigned char *s, Py_ssize_t n)
{
    uint64_t any = 0, word;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&word, s + i, 8);
        any |= word;
    }
    for (; i < n; i++)
        any |= s[i];
    return (any & 0x8080808080808080ULL) == 0;
}

/* A column's value as read (once): where it starts, for scalar_value when its object must be
 * made; a string's contents or a number's text. */
typedef struct {
    Text at;
    const unsigned char *start, *end;
    enum { V_OTHER, V_STRING, V_INTEGER, V_NUMBER } kind;
    int escaped;
} ValueSpan;

/* A scalar (string, number, true, false, null) next, read into `value`; 0 for anything else
 * (an array, an object). */
static int
value_span(Text *text, ValueSpan *value)
{
    skip_space(text);
    value->at = *text;
    value->kind = V_OTHER;
    if (text->at >= text->end)
        return 0;
    unsigned char c = *text->at;
    if (c == '"') {
        Py_ssize_t length;
        if (!string_span(text, &value->start, &length, &value->escaped))
            return 0;
        value->end = value->start + length;
        value->kind = V_STRING;
        return 1;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const unsigned char *integer_end, *end = number_end(text->at, text->end, &integer_end);
        if (end == NULL)
            return 0;
        value->start = text->at;
        value->end = text->at = end;
        value->kind = end == integer_end ? V_INTEGER : V_NUMBER;
        return 1;
    }
    return take_word(text, "null", 4) || take_word(text, "true", 4) || take_word(text, "false", 5);
}

/* Is the JSON number [s, end) the text repr() gives of the double nearest to it? So when it is
 * digits, a point and digits (no exponent) with no zero last (repr writes the fewest digits),
 * at most 15 significant digits (DBL_DIG: no other decimal that short is the same double, so
 * repr's digits are these) and at least 1e-4 (below, repr writes an exponent; with 15 digits
 * it is below 1e15, where repr writes none). */
static int
shortest_decimal(const unsigned char *s, const unsigned char *end)
{
    if (s < end && *s == '-')
        s++;
    const unsigned char *point = skip_digits(s, end);
    if (point == s || point >= end - 1 || *point != '.' || end[-1] == '0'
        || skip_digits(point + 1, end) != end)
        return 0;
    Py_ssize_t significant = (point - s) + (end - point - 1);
    if (point - s == 1 && *s == '0') { /* 0.000ddd: its zeros are not significant */
        const unsigned char *first = skip_zeros(point + 1, end);
        if (first - (point + 1) > 3)
            return 0;
        significant = end - first;
    }
    return significant <= 15;
}

/* The value as its text (SinkColumn's `text`), when it is the event model's value as it stands
 * and fits its type: a plain ASCII string (nothing escaped) of a type that keeps strings as
 * they are, an integer of an integer type, whose digits are str() of it, or a DOUBLE written as
 * repr() writes it. 0: the value object must be made (column_value) and checked (code_fits)
 * instead. */
static int
value_text(long code, long flags, const ValueSpan *value, SinkColumn *out)
{
    if (code < 0 || code > 255)
        return 0;
    int kind = value_kind[code];
    if (value->kind == V_OTHER)
        return 0;
    const unsigned char *start = value->start;
    Py_ssize_t length = value->end - start;
    if (value->kind == V_STRING) {
        if ((kind != K_TEXT_VALUE && (kind != K_STRING || flags & FLAG_BINARY))
            || value->escaped || !all_ascii(start, length)
            || text_fits(code, (const char *)start, length) != 1)
            return 0;
    } else if (value->kind == V_NUMBER) {
        if (kind != K_DOUBLE || !shortest_decimal(start, value->end))
            return 0;
    } else {
        long long number;
        uint64_t magnitude;
        int above;
        if (kind != K_INTEGER || !integer_of(start, value->end, &number, &magnitude, &above)
            || (*start == '-' && magnitude == 0) /* -0: str(0) is "0" */
            || !integer_fits(code, (flags & CHECK_UNSIGNED) != 0, number, above))
            return 0;
    }
    out->text = (const char *)start;
    out->text_size = length;
    return 1;
}

/* An integer within a long next, as small_int takes orjson's int: 0 for anything else. */
static int
small_int_span(Text *text, long *out)
{
    ValueSpan value;
    long long number;
    uint64_t magnitude;
    int above;
    if (!value_span(text, &value) || value.kind != V_INTEGER
        || !integer_of(value.start, value.end, &number, &magnitude, &above) || above
        || number < LONG_MIN || number > LONG_MAX)
        return 0;
    *out = (long)number;
    return 1;
}

/* A column object next, as column_fields_in_place reads it, into `out` (its type code and
 * flags, and a new reference to its value unless value_text reads it as text) with its value
 * checked to fit its type; 0 to decline, nothing held. */
static int
sink_column_in_place(Text *text, SinkColumn *out)
{
    if (!take(text, '{'))
        return 0;
    ValueSpan value = {{NULL, NULL}, NULL, NULL, V_OTHER, 0};
    int has_code = 0, has_flags = 0;
    if (!take(text, '}')) {
        do {
            int key = short_key(text);
            if (key == 'v') {
                if (!value_span(text, &value))
                    return 0;
            } else if (key == 't') {
                if (!small_int_span(text, &out->type_code))
                    return 0;
                has_code = 1;
            } else if (key == 'f') {
                if (!small_int_span(text, &out->flags))
                    return 0;
                has_flags = 1;
            } else if (key == 'h') { /* the handle key, in the flags too */
                PyObject *read = scalar_value(text, string_value);
                if (read == NULL)
                    return 0;
                Py_DECREF(read);
            } else {
                return 0;
            }
        } while (take(text, ','));
        if (!take(text, '}'))
            return 0;
    }
    if (!has_code || !has_flags || value.at.at == NULL)
        return 0;
    out->value = NULL;
    if (value_text(out->type_code, out->flags, &value, out))
        return 1;
    PyObject *read = scalar_value(&value.at, string_value);
    out->value = read == NULL ? NULL : column_value(out->type_code, out->flags, read);
    Py_XDECREF(read);
    if (out->value != NULL
        && (out->value == Py_None || code_fits(out->type_code, out->flags, out->value, Py_None)))
        return 1;
    Py_CLEAR(out->value);
    return 0;
}

/* An image object next, read into `image` as image_in_place reads it (a repeated name keeps
 * its first place and its last column), every value checked to fit its type; 0 to decline. */
static int
sink_image_in_place(Text *text, SinkImage *image)
{
    if (!take(text, '{'))
        return 0;
    if (take(text, '}'))
        return 1;
    do {
        const unsigned char *start;
        Py_ssize_t length;
        int escaped;
        if (!string_span(text, &start, &length, &escaped) || !take(text, ':'))
            return 0;
        uint32_t hash = escaped ? 0 : name_hash(start, length);
        SinkColumn column;
        column.name = recent_string_hashed(start, length, escaped, hash);
        if (column.name == NULL)
            return 0;
        if (!sink_column_in_place(text, &column)) {
            Py_DECREF(column.name);
            return 0;
        }
        image->escaped |= escaped;
        Py_ssize_t earlier = sink_image_find(image, column.name, hash, !escaped);
        if (earlier == SINK_DECLINE) {
            Py_DECREF(column.name);
            Py_XDECREF(column.value);
            return 0;
        }
        if (earlier >= 0) {
            SinkColumn *kept = &image->columns[earlier];
            Py_DECREF(column.name);
            Py_XDECREF(kept->value);
            column.name = kept->name;
            *kept = column;
            continue;
        }
        if (!sink_image_append(image, column, hash)) {
            Py_DECREF(column.name);
            Py_XDECREF(column.value);
            return 0;
        }
    } while (take(text, ','));
    return take(text, '}');
}

/* Do two images hold the same names? (Each is free of repeats.) Compared in place first: the
 * old and new images of an update list their names in one order (TiCDC writes them sorted). */
static int
sink_same_names(const SinkImage *a, const SinkImage *b)
{
    if (a->count != b->count)
        return 0;
    Py_ssize_t i = 0;
    while (i < b->count && same_name(a->columns[i].name, b->columns[i].name))
        i++;
    for (; i < b->count; i++)
        if (sink_image_find(a, b->columns[i].name, b->hashes[i], !b->escaped) < 0)
            return 0;
    return 1;
}

/* A value document read in place: its images (`d`, `u`, `p`; `present` says which came, null
 * counting as absent) and the op they make, as row_images decides it; 0 to decline (an update
 * that sent only its changed columns among them). */
typedef struct {
    SinkImage parts[B_COUNT];
    int present[B_COUNT];
    PyObject *op;
    SinkImage *new, *old; /* NULL: None */
} SinkValue;

static int
sink_value_in_place(const uint8_t *buf, Py_ssize_t size, SinkValue *value)
{
    Text text = {buf, buf + size};
    int seen[B_COUNT] = {0, 0, 0};
    if (!take(&text, '{'))
        return 0;
    if (!take(&text, '}')) {
        do {
            int key = short_key(&text);
            int part = key == 'd' ? B_D : key == 'u' ? B_U : key == 'p' ? B_P : -1;
            if (part < 0 || seen[part])
                return 0;
            seen[part] = 1;
            skip_space(&text);
            if (take_word(&text, "null", 4))
                continue;
            if (!sink_image_in_place(&text, &value->parts[part]))
                return 0;
            value->present[part] = 1;
        } while (take(&text, ','));
        if (!take(&text, '}'))
            return 0;
    }
    skip_space(&text);
    if (text.at != text.end)
        return 0;
    if (value->present[B_D]) {
        if (seen[B_U] || seen[B_P]) /* `d` mixed with `u`/`p` */
            return 0;
        value->op = op_delete;
        value->new = NULL;
        value->old = &value->parts[B_D];
        return 1;
    }
    if (!value->present[B_U])
        return 0;
    value->new = &value->parts[B_U];
    if (!value->present[B_P]) {
        value->op = op_insert;
        value->old = NULL;
        return 1;
    }
    value->op = op_update;
    value->old = &value->parts[B_P];
    return sink_same_names(value->old, value->new);
}

/* A TS silver holds (decode_record refuses larger ones, naming them). */
static int
fits_int64(PyObject *number)
{
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(number, &overflow);
    return overflow == 0 && value >= 0;
}

/* One row entry written through the sink: 1, or 0 to decline (the caller truncates). */
static int
sink_row_entry(PyObject *const *fields, const uint8_t *value, Py_ssize_t start,
               Py_ssize_t end, PyObject *decompress, PyObject *const *where, Py_ssize_t index,
               PyObject *buffers, PyObject *bronze_batch, PyObject *handle_flag)
{
    PyObject *schema = fields[M_SCM] ? fields[M_SCM] : s_empty;
    PyObject *table = fields[M_TBL] ? fields[M_TBL] : s_empty;
    PyObject *partition_id = fields[M_PTN] ? fields[M_PTN] : Py_None;
    if (fields[M_CCL] != NULL || !fits_int64(fields[M_TS]) || !PyUnicode_CheckExact(schema)
        || !PyUnicode_CheckExact(table)
        || (partition_id != Py_None && !PyLong_CheckExact(partition_id)) || start == end)
        return 0;
    PyObject *data = NULL, *position = NULL;
    const uint8_t *document = value + start;
    Py_ssize_t size = end - start;
    if (decompress != Py_None) {
        data = PyBytes_FromStringAndSize((const char *)document, size);
        if (data != NULL)
            Py_SETREF(data, PyObject_CallOneArg(decompress, data));
        if (data == NULL || !PyBytes_CheckExact(data)) {
            Py_XDECREF(data);
            return 0;
        }
        document = (const uint8_t *)PyBytes_AS_STRING(data);
        size = PyBytes_GET_SIZE(data);
    }
    SinkValue parts = {.present = {0, 0, 0}};
    for (int i = 0; i < B_COUNT; i++)
        sink_image_init(&parts.parts[i]);
    int rc = 0;
    if (sink_value_in_place(document, size, &parts)
        && (position = PyLong_FromSsize_t(index)) != NULL) {
        SinkRow row;
        row.fields[SINK_COMMIT_TS] = fields[M_TS];
        row.fields[SINK_SCHEMA] = schema;
        row.fields[SINK_TABLE] = table;
        row.fields[SINK_OP] = parts.op;
        row.fields[SINK_PARTITION_ID] = partition_id;
        row.fields[SINK_HANDLE_KEY_ONLY] = fields[M_OHK] == Py_True ? Py_True : Py_False;
        row.fields[SINK_TOPIC] = where[0];
        row.fields[SINK_PARTITION] = where[1];
        row.fields[SINK_OFFSET] = where[2];
        row.fields[SINK_INDEX] = position;
        SinkImage *images[2] = {parts.new, parts.old};
        for (int i = 0; i < 2; i++) {
            row.images[i] = images[i] ? images[i]->columns : NULL;
            row.counts[i] = images[i] ? images[i]->count : 0;
        }
        rc = silver_sink->add_row(buffers, &row, bronze_batch, handle_flag) == 1;
    }
    for (int i = 0; i < B_COUNT; i++)
        sink_image_clear(&parts.parts[i]);
    Py_XDECREF(position);
    Py_XDECREF(data);
    return rc;
}

/* The rows of a message of row events written through the sink: 1; 0 when it holds anything
 * else or anything the events path would not take in place (the buffers as they were). */
static int
sink_message(const uint8_t *key, Py_ssize_t key_size, const uint8_t *value,
             Py_ssize_t value_size, PyObject *decompress, PyObject *const *where,
             PyObject *buffers, PyObject *bronze_batch, PyObject *handle_flag)
{
    if (key_size < 8 || read_u64(key) != BATCH_VERSION)
        return 0;
    Entries walk = {key, value, key_size, value_size, 8, 0};
    Py_ssize_t key_start, value_start;
    int more;
    while ((more = next_entry(&walk, &key_start, &value_start)) == 1)
        ;
    if (more < 0 || walk.value_at != value_size)
        return 0;
    Entries entries = {key, value, key_size, value_size, 8, 0};
    for (Py_ssize_t index = 0; next_entry(&entries, &key_start, &value_start) == 1; index++) {
        PyObject *fields[M_COUNT];
        if (key_in_place(key + key_start, entries.key_at - key_start, fields) != 1)
            return 0;
        long kind = 0;
        int written = fields[M_TS] != NULL && fields[M_T] != NULL && is_uint(fields[M_TS])
                      && small_int(fields[M_T], &kind) && kind == EVENT_ROW
                      && sink_row_entry(fields, value, value_start, entries.value_at,
                                        decompress, where, index, buffers, bronze_batch,
                                        handle_flag);
        for (int i = 0; i < M_COUNT; i++)
            Py_XDECREF(fields[i]);
        if (!written)
            return 0;
    }
    return 1;
}

/* decode_into(key, value, decompress, topic, partition, offset, buffers, bronze_batch,
 * handle_flag, max_columns) -> bool */
static PyObject *
open_decode_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured)
        return not_configured("_open_speedups");
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "decode_into(key, value, decompress, topic, partition, "
                                         "offset, buffers, bronze_batch, handle_flag, "
                                         "max_columns)");
        return NULL;
    }
    Py_ssize_t max_columns = PyLong_AsSsize_t(args[9]);
    if (max_columns < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "decode_into: max_columns must not be negative");
        return NULL;
    }
    PyObject *buffers = args[6];
    if (silver_sink == NULL) /* silver's buffers are not built: the events path decodes */
        Py_RETURN_FALSE;
    if (!PyBytes_Check(args[0]) || !PyBytes_Check(args[1])
        || !Py_IS_TYPE(buffers, silver_sink->buffers_type)) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_into: key and value must be bytes and buffers a ChangeBuffers");
        return NULL;
    }
    Py_ssize_t rows = silver_sink->rows(buffers);
    sink_max_columns = max_columns;
    int written = sink_message((const uint8_t *)PyBytes_AS_STRING(args[0]),
                               PyBytes_GET_SIZE(args[0]),
                               (const uint8_t *)PyBytes_AS_STRING(args[1]),
                               PyBytes_GET_SIZE(args[1]), args[2], args + 3, buffers, args[7],
                               args[8]);
    if (written)
        Py_RETURN_TRUE;
    /* Whatever stopped it, the events path decides, and names any problem. */
    PyErr_Clear();
    silver_sink->truncate(buffers, rows);
    Py_RETURN_FALSE;
}

/* configure_sink(sink): bind silver's sink (silver/_silver_speedups.h, its module's `sink`) for
 * decode_into. */
static PyObject *
open_configure_sink(PyObject *module, PyObject *capsule)
{
    const SilverSink *sink = PyCapsule_GetPointer(capsule, SILVER_SINK_CAPSULE);
    if (sink == NULL)
        return NULL;
    if (sink->version != SILVER_SINK_VERSION) {
        PyErr_Format(PyExc_ValueError, "silver sink version %d, expected %d", sink->version,
                     SILVER_SINK_VERSION);
        return NULL;
    }
    silver_sink = sink;
    Py_RETURN_NONE;
}

/* decode(key, value, decompress, topic, partition, offset) -> list of events, or None */
static PyObject *
open_decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured)
        return not_configured("_open_speedups");
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "decode(key, value, decompress, topic, partition, offset)");
        return NULL;
    }
    if (!PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "decode: key and value must be bytes");
        return NULL;
    }
    /* bytes are immutable, so the buffers stay put while Python code runs in between. */
    return decode_message((const uint8_t *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]),
                          (const uint8_t *)PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]),
                          args[2], args[3], args[4], args[5]);
}

/* row_value(value_json, index) -> (op, columns, old_columns) or None: the in-place reader
 * alone, for tests. */
static PyObject *
open_row_value(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured)
        return not_configured("_open_speedups");
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "row_value(value_json: bytes, index)");
        return NULL;
    }
    PyObject *op, *columns, *old_columns;
    int rc = row_value_in_place((const uint8_t *)PyBytes_AS_STRING(args[0]),
                                PyBytes_GET_SIZE(args[0]), args[1], &op, &columns, &old_columns);
    if (rc < 0)
        return NULL;
    if (rc == 0)
        Py_RETURN_NONE;
    PyObject *out = PyTuple_Pack(3, op, columns, old_columns);
    Py_DECREF(columns);
    Py_DECREF(old_columns);
    return out;
}

/* decode_image(raw, index, image) -> dict: the image builder alone, for tests. */
static PyObject *
open_decode_image(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured)
        return not_configured("_open_speedups");
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "decode_image(raw, index, image)");
        return NULL;
    }
    return decode_image(args[0], args[1], args[2]);
}

/* ---------------------------------------------------------------------------------------------
 * configure(Column, RowEvent, ResolvedEvent, loads, decode_image, decode_value, INSERT,
 *           UPDATE, DELETE, value_kinds) */

static PyObject *
open_configure(PyObject *module, PyObject *args)
{
    PyObject *column, *row, *resolved, *loads, *image, *value, *insert, *update, *delete, *kinds;
    if (!PyArg_ParseTuple(args, "OOOOOOUUUO!:configure", &column, &row, &resolved, &loads,
                          &image, &value, &insert, &update, &delete, &PyDict_Type, &kinds))
        return NULL;
    configured = 0;
    if (bind_class(column, column_fields, &column_class) < 0
        || bind_class(row, row_fields, &row_class) < 0
        || bind_class(resolved, resolved_fields, &resolved_class) < 0)
        return NULL;
    if (!PyCallable_Check(loads) || !PyCallable_Check(image) || !PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "loads, decode_image and decode_value must be callable");
        return NULL;
    }
    unsigned char table[256] = {0};
    PyObject *code_obj, *kind_obj;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kinds, &pos, &code_obj, &kind_obj)) {
        long code = PyLong_AsLong(code_obj), kind = PyLong_AsLong(kind_obj);
        if (PyErr_Occurred())
            return NULL;
        if (code < 0 || code > 255 || kind < K_INTEGER || kind > K_LAST) {
            PyErr_Format(PyExc_ValueError, "value kind %R: %R is out of range", code_obj,
                         kind_obj);
            return NULL;
        }
        table[code] = (unsigned char)kind;
    }
    memcpy(value_kind, table, sizeof table);
    Py_INCREF(loads);
    Py_XSETREF(json_loads, loads);
    Py_INCREF(image);
    Py_XSETREF(py_decode_image, image);
    Py_INCREF(value);
    Py_XSETREF(py_decode_value, value);
    bind_ops(insert, update, delete);
    configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef open_methods[] = {
    {"configure", open_configure, METH_VARARGS,
     "configure(Column, RowEvent, ResolvedEvent, loads, decode_image, decode_value, INSERT, "
     "UPDATE, DELETE, value_kinds): bind the event model and the Python reference functions."},
    {"decode", (PyCFunction)(void (*)(void))open_decode, METH_FASTCALL,
     "decode(key, value, decompress, topic, partition, offset) -> list of events, or None "
     "when the message needs the Python decoder"},
    {"decode_image", (PyCFunction)(void (*)(void))open_decode_image, METH_FASTCALL,
     "decode_image(raw, index, image) -> dict of Columns (open_protocol.decode_image)"},
    {"row_value", (PyCFunction)(void (*)(void))open_row_value, METH_FASTCALL,
     "row_value(value_json, index) -> (op, columns, old_columns) read in place, or None when "
     "the reader declines"},
    {"decode_into", (PyCFunction)(void (*)(void))open_decode_into, METH_FASTCALL,
     "decode_into(key, value, decompress, topic, partition, offset, buffers, bronze_batch, "
     "handle_flag, max_columns) -> True when the message's row events were written into "
     "silver's ChangeBuffers, no image wider than max_columns; False (nothing written) "
     "leaves it to decode"},
    {"configure_sink", open_configure_sink, METH_O,
     "configure_sink(sink): bind silver's compiled buffers (_silver_speedups.sink) for "
     "decode_into"},
    EVENTS_FIT_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef open_module = {
    PyModuleDef_HEAD_INIT, "_open_speedups",
    "Compiled Open Protocol fast path; see ticdc_lake.protocols.open_protocol.", -1,
    open_methods,
};

static int
intern_keys(void)
{
    static const struct {
        PyObject **slot;
        const char *text;
    } keys[] = {
        {&s_u, "u"}, {&s_p, "p"}, {&s_d, "d"}, {&s_empty, ""},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (*keys[i].slot == NULL && (*keys[i].slot = PyUnicode_InternFromString(keys[i].text)) == NULL)
            return -1;
    }
    return 0;
}

PyMODINIT_FUNC
PyInit__open_speedups(void)
{
    for (int c = 0; c < 256; c++)
        base64_valid[c] = 0;
    const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (const char *p = alphabet; *p; p++)
        base64_valid[(unsigned char)*p] = 1;
    if (intern_keys() < 0)
        return NULL;
    for (int i = 0; i < C_COUNT; i++)
        if (column_keys[i] == NULL
            && (column_keys[i] = PyUnicode_InternFromString(column_names[i].text)) == NULL)
            return NULL;
    return PyModule_Create(&open_module);
}
