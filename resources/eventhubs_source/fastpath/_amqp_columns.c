/*
 * Plain transfer frames straight to the columns of the `eventhubs` schema (the reader's native
 * step; resources/eventhubs_source/fastpath/loader.py builds and loads it, resources/amqp/receiver.py calls
 * it on its connection's receive buffer).
 *
 * scan() walks the AMQP frames whole in a receive buffer, from `start`, while each one is a
 * plain transfer of the reader's link: a transfer performative of 11 fields on the link's channel
 * and handle, with a delivery id and tag, not `more`, not aborted, no delivery state; a message
 * of one or more data sections, message annotations, properties, application properties, and at
 * most a header, delivery annotations and a footer (skipped, as the Python path skips them).
 * The annotations with columns must be of the types Event Hubs sends; every other annotation
 * (x-opt-partition-key and x-opt-publisher too), every message property set and every
 * application property becomes a map entry whose key and value are written as
 * resources/eventhubs_source/values.py `text` writes them, the connector's texts: strings and
 * symbols as they are, binaries as JSON arrays of signed bytes, integers and decimal bits in
 * decimal, booleans true/false, floats and doubles as Java's Double.toString, timestamps as
 * json4s's quoted dates (the message properties' two times in milliseconds), UUIDs in their
 * canonical form, chars as themselves, null as "null". Lists, maps, arrays, described values,
 * strings that are not UTF-8, subnormal doubles, dates before 1582-10-15, keys that are not
 * strings, integers, booleans or null, a message with no data section, an amqp-sequence or
 * amqp-value body: the scan stops before that frame, and the Python path (_message.py) decodes
 * it. For every frame it took it lays its row out in Arrow's buffers (and adds the delivery tag
 * to `tags`, when a set is given): the caller does the link's and session's counting for the
 * whole run. Nothing here allocates a Python object per event (but the tag, when asked for).
 *
 * Every read is bounded by the frame, every frame by the buffer's filled part.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DATA 8   /* data sections per message before the Python path takes the frame */
#define MAX_DEPTH 32 /* nesting of a skipped value */

typedef struct {
    Py_ssize_t pos, len;
    int set; /* 0: absent or null */
} span;

typedef struct {
    int64_t seq, time_ms, delivery_id;
    int has_time;
    span offset, pkey, publisher, tag;
    int ndata;
    span data[MAX_DATA];
    Py_ssize_t body_len;
    /* Map entries (in the run's entries): application properties; annotations without a
     * column, then message properties (together, systemProperties). */
    Py_ssize_t props_at, props_n, ann_at, ann_n, mprops_at, mprops_n;
} row;

/* A map entry: its key and value as their texts (resources/eventhubs_source/values.py `text`).
 * A text is bytes of the frame (a string or symbol), a binary's bytes written as a JSON array
 * of signed bytes, a fixed name, or formatted here (numbers, booleans, dates, UUIDs, chars). */
enum { T_FMT = 0, T_SPAN = 1, T_BYTES = 2 };

typedef struct {
    span key, value;      /* the frame's bytes of a T_SPAN or T_BYTES text */
    const char *key_name; /* a fixed name (message properties, column annotations), else NULL */
    char key_fmt[24], value_fmt[48];
    uint8_t key_fmt_len, value_fmt_len;
    uint8_t key_kind, value_kind; /* T_FMT (or key_name), T_SPAN, T_BYTES */
} entry;

typedef struct {
    entry *items;
    Py_ssize_t n, cap;
} entries;

#define MAX_ENTRIES 64 /* per map, before the Python path takes the frame */

static entry *new_entry(entries *E) {
    if (E->n == E->cap) {
        Py_ssize_t cap = E->cap ? 2 * E->cap : 256;
        entry *grown = PyMem_Realloc(E->items, sizeof(entry) * (size_t)cap);
        if (!grown) return NULL;
        E->items = grown;
        E->cap = cap;
    }
    entry *e = &E->items[E->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int64_t be64(const uint8_t *p) {
    return (int64_t)(((uint64_t)be32(p) << 32) | be32(p + 4));
}

/* Strict UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF), as Python decodes it. */
static int utf8_ok(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int k;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + k >= n) return 0;
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* The index after the value whose constructor is at b[i] (i < end), or -1: malformed, past
 * `end`, or nested deeper than MAX_DEPTH. Compound values are walked element by element and
 * must end exactly where their size says. */
static Py_ssize_t skip(const uint8_t *b, Py_ssize_t i, Py_ssize_t end, int depth) {
    if (i >= end || depth > MAX_DEPTH) return -1;
    uint8_t c = b[i++];
    Py_ssize_t n = 0, count = 0, stop;
    switch (c) {
    case 0x40: case 0x41: case 0x42: case 0x43: case 0x44: case 0x45:
        return i;
    case 0x50: case 0x51: case 0x52: case 0x53: case 0x54: case 0x55: case 0x56:
        n = 1; break;
    case 0x60: case 0x61:
        n = 2; break;
    case 0x70: case 0x71: case 0x72: case 0x73: case 0x74:
        n = 4; break;
    case 0x80: case 0x81: case 0x82: case 0x83: case 0x84:
        n = 8; break;
    case 0x94: case 0x98:
        n = 16; break;
    case 0xA0: case 0xA1: case 0xA3:
        if (i + 1 > end) return -1;
        n = 1 + (Py_ssize_t)b[i];
        break;
    case 0xB0: case 0xB1: case 0xB3:
        if (i + 4 > end) return -1;
        n = 4 + (Py_ssize_t)be32(b + i);
        break;
    case 0x00: { /* described: a descriptor, then the value */
        Py_ssize_t j = skip(b, i, end, depth + 1);
        return j < 0 ? -1 : skip(b, j, end, depth + 1);
    }
    case 0xC0: case 0xC1: case 0xD0: case 0xD1: {
        if (c < 0xD0) {
            if (i + 2 > end) return -1;
            stop = i + 1 + b[i];
            count = b[i + 1];
            i += 2;
        } else {
            if (i + 8 > end) return -1;
            stop = i + 4 + (Py_ssize_t)be32(b + i);
            count = (Py_ssize_t)be32(b + i + 4);
            i += 8;
        }
        if (stop > end || count > stop - i || ((c & 0x0F) == 1 && (count & 1))) return -1;
        for (Py_ssize_t k = 0; k < count; k++) {
            i = skip(b, i, stop, depth + 1);
            if (i < 0) return -1;
        }
        return i == stop ? i : -1;
    }
    default: /* arrays (one constructor for all elements) and anything unknown: the Python path */
        return -1;
    }
    return i + n <= end ? i + n : -1;
}

/* A list (list0, list8, list32) of at most `most` elements: the index of its first element and
 * its count, or -1. */
static Py_ssize_t list_head(const uint8_t *b, Py_ssize_t i, Py_ssize_t end, Py_ssize_t most,
                            Py_ssize_t *count, Py_ssize_t *stop) {
    if (i >= end) return -1;
    uint8_t c = b[i];
    if (c == 0x45) {
        *count = 0;
        *stop = i + 1;
        return i + 1;
    }
    if (c == 0xC0) {
        if (i + 3 > end) return -1;
        *stop = i + 2 + b[i + 1];
        *count = b[i + 2];
        i += 3;
    } else if (c == 0xD0) {
        if (i + 9 > end) return -1;
        *stop = i + 5 + (Py_ssize_t)be32(b + i + 1);
        *count = (Py_ssize_t)be32(b + i + 5);
        i += 9;
    } else {
        return -1;
    }
    if (*stop > end || *count > most) return -1;
    return i;
}

/* An unsigned int of a performative (uint0, smalluint, uint): 0 and its value, or -1. */
static int read_uint(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, int64_t *out) {
    if (*i >= end) return -1;
    uint8_t c = b[(*i)++];
    if (c == 0x43) {
        *out = 0;
    } else if (c == 0x52) {
        if (*i + 1 > end) return -1;
        *out = b[(*i)++];
    } else if (c == 0x70) {
        if (*i + 4 > end) return -1;
        *out = be32(b + *i);
        *i += 4;
    } else {
        return -1;
    }
    return 0;
}

/* A boolean or null field: 0 false/null, 1 true, -1 anything else. */
static int read_flag(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end) {
    if (*i >= end) return -1;
    uint8_t c = b[(*i)++];
    if (c == 0x40 || c == 0x42) return 0;
    if (c == 0x41) return 1;
    if (c == 0x56) {
        if (*i + 1 > end) return -1;
        uint8_t v = b[(*i)++];
        return v == 0 ? 0 : (v == 1 ? 1 : -1);
    }
    return -1;
}

/* Any integer encoding (as pyamqp decodes each to a Python int) that fits 64 signed bits: 0 and
 * its value, or -1 (booleans, other types, an unsigned long past 2^63 - 1). */
static int read_int(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, int64_t *out) {
    if (*i >= end) return -1;
    uint8_t c = b[(*i)++];
    Py_ssize_t n;
    switch (c) {
    case 0x43: case 0x44: /* uint0, ulong0 */
        *out = 0;
        return 0;
    case 0x50: case 0x52: case 0x53: /* ubyte, smalluint, smallulong */
    case 0x51: case 0x54: case 0x55: /* byte, smallint, smalllong */
        n = 1; break;
    case 0x60: case 0x61: /* ushort, short */
        n = 2; break;
    case 0x70: case 0x71: /* uint, int */
        n = 4; break;
    case 0x80: case 0x81: /* ulong, long */
        n = 8; break;
    default:
        return -1;
    }
    if (*i + n > end) return -1;
    const uint8_t *p = b + *i;
    *i += n;
    switch (c) {
    case 0x50: case 0x52: case 0x53: *out = p[0]; break;
    case 0x51: case 0x54: case 0x55: *out = (int8_t)p[0]; break;
    case 0x60: *out = (uint16_t)((p[0] << 8) | p[1]); break;
    case 0x61: *out = (int16_t)((p[0] << 8) | p[1]); break;
    case 0x70: *out = be32(p); break;
    case 0x71: *out = (int32_t)be32(p); break;
    case 0x80:
        if (p[0] & 0x80) return -1;
        *out = be64(p);
        break;
    default: *out = be64(p); break;
    }
    return 0;
}


/* Bytes, a string or a symbol: its span if UTF-8 (the Python path decodes with "replace"). */
static int read_bytes_text(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, uint8_t c, span *out) {
    Py_ssize_t n;
    if (c == 0xA0 || c == 0xA1 || c == 0xA3) {
        if (*i + 1 > end) return -1;
        n = b[(*i)++];
    } else {
        if (*i + 4 > end) return -1;
        n = (Py_ssize_t)be32(b + *i);
        *i += 4;
    }
    if (n > end - *i || !utf8_ok(b + *i, n)) return -1;
    out->pos = *i;
    out->len = n;
    out->set = 1;
    *i += n;
    return 0;
}

/* A string or symbol value (str8/32, sym8/32) or null, UTF-8: 0 and its span, or -1. */
static int read_text(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, span *out) {
    if (*i >= end) return -1;
    uint8_t c = b[(*i)++];
    if (c == 0x40) {
        out->set = 0;
        out->len = 0;
        return 0;
    }
    if (c != 0xA1 && c != 0xA3 && c != 0xB1 && c != 0xB3) return -1;
    return read_bytes_text(b, i, end, c, out);
}

static int is_integer(uint8_t c) {
    switch (c) {
    case 0x43: case 0x44: case 0x50: case 0x51: case 0x52: case 0x53: case 0x54: case 0x55:
    case 0x60: case 0x61: case 0x70: case 0x71: case 0x80: case 0x81:
        return 1;
    default:
        return 0;
    }
}

/* An integer as Python's str(int) writes it (constructor c read; ulong with all 64 bits). */
static int format_integer(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, uint8_t c, char *out) {
    if (c == 0x80) {
        if (*i + 8 > end) return -1;
        uint64_t v = ((uint64_t)be32(b + *i) << 32) | be32(b + *i + 4);
        *i += 8;
        return snprintf(out, 24, "%llu", (unsigned long long)v);
    }
    int64_t v;
    (*i)--; /* read_int reads the constructor itself */
    if (read_int(b, i, end, &v) < 0) return -1;
    return snprintf(out, 24, "%lld", (long long)v);
}

/* Java's Double.toString (19+: the shortest decimal), as _values.java_double writes it; -1 for
 * a subnormal (the Python path finds Java's two digits for those). */
static int java_double(double x, char *out) {
    if (isnan(x)) return sprintf(out, "\"NaN\"");
    if (isinf(x)) return sprintf(out, x > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    if (x == 0.0) return sprintf(out, signbit(x) ? "-0.0" : "0.0");
    double a = fabs(x);
    if (a < 2.2250738585072014e-308) return -1;
    /* repr's digits: "0.001", "123.456", "123", "1e+20", "1.5e-07" */
    char *r = PyOS_double_to_string(a, 'r', 0, 0, NULL);
    if (!r) {
        PyErr_Clear();
        return -1;
    }
    char digits[32];
    int nd = 0, whole = 0, seen_point = 0;
    const char *p = r;
    for (; *p && *p != 'e' && nd < 31; p++) {
        if (*p == '.') {
            seen_point = 1;
            continue;
        }
        whole += !seen_point;
        digits[nd++] = *p;
    }
    int scale = *p == 'e' ? atoi(p + 1) : 0;
    PyMem_Free(r);
    int lz = 0;
    while (lz < nd - 1 && digits[lz] == '0') lz++;
    int point = whole - 1 - lz + scale; /* the exponent of the first significant digit */
    const char *d = digits + lz;
    nd -= lz;
    while (nd > 1 && d[nd - 1] == '0') nd--;
    char *o = out;
    if (x < 0) *o++ = '-';
    if (a >= 1e-3 && a < 1e7) {
        if (point >= 0) {
            for (int k = 0; k <= point; k++) *o++ = k < nd ? d[k] : '0';
            *o++ = '.';
            if (nd > point + 1) {
                for (int k = point + 1; k < nd; k++) *o++ = d[k];
            } else {
                *o++ = '0';
            }
        } else {
            *o++ = '0';
            *o++ = '.';
            for (int k = 0; k < -point - 1; k++) *o++ = '0';
            for (int k = 0; k < nd; k++) *o++ = d[k];
        }
    } else {
        *o++ = d[0];
        *o++ = '.';
        if (nd > 1) {
            for (int k = 1; k < nd; k++) *o++ = d[k];
        } else {
            *o++ = '0';
        }
        o += sprintf(o, "E%d", point);
    }
    *o = '\0';
    return (int)(o - out);
}

/* A timestamp as json4s writes a java.util.Date, quoted (_values.java_date); -1 before
 * 1582-10-15, where Java's calendar is the Julian one (the Python path's). */
static int java_date(int64_t ms, char *out) {
    if (ms < -12219292800000LL) return -1;
    int64_t days = ms / 86400000, rest = ms % 86400000;
    if (rest < 0) {
        rest += 86400000;
        days--;
    }
    /* Howard Hinnant's civil_from_days */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int day = (int)(doy - (153 * mp + 2) / 5 + 1);
    int month = (int)(mp < 10 ? mp + 3 : mp - 9);
    int64_t year = yoe + era * 400 + (month <= 2);
    int hour = (int)(rest / 3600000), minute = (int)(rest / 60000 % 60);
    int second = (int)(rest / 1000 % 60), milli = (int)(rest % 1000);
    return sprintf(out, "\"%04lld-%02d-%02dT%02d:%02d:%02d.%03dZ\"", (long long)year, month, day,
                   hour, minute, second, milli);
}

/* The UTF-8 of a char's code point, or its decimal when it is not a Unicode scalar value. */
static int char_text(uint32_t cp, char *out) {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return sprintf(out, "%u", cp);
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A binary's (or a decimal128's) bytes: a span written as a JSON array of signed bytes. */
static int read_binary(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, uint8_t c, span *out) {
    Py_ssize_t n;
    if (c == 0x94) {
        n = 16;
    } else if (c == 0xA0) {
        if (*i + 1 > end) return -1;
        n = b[(*i)++];
    } else {
        if (*i + 4 > end) return -1;
        n = (Py_ssize_t)be32(b + *i);
        *i += 4;
    }
    if (n > end - *i) return -1;
    out->pos = *i;
    out->len = n;
    out->set = 1;
    *i += n;
    return 0;
}

/* A value's text (_values.text) into e's value: strings and symbols from the frame, binaries
 * as their bytes, the other scalars formatted. -1 for what the Python path writes: lists,
 * maps, arrays, described values, strings that are not UTF-8, subnormal doubles, dates before
 * 1582-10-15. `times_in_ms`: a timestamp is its milliseconds (the message properties' times,
 * as the Java SDK gives them), not a date. */
static int read_value(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, entry *e, int times_in_ms) {
    if (*i >= end) return -1;
    uint8_t c = b[(*i)++];
    int n;
    if (c == 0xA1 || c == 0xA3 || c == 0xB1 || c == 0xB3) {
        e->value_kind = T_SPAN;
        return read_bytes_text(b, i, end, c, &e->value);
    }
    if (c == 0xA0 || c == 0xB0 || c == 0x94) {
        e->value_kind = T_BYTES;
        return read_binary(b, i, end, c, &e->value);
    }
    e->value_kind = T_FMT;
    char *out = e->value_fmt;
    if (c == 0x40) {
        n = sprintf(out, "null");
    } else if (c == 0x41 || c == 0x42 || c == 0x56) {
        int v = c == 0x41;
        if (c == 0x56) {
            if (*i + 1 > end || b[*i] > 1) return -1;
            v = b[(*i)++] == 1;
        }
        n = sprintf(out, "%s", v ? "true" : "false");
    } else if (is_integer(c)) {
        n = format_integer(b, i, end, c, out);
    } else if (c == 0x83 || c == 0x84 || c == 0x82) { /* timestamp, decimal64, double */
        if (*i + 8 > end) return -1;
        int64_t bits = be64(b + *i);
        *i += 8;
        if (c == 0x82) {
            double x;
            memcpy(&x, &bits, 8);
            n = java_double(x, out);
        } else if (c == 0x84 || times_in_ms) {
            n = sprintf(out, "%lld", (long long)bits);
        } else {
            n = java_date(bits, out);
        }
    } else if (c == 0x72 || c == 0x73 || c == 0x74) { /* float, char, decimal32 */
        if (*i + 4 > end) return -1;
        uint32_t bits = be32(b + *i);
        *i += 4;
        if (c == 0x72) {
            float f;
            memcpy(&f, &bits, 4);
            n = java_double((double)f, out);
        } else if (c == 0x73) {
            n = char_text(bits, out);
        } else {
            n = sprintf(out, "%d", (int32_t)bits);
        }
    } else if (c == 0x98) { /* uuid: str(uuid.UUID(bytes=...)) */
        if (*i + 16 > end) return -1;
        const uint8_t *u = b + *i;
        *i += 16;
        n = sprintf(out,
                    "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                    u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
                    u[12], u[13], u[14], u[15]);
    } else {
        return -1; /* lists, maps, arrays, described values, unknown constructors */
    }
    if (n < 0) return -1;
    e->value_fmt_len = (uint8_t)n;
    return 0;
}

/* A key's text (_values.text): strings and symbols from the frame, integers, booleans and null
 * formatted; -1 for others (binaries, floats, UUIDs, compounds: the Python path's). */
static int read_key(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, entry *e) {
    if (*i >= end) return -1;
    uint8_t c = b[(*i)++];
    int n;
    if (c == 0xA1 || c == 0xA3 || c == 0xB1 || c == 0xB3) {
        e->key_kind = T_SPAN;
        return read_bytes_text(b, i, end, c, &e->key);
    }
    e->key_kind = T_FMT;
    if (c == 0x40) {
        n = sprintf(e->key_fmt, "null");
    } else if (c == 0x41 || c == 0x42) {
        n = sprintf(e->key_fmt, "%s", c == 0x41 ? "true" : "false");
    } else if (is_integer(c)) {
        n = format_integer(b, i, end, c, e->key_fmt);
    } else {
        return -1;
    }
    if (n < 0) return -1;
    e->key_fmt_len = (uint8_t)n;
    return 0;
}

/* A map (map8, map32) of at most MAX_ENTRIES pairs: the index of its first key, its count of
 * keys and values, where it stops; or -1. */
static Py_ssize_t map_head(const uint8_t *b, Py_ssize_t i, Py_ssize_t end, Py_ssize_t *count,
                           Py_ssize_t *stop) {
    if (i >= end) return -1;
    if (b[i] == 0xC1) {
        if (i + 3 > end) return -1;
        *stop = i + 2 + b[i + 1];
        *count = b[i + 2];
        i += 3;
    } else if (b[i] == 0xD1) {
        if (i + 9 > end) return -1;
        *stop = i + 5 + (Py_ssize_t)be32(b + i + 1);
        *count = (Py_ssize_t)be32(b + i + 5);
        i += 9;
    } else {
        return -1;
    }
    if (*stop > end || *stop < i || (*count & 1) || *count > *stop - i ||
        *count / 2 > MAX_ENTRIES)
        return -1;
    return i;
}

/* A map (map8, map32) of entries, each added to E: the index after it, or -1. */
static Py_ssize_t map_entries(const uint8_t *b, Py_ssize_t i, Py_ssize_t end, entries *E,
                              Py_ssize_t *count_out) {
    Py_ssize_t stop, count;
    i = map_head(b, i, end, &count, &stop);
    if (i < 0) return -1;
    for (Py_ssize_t k = 0; k < count; k += 2) {
        entry *e = new_entry(E);
        if (!e) return -1;
        if (read_key(b, &i, stop, e) < 0 || read_value(b, &i, stop, e, 0) < 0) return -1;
    }
    *count_out = count / 2;
    return i == stop ? i : -1;
}

static const char K_SEQ[] = "x-opt-sequence-number";
static const char K_OFFSET[] = "x-opt-offset";
static const char K_TIME[] = "x-opt-enqueued-time";
static const char K_PKEY[] = "x-opt-partition-key";
static const char K_PUBLISHER[] = "x-opt-publisher";

static int key_is(const uint8_t *k, Py_ssize_t n, const char *name, size_t len) {
    return (size_t)n == len && memcmp(k, name, len) == 0;
}

/* The message annotations map at b[i]: the five with columns into the row (symbol or string
 * keys), every other one an entry of E, x-opt-partition-key and x-opt-publisher too
 * (systemProperties); the index after it, or -1 when one is the Python path's to write. */
static Py_ssize_t annotations(const uint8_t *b, Py_ssize_t i, Py_ssize_t end, row *r,
                              int *seen_seq, entries *E) {
    Py_ssize_t stop, count;
    i = map_head(b, i, end, &count, &stop);
    if (i < 0) return -1;
    r->ann_at = E->n;
    for (Py_ssize_t k = 0; k < count; k += 2) {
        if (i >= stop) return -1;
        Py_ssize_t key_at = i;
        uint8_t c = b[i++];
        span key = {0, 0, 0};
        int string_key = c == 0xA3 || c == 0xA1 || c == 0xB3 || c == 0xB1;
        if (string_key && read_bytes_text(b, &i, stop, c, &key) < 0) return -1;
        const uint8_t *name = b + key.pos;
        Py_ssize_t n = key.len;
        const char *column = NULL;
        if (string_key) {
            if (key_is(name, n, K_SEQ, sizeof K_SEQ - 1)) column = K_SEQ;
            else if (key_is(name, n, K_TIME, sizeof K_TIME - 1)) column = K_TIME;
            else if (key_is(name, n, K_OFFSET, sizeof K_OFFSET - 1)) column = K_OFFSET;
            else if (key_is(name, n, K_PKEY, sizeof K_PKEY - 1)) column = K_PKEY;
            else if (key_is(name, n, K_PUBLISHER, sizeof K_PUBLISHER - 1)) column = K_PUBLISHER;
        }
        if (i >= stop) return -1;
        if (column == NULL) { /* systemProperties: text(key), text(value) */
            entry *e = new_entry(E);
            i = key_at;
            if (!e || read_key(b, &i, stop, e) < 0 || read_value(b, &i, stop, e, 0) < 0)
                return -1;
        } else if (column == K_SEQ) {
            if (read_int(b, &i, stop, &r->seq) < 0) return -1;
            *seen_seq = 1;
        } else if (column == K_TIME) {
            int64_t ms;
            if (b[i] == 0x40) {
                r->has_time = 0;
                i += 1;
            } else {
                if (b[i] == 0x83) { /* a timestamp: what the service sends */
                    if (i + 9 > stop) return -1;
                    ms = be64(b + i + 1);
                    i += 9;
                } else if (read_int(b, &i, stop, &ms) < 0) {
                    return -1;
                }
                /* years 1 to 9999 (_message.TIME_MIN_MS/TIME_MAX_MS); the Python path
                   leaves another time null */
                if (ms > 253402300799999LL || ms < -62135596800000LL) return -1;
                r->time_ms = ms;
                r->has_time = 1;
            }
        } else if (column == K_OFFSET) {
            if (read_text(b, &i, stop, &r->offset) < 0) return -1;
        } else {
            span *text = column == K_PKEY ? &r->pkey : &r->publisher;
            if (read_text(b, &i, stop, text) < 0) return -1;
            /* the connector keeps these two in systemProperties as well */
            entry *e = new_entry(E);
            if (!e) return -1;
            e->key_name = column;
            e->key_kind = T_FMT;
            if (text->set) {
                e->value_kind = T_SPAN;
                e->value = *text;
            } else {
                e->value_kind = T_FMT;
                e->value_fmt_len = (uint8_t)sprintf(e->value_fmt, "null");
            }
        }
    }
    r->ann_n = E->n - r->ann_at;
    return i == stop ? i : -1;
}

static const char *const MESSAGE_PROPERTIES[13] = {
    "message-id",   "user-id",          "to",      "subject",
    "reply-to",     "correlation-id",   "content-type", "content-encoding",
    "absolute-expiry-time", "creation-time", "group-id", "group-sequence",
    "reply-to-group-id",
};

/* The message from b[i] to b[end]: 0 and its row, or -1 (the Python path decodes it). */
static int message(const uint8_t *b, Py_ssize_t i, Py_ssize_t end, row *r, entries *E) {
    int seen_seq = 0, seen_annotations = 0, seen_properties = 0, seen_application = 0;
    r->props_at = r->ann_at = r->mprops_at = E->n;
    r->props_n = r->ann_n = r->mprops_n = 0;
    r->ndata = 0;
    r->body_len = 0;
    r->has_time = 0;
    r->offset.set = r->pkey.set = r->publisher.set = 0;
    r->offset.len = r->pkey.len = r->publisher.len = 0;
    while (i < end) {
        if (i + 4 > end || b[i] != 0x00 || b[i + 1] != 0x53) return -1;
        uint8_t section = b[i + 2];
        Py_ssize_t j = i + 3, count, stop;
        switch (section) {
        case 0x75: /* data: vbin8 or vbin32 */
            if (r->ndata == MAX_DATA) return -1;
            if (b[j] == 0xA0) {
                if (j + 2 > end) return -1;
                count = b[j + 1];
                j += 2;
            } else if (b[j] == 0xB0) {
                if (j + 5 > end) return -1;
                count = (Py_ssize_t)be32(b + j + 1);
                j += 5;
            } else {
                return -1;
            }
            if (count > end - j) return -1;
            r->data[r->ndata].pos = j;
            r->data[r->ndata].len = count;
            r->ndata++;
            r->body_len += count;
            i = j + count;
            break;
        case 0x72: /* message annotations, once */
            if (seen_annotations) return -1;
            seen_annotations = 1;
            i = annotations(b, j, end, r, &seen_seq, E);
            if (i < 0) return -1;
            break;
        case 0x70: /* header: a list of at most its 5 fields */
            j = list_head(b, j, end, 5, &count, &stop);
            if (j < 0) return -1;
            for (Py_ssize_t k = 0; k < count; k++)
                if ((j = skip(b, j, stop, 1)) < 0) return -1;
            if (j != stop) return -1;
            i = j;
            break;
        case 0x73: /* properties, once: each field set is a systemProperties entry */
            if (seen_properties++) return -1;
            j = list_head(b, j, end, 13, &count, &stop);
            if (j < 0) return -1;
            r->mprops_at = E->n;
            for (Py_ssize_t k = 0; k < count; k++) {
                if (j >= stop) return -1;
                if (b[j] == 0x40) {
                    j++;
                    continue;
                }
                entry *e = new_entry(E);
                if (!e) return -1;
                e->key_name = MESSAGE_PROPERTIES[k];
                e->key_kind = T_FMT;
                /* absolute-expiry-time, creation-time: milliseconds, as the Java SDK's */
                if (read_value(b, &j, stop, e, k == 8 || k == 9) < 0) return -1;
            }
            if (j != stop) return -1;
            r->mprops_n = E->n - r->mprops_at;
            i = j;
            break;
        case 0x74: /* application properties, once: null or a map (the properties column) */
            if (seen_application++) return -1;
            if (b[j] == 0x40) {
                i = j + 1;
            } else {
                r->props_at = E->n;
                i = map_entries(b, j, end, E, &r->props_n);
                if (i < 0) return -1;
            }
            break;
        case 0x71: /* delivery annotations and footer: not in the schema */
        case 0x78:
            i = skip(b, j, end, 1);
            if (i < 0) return -1;
            break;
        default: /* amqp-sequence, amqp-value (bodies the Python path serialises), unknown */
            return -1;
        }
    }
    /* no data section: the body is null (the Python path's) */
    return (i == end && seen_seq && r->ndata) ? 0 : -1;
}

/* The transfer performative at b[p] (after its descriptor) to b[end]: 0, the message's start,
 * the fields the link counts; -1 when it is not a plain transfer. */
static int transfer(const uint8_t *b, Py_ssize_t p, Py_ssize_t end, int64_t want_handle,
                    row *r, Py_ssize_t *msg) {
    Py_ssize_t count, stop, i;
    int64_t handle, format;
    i = list_head(b, p, end, 11, &count, &stop);
    if (i < 0 || count != 11) return -1;
    if (read_uint(b, &i, stop, &handle) < 0 || handle != want_handle) return -1;
    if (read_uint(b, &i, stop, &r->delivery_id) < 0) return -1;
    /* delivery tag: vbin8 or vbin32 */
    if (i >= stop) return -1;
    if (b[i] == 0xA0) {
        if (i + 2 > stop) return -1;
        r->tag.len = b[i + 1];
        i += 2;
    } else if (b[i] == 0xB0) {
        if (i + 5 > stop) return -1;
        r->tag.len = (Py_ssize_t)be32(b + i + 1);
        i += 5;
    } else {
        return -1;
    }
    if (r->tag.len > stop - i) return -1;
    r->tag.pos = i;
    i += r->tag.len;
    /* message format: a uint or null */
    if (i < stop && b[i] == 0x40) {
        i++;
    } else if (read_uint(b, &i, stop, &format) < 0) {
        return -1;
    }
    if (read_flag(b, &i, stop) < 0) return -1;  /* settled */
    if (read_flag(b, &i, stop) != 0) return -1; /* more: pyamqp assembles the message */
    /* receiver settle mode: null or a ubyte */
    if (i >= stop) return -1;
    if (b[i] == 0x40) {
        i++;
    } else if (b[i] == 0x50 && i + 2 <= stop) {
        i += 2;
    } else {
        return -1;
    }
    if (i >= stop || b[i++] != 0x40) return -1; /* state */
    if (read_flag(b, &i, stop) < 0) return -1;  /* resume */
    if (read_flag(b, &i, stop) != 0) return -1; /* aborted */
    if (read_flag(b, &i, stop) < 0) return -1;  /* batchable */
    if (i != stop) return -1;
    *msg = i;
    return 0;
}

/* New bytes objects of `sizes` (written by the caller) and a zeroed bitmap of `bit_count` bits:
 * 0, or -1 with nothing left allocated and MemoryError set. */
static int new_buffers(PyObject **out, const Py_ssize_t *sizes, int count, uint8_t **bits,
                       Py_ssize_t bit_count) {
    *bits = PyMem_Calloc((size_t)(bit_count + 7) / 8 + 1, 1);
    int ok = *bits != NULL;
    for (int k = 0; k < count; k++) {
        out[k] = ok ? PyBytes_FromStringAndSize(NULL, sizes[k]) : NULL;
        ok = ok && out[k] != NULL;
    }
    if (ok) return 0;
    for (int k = 0; k < count; k++) Py_XDECREF(out[k]);
    PyMem_Free(*bits);
    PyErr_NoMemory();
    return -1;
}

static PyObject *bitmap_or_none(const uint8_t *bits, Py_ssize_t n, Py_ssize_t valid) {
    if (valid == n) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)bits, (n + 7) / 8);
}

/* (buffers..., validity or None): steals the buffers' references, frees the bitmap. */
static PyObject *with_validity(PyObject **buffers, int count, uint8_t *bits, Py_ssize_t n,
                               Py_ssize_t valid) {
    PyObject *validity = bitmap_or_none(bits, n, valid);
    PyMem_Free(bits);
    PyObject *out = validity ? PyTuple_New(count + 1) : NULL;
    if (!out) {
        for (int k = 0; k < count; k++) Py_DECREF(buffers[k]);
        Py_XDECREF(validity);
        return NULL;
    }
    for (int k = 0; k < count; k++) PyTuple_SET_ITEM(out, k, buffers[k]);
    PyTuple_SET_ITEM(out, count, validity);
    return out;
}

/* One string column of n rows: (offsets, values, validity or None). */
static PyObject *text_column(const uint8_t *b, const row *rows, Py_ssize_t n, size_t field) {
    Py_ssize_t total = 0, valid = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const span *s = (const span *)((const char *)&rows[k] + field);
        total += s->len;
        valid += s->set;
    }
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "string column past 32-bit offsets");
        return NULL;
    }
    PyObject *buffers[2];
    const Py_ssize_t sizes[2] = {(n + 1) * 4, total};
    uint8_t *bits;
    if (new_buffers(buffers, sizes, 2, &bits, n) < 0) return NULL;
    PyObject *offsets = buffers[0], *data = buffers[1];
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    char *out = PyBytes_AS_STRING(data);
    int32_t at = 0;
    off[0] = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const span *s = (const span *)((const char *)&rows[k] + field);
        if (s->set) {
            memcpy(out + at, b + s->pos, (size_t)s->len);
            at += (int32_t)s->len;
            bits[k >> 3] |= (uint8_t)(1u << (k & 7));
        }
        off[k + 1] = at;
    }
    return with_validity(buffers, 2, bits, n, valid);
}

static Py_ssize_t key_text(const uint8_t *b, const entry *e, const char **out) {
    if (e->key_name) {
        *out = e->key_name;
        return (Py_ssize_t)strlen(e->key_name);
    }
    if (e->key_kind == T_SPAN) {
        *out = (const char *)b + e->key.pos;
        return e->key.len;
    }
    *out = e->key_fmt;
    return e->key_fmt_len;
}

/* The length of a signed byte's decimal text. */
static const uint8_t SIGNED_LEN[256] = {
#define L1(x) (x < 10 ? 1 : x < 100 ? 2 : 3)
#define LN(x) (x > 246 ? 2 : x > 156 ? 3 : 4) /* 256 - x: 1..9 -> 2, 10..99 -> 3, 100.. -> 4 */
#define R8(f, x) f(x), f(x + 1), f(x + 2), f(x + 3), f(x + 4), f(x + 5), f(x + 6), f(x + 7)
    R8(L1, 0),    R8(L1, 8),    R8(L1, 16),   R8(L1, 24),   R8(L1, 32),   R8(L1, 40),
    R8(L1, 48),   R8(L1, 56),   R8(L1, 64),   R8(L1, 72),   R8(L1, 80),   R8(L1, 88),
    R8(L1, 96),   R8(L1, 104),  R8(L1, 112),  R8(L1, 120),  R8(LN, 128),  R8(LN, 136),
    R8(LN, 144),  R8(LN, 152),  R8(LN, 160),  R8(LN, 168),  R8(LN, 176),  R8(LN, 184),
    R8(LN, 192),  R8(LN, 200),  R8(LN, 208),  R8(LN, 216),  R8(LN, 224),  R8(LN, 232),
    R8(LN, 240),  R8(LN, 248),
#undef R8
#undef LN
#undef L1
};

/* The length of a value's text; with `out`, the text is also written there. */
static Py_ssize_t value_text(const uint8_t *b, const entry *e, char *out) {
    if (e->value_kind == T_SPAN) {
        if (out) memcpy(out, b + e->value.pos, (size_t)e->value.len);
        return e->value.len;
    }
    if (e->value_kind == T_FMT) {
        if (out) memcpy(out, e->value_fmt, e->value_fmt_len);
        return e->value_fmt_len;
    }
    /* T_BYTES: [0,-1,0,-128] (_values.byte_array) */
    const uint8_t *p = b + e->value.pos;
    Py_ssize_t n = e->value.len, len = 2 + (n ? n - 1 : 0);
    for (Py_ssize_t k = 0; k < n; k++) len += SIGNED_LEN[p[k]];
    if (out) {
        char *o = out;
        *o++ = '[';
        for (Py_ssize_t k = 0; k < n; k++) {
            if (k) *o++ = ',';
            o += sprintf(o, "%d", (int)(int8_t)p[k]);
        }
        *o = ']';
    }
    return len;
}

/* A row's entries of one map column, as (first, count) pairs in E: systemProperties are the
 * annotations without a column, then the message properties. */
static void entry_ranges(const row *r, int system, Py_ssize_t ranges[2][2]) {
    ranges[0][0] = system ? r->ann_at : r->props_at;
    ranges[0][1] = system ? r->ann_n : r->props_n;
    ranges[1][0] = system ? r->mprops_at : 0;
    ranges[1][1] = system ? r->mprops_n : 0;
}

/* Where a map column's entries go (NULL: only count them). */
typedef struct {
    int32_t *off, *ko, *vo;
    char *kd, *vd;
    uint8_t *bits;
} map_out;

/* One walk over the rows' entries of a map column: sums[] gets the entries, key bytes and
 * value bytes; with `o`, each is also written. Values are never null (a null is "null"). */
static void map_walk(const uint8_t *b, const row *rows, Py_ssize_t n, const entries *E,
                     int system, const map_out *o, Py_ssize_t sums[4]) {
    const char *text;
    Py_ssize_t at = 0, kat = 0, vat = 0;
    if (o) o->off[0] = o->ko[0] = o->vo[0] = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t ranges[2][2];
        entry_ranges(&rows[k], system, ranges);
        for (int g = 0; g < 2; g++)
            for (Py_ssize_t x = ranges[g][0]; x < ranges[g][0] + ranges[g][1]; x++) {
                const entry *e = &E->items[x];
                Py_ssize_t len = key_text(b, e, &text);
                if (o) memcpy(o->kd + kat, text, (size_t)len);
                kat += len;
                vat += value_text(b, e, o ? o->vd + vat : NULL);
                if (o) o->bits[at >> 3] |= (uint8_t)(1u << (at & 7));
                at++;
                if (o) o->ko[at] = (int32_t)kat, o->vo[at] = (int32_t)vat;
            }
        if (o) o->off[k + 1] = (int32_t)at;
    }
    sums[0] = at, sums[1] = kat, sums[2] = vat, sums[3] = at;
}

/* One map column of n rows: (offsets, key offsets, keys, value offsets, values, validity or
 * None). `system`: annotations without a column, then message properties; else application
 * properties. */
static PyObject *map_column(const uint8_t *b, const row *rows, Py_ssize_t n, const entries *E,
                            int system) {
    Py_ssize_t sums[4];
    map_walk(b, rows, n, E, system, NULL, sums);
    Py_ssize_t count = sums[0];
    if (sums[1] > INT32_MAX || sums[2] > INT32_MAX || count > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "map column past 32-bit offsets");
        return NULL;
    }
    PyObject *buffers[5];
    const Py_ssize_t sizes[5] = {(n + 1) * 4, (count + 1) * 4, sums[1], (count + 1) * 4, sums[2]};
    uint8_t *bits;
    if (new_buffers(buffers, sizes, 5, &bits, count) < 0) return NULL;
    const map_out o = {
        (int32_t *)PyBytes_AS_STRING(buffers[0]), (int32_t *)PyBytes_AS_STRING(buffers[1]),
        (int32_t *)PyBytes_AS_STRING(buffers[3]), PyBytes_AS_STRING(buffers[2]),
        PyBytes_AS_STRING(buffers[4]),            bits,
    };
    map_walk(b, rows, n, E, system, &o, sums);
    return with_validity(buffers, 5, bits, count, sums[3]);
}

static PyObject *columns(const uint8_t *b, const row *rows, Py_ssize_t n, const entries *E) {
    Py_ssize_t total = 0, timed = 0;
    int contiguous = 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        total += rows[k].body_len;
        /* seq + 1 only below INT64_MAX: signed overflow is undefined */
        if (k && (rows[k - 1].seq == INT64_MAX || rows[k].seq != rows[k - 1].seq + 1))
            contiguous = 0;
        timed += rows[k].has_time;
    }
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "body column past 32-bit offsets");
        return NULL;
    }
    PyObject *buffers[4];
    const Py_ssize_t sizes[4] = {n * 8, n * 8, (n + 1) * 4, total};
    uint8_t *bits;
    if (new_buffers(buffers, sizes, 4, &bits, n) < 0) return NULL;
    PyObject *seq = buffers[0], *times = buffers[1], *body_off = buffers[2], *body = buffers[3];
    int64_t *sq = (int64_t *)PyBytes_AS_STRING(seq);
    int64_t *tm = (int64_t *)PyBytes_AS_STRING(times);
    int32_t *bo = (int32_t *)PyBytes_AS_STRING(body_off);
    char *out = PyBytes_AS_STRING(body);
    int32_t at = 0;
    bo[0] = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const row *r = &rows[k];
        sq[k] = r->seq;
        tm[k] = r->has_time ? r->time_ms * 1000 : 0;
        if (r->has_time) bits[k >> 3] |= (uint8_t)(1u << (k & 7));
        for (int d = 0; d < r->ndata; d++) {
            memcpy(out + at, b + r->data[d].pos, (size_t)r->data[d].len);
            at += (int32_t)r->data[d].len;
        }
        bo[k + 1] = at;
    }
    PyObject *time_valid = bitmap_or_none(bits, n, timed);
    PyMem_Free(bits);
    PyObject *offset = time_valid ? text_column(b, rows, n, offsetof(row, offset)) : NULL;
    PyObject *pkey = offset ? text_column(b, rows, n, offsetof(row, pkey)) : NULL;
    PyObject *publisher = pkey ? text_column(b, rows, n, offsetof(row, publisher)) : NULL;
    PyObject *props = publisher ? map_column(b, rows, n, E, 0) : NULL;
    PyObject *sysprops = props ? map_column(b, rows, n, E, 1) : NULL;
    if (!sysprops) {
        Py_XDECREF(publisher);
        Py_XDECREF(props);
        Py_DECREF(seq);
        Py_DECREF(times);
        Py_DECREF(body_off);
        Py_DECREF(body);
        Py_XDECREF(time_valid);
        Py_XDECREF(offset);
        Py_XDECREF(pkey);
        return NULL;
    }
    return Py_BuildValue("{s:n,s:L,s:L,s:O,s:n,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N}", "rows", n,
                         "first_seq", (long long)rows[0].seq, "last_seq",
                         (long long)rows[n - 1].seq, "contiguous",
                         contiguous ? Py_True : Py_False, "body_bytes", total, "seq", seq,
                         "time", times, "time_valid", time_valid, "body_offsets", body_off,
                         "body", body, "offset", offset, "partition_key", pkey, "publisher",
                         publisher, "properties", props, "system_properties", sysprops);
}

PyDoc_STRVAR(scan_doc,
"scan(buffer, start, end, channel, handle, limit, tags) -> None or (taken, new_start,\n"
"last_performative_start, last_frame_end, last_delivery_id, columns)\n\n"
"Plain transfer frames of `handle` on `channel` whole in buffer[start:end], at most `limit`;\n"
"each delivery tag is added to the set `tags` (None: not kept). None when the first frame\n"
"is not one.");

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end, limit;
    int channel;
    long long want_handle;
    PyObject *tags;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nniLnO", &view, &start, &end, &channel, &want_handle, &limit,
                          &tags))
        return NULL;
    if (tags != Py_None && !PySet_Check(tags)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "tags must be a set or None");
        return NULL;
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    if (start < 0 || end > view.len || start > end || limit <= 0) {
        PyBuffer_Release(&view);
        if (limit <= 0) Py_RETURN_NONE;
        PyErr_SetString(PyExc_ValueError, "start and end must lie in the buffer");
        return NULL;
    }
    row *rows = PyMem_Malloc(sizeof(row) * (size_t)(limit < 4096 ? limit : 4096));
    if (!rows) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    if (limit > 4096) limit = 4096;
    Py_ssize_t n = 0, at = start, last_p = 0, last_end = 0;
    entries E = {NULL, 0, 0};
    while (n < limit && end - at >= 8) {
        Py_ssize_t size = (Py_ssize_t)be32(b + at);
        Py_ssize_t doff = 4 * (Py_ssize_t)b[at + 4];
        Py_ssize_t fend = at + size, p = at + doff, msg;
        if (size > end - at || doff < 8 || p + 3 > fend || b[at + 5] != 0 ||
            b[at + 6] != ((channel >> 8) & 0xFF) || b[at + 7] != (channel & 0xFF) ||
            b[p] != 0x00 || b[p + 1] != 0x53 || b[p + 2] != 0x14)
            break;
        row *r = &rows[n];
        Py_ssize_t mark = E.n;
        if (transfer(b, p + 3, fend, want_handle, r, &msg) < 0 ||
            message(b, msg, fend, r, &E) < 0) {
            E.n = mark; /* the Python path takes this frame, entries and all */
            break;
        }
        if (tags != Py_None) {
            PyObject *tag = PyBytes_FromStringAndSize((const char *)b + r->tag.pos, r->tag.len);
            if (!tag || PySet_Add(tags, tag) < 0) {
                Py_XDECREF(tag);
                PyMem_Free(rows);
                PyMem_Free(E.items);
                PyBuffer_Release(&view);
                return NULL;
            }
            Py_DECREF(tag);
        }
        last_p = p;
        last_end = fend;
        at = fend;
        n++;
    }
    PyObject *result;
    if (!n) {
        Py_INCREF(Py_None);
        result = Py_None;
    } else {
        PyObject *cols = columns(b, rows, n, &E);
        result = cols ? Py_BuildValue("(nnnnLN)", n, at, last_p, last_end,
                                      (long long)rows[n - 1].delivery_id, cols)
                      : NULL;
    }
    PyMem_Free(rows);
    PyMem_Free(E.items);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_amqp_columns",
    "Plain AMQP transfer frames to Arrow column buffers (see _amqp_columns.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__amqp_columns(void) { return PyModule_Create(&module); }
