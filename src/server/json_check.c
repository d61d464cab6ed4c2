/* See json_check.h.  A single pass over the text with a stack of the containers it is in: for an object,
 * the key being read or last read; for an array, the index of the current element. */
#include "server/json_check.h"

#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 64 // deeper than any request we parse; beyond it the path is cut, the answer stays right

struct frame {
    bool array;
    long index;      // array: the current element
    const char *key; // object: the current key (raw, escapes not decoded)
    size_t key_len;
};

static void write_path(const struct frame *st, int depth, char *path, size_t cap) {
    size_t n = 0;
    path[0] = '\0';
    for (int i = 0; i < depth && i < MAX_DEPTH && n < cap; i++) {
        int w = st[i].array ? snprintf(path + n, cap - n, "[%ld]", st[i].index)
                            : snprintf(path + n, cap - n, "%s%.*s", n ? "." : "",
                                       (int)(st[i].key_len > 64 ? 64 : st[i].key_len), st[i].key);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

bool json_find_nul_escape(const char *text, size_t len, char *path, size_t cap) {
    struct frame st[MAX_DEPTH];
    int depth = 0;
    bool expect_key = false; // in an object, the next string is a key
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        switch (c) {
        case '{':
        case '[':
            if (depth < MAX_DEPTH)
                st[depth] = (struct frame){c == '[', 0, "", 0};
            depth++;
            expect_key = c == '{';
            break;
        case '}':
        case ']':
            depth--;
            expect_key = false;
            break;
        case ',':
            if (depth > 0 && depth <= MAX_DEPTH && st[depth - 1].array)
                st[depth - 1].index++;
            else
                expect_key = true;
            break;
        case '"': {
            size_t start = ++i;
            bool nul = false;
            for (; i < len && text[i] != '"'; i++) {
                if (text[i] != '\\')
                    continue;
                if (i + 5 < len && memcmp(text + i + 1, "u0000", 5) == 0)
                    nul = true;
                i++; // the escaped character (for \u, the hex digits are plain characters)
            }
            bool is_key = expect_key && depth > 0 && depth <= MAX_DEPTH && !st[depth - 1].array;
            if (is_key) {
                st[depth - 1].key = text + start;
                st[depth - 1].key_len = i - start;
                expect_key = false;
            }
            if (nul) {
                if (cap > 0)
                    write_path(st, depth, path, cap);
                return true;
            }
            break;
        }
        default:
            break;
        }
    }
    return false;
}
