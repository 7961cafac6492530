#!/bin/bash
cd /app/config
sed -i 's/^pool_size = .*/pool_size = 55/' app.ini
printf '\n[cache]\nttl = 900\n' >> app.ini
jq '.["maple"] = true | del(.["cedar"])' features.json > features.tmp && mv features.tmp features.json
