#!/bin/bash
cd /app/repo
git checkout -q main
git merge feature || true
printf 'name=service\nzephyr=on\ntimeout=54\nmode=prod\nsierra_level=1\n' > settings.conf
git add settings.conf
git commit -qm 'merge feature'
