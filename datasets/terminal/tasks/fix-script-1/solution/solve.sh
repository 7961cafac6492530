#!/bin/bash
cat > /app/count.sh <<'EOF'
#!/bin/bash
# usage: count.sh FILE...   prints "<lines> <file>" for each file, then "total <sum>"
total=0
for file in "$@"; do
  n=$(wc -l < "$file")
  echo "$n $file"
  total=$((total + n))
done
echo "total $total"
EOF
chmod +x /app/count.sh
