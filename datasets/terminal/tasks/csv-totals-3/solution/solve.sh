#!/bin/bash
cd /app
{ echo region,total; tail -n +2 sales.csv | awk -F, '{t[$2]+=$4} END {for (r in t) print r "," t[r]}' \
  | sort -t, -k2,2nr; } > totals.csv
