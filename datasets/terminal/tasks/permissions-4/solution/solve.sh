#!/bin/bash
cd /app/quartz
chmod 755 scripts/kelvin.sh
chmod 600 secrets/harbor.key
mkdir -p releases/v1.1
ln -sfn releases/v1.1 current
