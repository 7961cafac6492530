#!/bin/bash
cd /app/nectar
chmod 755 scripts/quartz.sh
chmod 600 secrets/zephyr.key
mkdir -p releases/v4.0
ln -sfn releases/v4.0 current
