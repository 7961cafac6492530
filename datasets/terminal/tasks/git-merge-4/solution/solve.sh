#!/bin/bash
cd /app/repo
git checkout -q main
git merge feature || true
printf 'name=service\nnectar=on\ntimeout=95\nmode=prod\nmaple_level=8\n' > settings.conf
git add settings.conf
git commit -qm 'merge feature'
