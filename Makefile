# Every target works on a fresh clone: node_modules is installed on first use.
.PHONY: all deps proto build test test-lts run bench bench-attacks clean settings-table certs image

all: build

# npm ci installs exactly the lock file (every platform's optional packages are in it), so npm 10
# and npm 11 give the same tree.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

deps: node_modules/.package-lock.json

proto: deps
	bash api/generate.sh

build: deps
	npx tsc -p tsconfig.json

# The test command of the README and of .ci/run: obtain the servers and clients the tests start
# (Redis, Memcached, openssl; grpcio, Go and grpc-go, h2load and nghttp), type-check everything,
# build the programs the end-to-end tests start, then run Jest with a JSON summary for CI. Two
# Jest workers at least (the suite holds on a loaded 2-core machine), one per core above that.
JEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); if [ "$$n" -gt 2 ]; then echo $$((n - 1)); else echo 2; fi)
JEST_RESULTS ?= test-results.json
test: build
	bash scripts/test-servers.sh
	npx tsc -p tsconfig.test.json
	npx jest --ci --maxWorkers=$(JEST_WORKERS) --json --outputFile=$(JEST_RESULTS)

# The same tests on the current Node.js LTS line, whatever Node runs make: its official binary
# from the npm registry (the node-linux-<arch> package), kept under .cache/. Jest, and the programs
# the tests start (with Jest's node), run on it; the compile and type-check are `make test`'s.
# CI runs both.
NODE_LTS_VERSION := 26.12.1
NODE_LTS := .cache/node-$(NODE_LTS_VERSION)
$(NODE_LTS)/bin/node:
	bash scripts/node-lts.sh $(NODE_LTS_VERSION) $(NODE_LTS)

test-lts: build $(NODE_LTS)/bin/node
	bash scripts/test-servers.sh
	PATH="$(CURDIR)/$(NODE_LTS)/bin:$$PATH" npx jest --ci --maxWorkers=$(JEST_WORKERS) --json --outputFile=test-results-lts.json

# Start the service on the embedded memory store with the bundled example config.
run: build
	BACKEND_TYPE=memory RUNTIME_ROOT=examples/runtime RUNTIME_SUBDIRECTORY=ratelimit \
	RUNTIME_APPDIRECTORY=config RUNTIME_WATCH_ROOT=false USE_STATSD=false LOG_LEVEL=info \
	node dist/src/cli/ratelimit.js

bench: build
	bash bench/run.sh

# The HTTP/2 attacks of issue 28 against the gRPC port (bench/README.md, "Attacks"):
# bench/results/attacks.{json,md}; then a key spray on the memory store (bench/README.md, "Key
# spray"): bench/results/spray.{json,md}. Needs only Node (and taskset to pin).
bench-attacks: build
	node bench/attacks.js
	node bench/spray.js

# Test CA and certificates for Envoy <-> ratelimit mTLS (envoy/certs/).
certs:
	bash envoy/gen-certs.sh

image:
	docker build -f deploy/Dockerfile -t ratelimit:latest .

# Rewrites the settings table of docs/settings.md (between its settings:start and settings:end
# markers) from src/settings/table.ts.
settings-table: build
	node -e 'const fs=require("fs");const {renderSettingsMarkdown}=require("./dist/src/settings");const f="docs/settings.md";const r=fs.readFileSync(f,"utf8");if(!r.includes("<!-- settings:end -->"))throw new Error(f+" has no settings markers");fs.writeFileSync(f,r.replace(/(<!-- settings:start -->\n)[\s\S]*?(<!-- settings:end -->)/,(_,a,b)=>a+renderSettingsMarkdown().trimEnd()+"\n"+b))'

clean:
	rm -rf dist test-results.json
