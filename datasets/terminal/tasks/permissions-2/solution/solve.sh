#!/bin/bash
cd /app/garnet
chmod 700 scripts/indigo.sh
chmod 600 secrets/maple.key
mkdir -p releases/v9.7
ln -sfn releases/v9.7 current
