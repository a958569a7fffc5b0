# Test accuracy per epoch from a cpd-train --csv file, in two panels: every run,
# and the runs near fp32 zoomed in (on one axis the fp32 and 8-bit curves lie on top
# of each other; cpd-train's own --plot has the same two panels).
# Colour: gradient format; solid: APS on, dashed: APS off. fp32 is drawn once:
# APS leaves its weights bit for bit unchanged.
#   gnuplot -e "csv='docs/img/results-long.csv'; png='docs/img/results-long.png'; \
#               fmts='fp32 e4m3 e3m0'; zfmts='fp32 e4m3'; zlo=0.84; zhi=0.88" docs/img/plot-results.gp
if (!exists("csv") || !exists("png")) { print "set csv='FILE.csv' and png='FILE.png' with -e"; exit }
if (!exists("title")) title = "Fashion-MNIST MLP, 8 workers: test accuracy per epoch"
if (!exists("zlo")) zlo = 0.83
if (!exists("zhi")) zhi = 0.89
set terminal pngcairo size 1200,520 noenhanced font ",11"
set output png
set datafile separator ","
set grid
set xlabel "epoch"
set xtics 1
set ylabel "test accuracy"
stats csv using 4 nooutput
set xrange [1:STATS_max]
# the formats of the runs, fp32 first, and those of the zoomed panel
if (!exists("fmts")) fmts = "fp32 e5m2 e4m3 e3m0"
if (!exists("zfmts")) zfmts = "fp32 e5m2 e4m3"
colour(f) = f eq "fp32" ? "#000000" : f eq "e5m2" ? "#009e73" : f eq "e4m3" ? "#0072b2" : "#d55e00"
# column 2 is the format, 3 APS on/off, 4 the epoch, 6 the accuracy
sel(f, a) = (strcol(2) eq f && strcol(3) eq a) ? column(6) : NaN
set multiplot layout 1,2 title title
set title "all runs"
set yrange [0.6:0.9]
set key bottom right
plot for [f in fmts] csv using 4:(sel(f, "on")) with linespoints lw 2 dt 1 pt 5 ps 0.8 lc rgb colour(f) \
       title (f eq "fp32" ? "fp32 (APS: same weights)" : f . ", APS"), \
     for [f in fmts[6:*]] csv using 4:(sel(f, "off")) with linespoints lw 2 dt 2 pt 7 ps 0.8 \
       lc rgb colour(f) title f . ", no APS"
set title "zoomed in: fp32 and the 8-bit formats"
set yrange [zlo:zhi]
unset key
plot for [f in zfmts] csv using 4:(sel(f, "on")) with linespoints lw 2 dt 1 pt 5 ps 0.8 lc rgb colour(f), \
     for [f in zfmts[6:*]] csv using 4:(sel(f, "off")) with linespoints lw 2 dt 2 pt 7 ps 0.8 lc rgb colour(f)
unset multiplot
