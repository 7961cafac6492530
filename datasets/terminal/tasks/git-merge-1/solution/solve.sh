#!/bin/bash
cd /app/repo
git checkout -q main
git merge feature || true
printf 'name=service\nquartz=on\nworkers=64\nmode=prod\nbravo_level=8\n' > settings.conf
git add settings.conf
git commit -qm 'merge feature'
