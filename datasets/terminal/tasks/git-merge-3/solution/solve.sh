#!/bin/bash
cd /app/repo
git checkout -q main
git merge feature || true
printf 'name=service\ncedar=on\nport=86\nmode=prod\njuniper_level=5\n' > settings.conf
git add settings.conf
git commit -qm 'merge feature'
