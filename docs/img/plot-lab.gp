# Speedup over fp32 MPI_Allreduce of each format's fastest cpd algorithm on the network
# lab, against the link's rate, for 64 MiB of float32 gradient: W = 2 and W = 4 ranks.
# Input: bench/mpi/lab_summary.py's CSV (ranks, link_gbit, mib, format, speedup, algorithm).
#   gnuplot -e "csv='docs/img/lab-summary-2026-11-25.csv'; png='docs/img/lab-speedup.png'" docs/img/plot-lab.gp
if (!exists("csv") || !exists("png")) { print "set csv='FILE.csv' and png='FILE.png' with -e"; exit }
if (!exists("mib")) mib = 64
set terminal pngcairo size 1200,480 noenhanced font ",11"
set output png
set datafile separator ","
set key bottom left
set grid
set logscale x
set logscale y
set xrange [0.8:32]
set yrange [0.1:8]
set xtics ("1" 1, "10" 10, "25" 25)
set ytics ("0.1" 0.1, "0.25" 0.25, "0.5" 0.5, "1" 1, "2" 2, "4" 4, "8" 8)
set xlabel "link rate per NIC (Gbit/s)"
set ylabel "speedup over fp32 MPI_Allreduce"
fmts = "e4m3fn e5m2 fp16 bf16"
set multiplot layout 1,2 title sprintf("network lab, %d MiB of float32 gradient, 2 cores shared by all ranks", mib)
do for [w in "2 4"] {
  set title sprintf("W = %s ranks", w)
  plot for [f in fmts] csv skip 1 using ($1 == w + 0 && $3 == mib && strcol(4) eq f ? $2 : 1/0):5 \
         with linespoints lw 2 pt 7 title f, \
       1 with lines lc rgb "black" dt 1 title "fp32", \
       4 with lines lc rgb "gray40" dt 2 title "8-bit bytes (4x)", \
       2 with lines lc rgb "gray60" dt 3 title "16-bit bytes (2x)"
}
unset multiplot
