/* Look-ups into the generated tables of unicode_wpm_data.c (see unicode_wpm.h). */
#include "tokenizer/unicode_wpm.h"

unsigned wpm_cpt_flags(uint32_t cp) {
    if (cp >= 0x110000)
        return 0;
    int lo = 0, hi = wpm_n_cat_runs - 1; // runs[0].first == 0: find the last run starting at or before cp
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (wpm_cat_runs[mid].first <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return wpm_cat_runs[lo].flags;
}

uint32_t wpm_cpt_lower(uint32_t cp) {
    int lo = 0, hi = wpm_n_lower - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (wpm_lower[mid].from == cp)
            return wpm_lower[mid].to;
        if (wpm_lower[mid].from < cp)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return cp;
}

uint32_t wpm_cpt_nfd_first(uint32_t cp) {
    int lo = 0, hi = wpm_n_nfd - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (cp < wpm_nfd[mid].first)
            hi = mid - 1;
        else if (cp > wpm_nfd[mid].last)
            lo = mid + 1;
        else
            return wpm_nfd[mid].value;
    }
    return cp;
}
