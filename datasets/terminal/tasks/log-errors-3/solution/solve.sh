#!/bin/bash
cd /app
grep -c ' ERROR \[zephyr\] ' logs/app.log > answer.txt
grep ' ERROR \[zephyr\] ' logs/app.log | sed 's/^[^]]*\] //' | sort | uniq -c \
  | sort -k1,1nr -k2 | head -n 1 | sed 's/^ *[0-9]* //' >> answer.txt
