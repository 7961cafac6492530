#!/bin/bash
cd /app/config
sed -i 's/^pool_size = .*/pool_size = 33/' app.ini
printf '\n[cache]\nttl = 900\n' >> app.ini
jq '.["alpha"] = true | del(.["xenon"])' features.json > features.tmp && mv features.tmp features.json
