#!/bin/bash
cd /app/ember
chmod 700 scripts/yarrow.sh
chmod 600 secrets/cedar.key
mkdir -p releases/v7.17
ln -sfn releases/v7.17 current
