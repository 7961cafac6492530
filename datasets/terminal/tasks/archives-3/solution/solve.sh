#!/bin/bash
set -e
cd /app && mkdir -p out work && tar -C work -xzf incoming/bundle.tar.gz
(cd work && find data -name '*.csv' | sort | tar -czf ../out/csv_only.tar.gz -T -)
(cd work && find data -type f -printf '%s %p\n' | sort -nr | head -n 1 | cut -d' ' -f2) > out/largest.txt
