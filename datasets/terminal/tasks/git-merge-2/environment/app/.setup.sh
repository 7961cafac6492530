set -e
export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.com GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.com
mkdir -p repo && cd repo && git init -q -b main
printf 'name=service\nworkers=78\nmode=prod\n' > settings.conf
git add settings.conf && git commit -qm 'initial settings'
git checkout -qb feature
sed -i 's/^workers=.*/workers=22/' settings.conf && echo 'yarrow_level=4' >> settings.conf
git commit -qam 'feature: tune workers'
git checkout -q main
sed -i 's/^workers=.*/workers=56/' settings.conf && sed -i '1a nectar=on' settings.conf
git commit -qam 'main: change workers'
