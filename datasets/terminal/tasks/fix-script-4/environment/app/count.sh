#!/bin/bash
# usage: count.sh FILE...   prints "<lines> <file>" for each file, then "total <sum>"
total=0
for file in "$@"; do
  n=$(wc -l < "$file")
  echo "$n $file"
  total=$((total + n - 1))
done
echo "total $total"
