#!/bin/bash
cd /app/kelvin
chmod 700 scripts/indigo.sh
chmod 600 secrets/xenon.key
mkdir -p releases/v5.13
ln -sfn releases/v5.13 current
