#!/bin/bash
cd /app/config
sed -i 's/^pool_size = .*/pool_size = 31/' app.ini
printf '\n[cache]\nttl = 300\n' >> app.ini
jq '.["nectar"] = true | del(.["raven"])' features.json > features.tmp && mv features.tmp features.json
