#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        printf("usage: cinfer <run|tokenize|info|convert|synth> ...\n");
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "cinfer: unknown command '%s'\n", argv[1]);
    return 2;
}
