set -e
export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.com GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.com
mkdir -p repo && cd repo && git init -q -b main
printf 'name=service\ntimeout=23\nmode=prod\n' > settings.conf
git add settings.conf && git commit -qm 'initial settings'
git checkout -qb feature
sed -i 's/^timeout=.*/timeout=54/' settings.conf && echo 'sierra_level=1' >> settings.conf
git commit -qam 'feature: tune timeout'
git checkout -q main
sed -i 's/^timeout=.*/timeout=21/' settings.conf && sed -i '1a zephyr=on' settings.conf
git commit -qam 'main: change timeout'
