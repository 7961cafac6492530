#!/bin/bash
cd /app/repo
git bisect start HEAD "$(git rev-list --max-parents=0 HEAD)" >/dev/null
git bisect run ./test.sh >/dev/null
git rev-parse refs/bisect/bad > /app/bad_commit.txt
git bisect reset >/dev/null
