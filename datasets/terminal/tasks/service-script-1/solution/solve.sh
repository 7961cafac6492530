#!/bin/bash
cat > /app/svc.sh <<'EOF'
#!/bin/sh
pidfile=/app/delta.pid
case "$1" in
  start) nohup python3 /app/delta.py >/dev/null 2>&1 & echo $! > "$pidfile" ;;
  status) if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then echo running; exit 0;
          else echo stopped; exit 1; fi ;;
  stop) [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null; rm -f "$pidfile" ;;
esac
EOF
chmod +x /app/svc.sh
