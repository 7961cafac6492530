#!/bin/bash
cd /app/config
sed -i 's/^pool_size = .*/pool_size = 38/' app.ini
printf '\n[cache]\nttl = 900\n' >> app.ini
jq '.["nectar"] = true | del(.["kelvin"])' features.json > features.tmp && mv features.tmp features.json
