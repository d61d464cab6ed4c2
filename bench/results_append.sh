# bench/results_append.sh — sourced by bench/kernels.sh and bench/serve.sh (not run on its own).
# results_append RESULTS SECTION INTRO START CMDLINE NOTE TABLE BLOCK
#   appends a dated block ("### START", the command, NOTE, the table file TABLE) at the end of the section
#   "## SECTION" of RESULTS (creating the file and the section, with the line INTRO, when missing); BLOCK is a
#   scratch file.  Returns non-zero when RESULTS cannot be rewritten.
results_append() {
    local results=$1 section=$2 intro=$3 start=$4 cmdline=$5 note=$6 table=$7 block=$8
    {
        echo "### $start"
        echo
        echo "\`$cmdline\`"
        echo
        echo "$note"
        echo
        cat "$table"
        echo
    } >"$block" || return 1
    [ -f "$results" ] || printf '# Benchmark results\n' >"$results"
    if ! grep -q "^## $section[[:space:]]*\$" "$results"; then
        printf '\n## %s\n\n%s\n\n' "$section" "$intro" >>"$results"
    fi
    awk -v blk="$block" -v sec="## $section" '
        function emit(  l) { while ((getline l < blk) > 0) print l; close(blk); done = 1 }
        /^## / { if (insec && !done) emit(); t = $0; sub(/[[:space:]]+$/, "", t); insec = (t == sec) }
        { print }
        END { if (!done) emit() }
    ' "$results" >"$results.tmp" && mv "$results.tmp" "$results"
}
