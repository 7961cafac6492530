#!/bin/bash
cat > /app/Makefile <<'EOF'
SOURCES := $(sort $(wildcard src/*.txt))

build/book.txt: $(SOURCES)
	mkdir -p build
	cat $(SOURCES) > $@

clean:
	rm -rf build

.PHONY: clean
EOF
