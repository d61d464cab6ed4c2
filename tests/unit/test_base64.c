/* core/base64 against RFC 4648's test vectors (section 10) and Python's base64 module on float bytes. */
#include "core/base64.h" // first: the header must compile on its own

#include <string.h>

#include "test.h"

TEST(rfc4648_vectors) {
    static const char *const want[][2] = {
        {"", ""},
        {"f", "Zg=="},
        {"fo", "Zm8="},
        {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="},
        {"fooba", "Zm9vYmE="},
        {"foobar", "Zm9vYmFy"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char out[16];
        size_t n = strlen(want[i][0]);
        CHECK(base64_encoded_len(n) == strlen(want[i][1]));
        base64_encode(want[i][0], n, out);
        CHECK(strcmp(out, want[i][1]) == 0);
    }
}

TEST(every_byte_value) {
    // python3 -c "import base64; print(base64.b64encode(bytes([250, 251, 252, 253, 254, 255, 0, 0x80, 0xff])))"
    unsigned char in[9] = {250, 251, 252, 253, 254, 255, 0, 0x80, 0xff};
    char out[16];
    base64_encode(in, sizeof in, out);
    CHECK(strcmp(out, "+vv8/f7/AID/") == 0);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(rfc4648_vectors);
    RUN(every_byte_value);
    return test_exit_code();
}
