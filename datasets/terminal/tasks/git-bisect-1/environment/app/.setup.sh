set -e
export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.com GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.com
mkdir -p repo && cd repo && git init -q -b main
printf 'def total():\n    return sum(VALUES)\n\nVALUES = []\n' > calc.py
printf '#!/bin/sh\n# passes while every value is positive\npython3 -c "import calc; assert all(v > 0 for v in calc.VALUES), calc.VALUES"\n' > test.sh && chmod +x test.sh
git add -A && git commit -qm 'step 0'
echo 'VALUES.append(31)' >> calc.py && git commit -qam 'step 1'
echo 'VALUES.append(42)' >> calc.py && git commit -qam 'step 2'
echo 'VALUES.append(47)' >> calc.py && git commit -qam 'step 3'
echo 'VALUES.append(44)' >> calc.py && git commit -qam 'step 4'
echo 'VALUES.append(20)' >> calc.py && git commit -qam 'step 5'
echo 'VALUES.append(50)' >> calc.py && git commit -qam 'step 6'
echo 'VALUES.append(15)' >> calc.py && git commit -qam 'step 7'
echo 'VALUES.append(3)' >> calc.py && git commit -qam 'step 8'
echo 'VALUES.append(42)' >> calc.py && git commit -qam 'step 9'
echo 'VALUES.append(-15)' >> calc.py && git commit -qam 'step 10'
echo 'VALUES.append(39)' >> calc.py && git commit -qam 'step 11'
echo 'VALUES.append(8)' >> calc.py && git commit -qam 'step 12'
echo 'VALUES.append(20)' >> calc.py && git commit -qam 'step 13'
echo 'VALUES.append(7)' >> calc.py && git commit -qam 'step 14'
echo 'VALUES.append(33)' >> calc.py && git commit -qam 'step 15'
echo 'VALUES.append(39)' >> calc.py && git commit -qam 'step 16'
echo 'VALUES.append(31)' >> calc.py && git commit -qam 'step 17'
echo 'VALUES.append(17)' >> calc.py && git commit -qam 'step 18'
