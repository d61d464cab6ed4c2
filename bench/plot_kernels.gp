# Decode throughput (llama-batched-bench's S_TG) against the number of parallel sequences, for cinfer, native
# llama.cpp and cinfer's roofline bound, one colour per model file.  Written by bench/kernels.sh:
#   gnuplot -e "datafile='bench/out/kernels.dat'; outfile='bench/out/kernels.png'; nseries=N; per=3" \
#           bench/plot_kernels.gp
# The data file holds one block per series (separated by two blank lines), its first line the series title,
# then "B tokens/s" rows.  Series come in groups of `per` per model (cinfer, [llama.cpp,] roofline).
if (!exists("datafile")) datafile = 'bench/out/kernels.dat'
if (!exists("outfile")) outfile = 'bench/out/kernels.png'
if (!exists("nseries")) nseries = 3
if (!exists("per")) per = 3

set terminal pngcairo size 1100,650 enhanced font ",10"
set output outfile
set title "Batched decode: tokens/s vs parallel sequences (one token per sequence per forward call)"
set xlabel "parallel sequences B"
set ylabel "decode tokens/s (S\\_TG)"
set logscale x 2
set logscale y 10
set grid xtics ytics mytics
set key outside right top vertical Left reverse noenhanced
set style data linespoints

# position in the group: 0 cinfer (solid, circles), 1 llama.cpp (dashed, triangles), last roofline (dotted)
dash(i) = (i % per == per - 1) ? 3 : (i % per == 0 ? 1 : 2)
point(i) = (i % per == per - 1) ? 0 : (i % per == 0 ? 7 : 9)
plot for [i=0:nseries-1] datafile index i using 1:2 title columnheader(1) \
    lc (i / per + 1) dt dash(i) pt point(i) lw 2 ps 1.2
