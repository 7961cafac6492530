#!/bin/bash
cd /app/config
sed -i 's/^pool_size = .*/pool_size = 14/' app.ini
printf '\n[cache]\nttl = 60\n' >> app.ini
jq '.["kelvin"] = true | del(.["ember"])' features.json > features.tmp && mv features.tmp features.json
