# cbdash: `make demo` runs a live simulated fleet; `make test` runs every test.
GO ?= go
# Every build and test runs on Go 1.27.3: go1.26.8's standard library has
# known vulnerabilities (net/http, crypto/tls). The go command fetches this
# toolchain from the module proxy the first time (about 76 MB) and keeps it
# in the module cache; `make GOTOOLCHAIN=...` overrides it.
export GOTOOLCHAIN := go1.27.3
MIN_GO := go1.27.3
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOCYCLO ?= github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0
# The packages whose functions must read as steps (cyclomatic complexity at
# most 15; their length is internal/layout's test).
SHAPED = internal/store internal/holds internal/live internal/ingest internal/collector internal/tune internal/quorum
ADDR ?= 127.0.0.1:8080
DB ?= ./cbdash.db
DEMO_DB ?= ./cbdash-demo.db

# RACE: every test runs under the race detector. The detector also turns
# on checkptr (checks of unsafe.Pointer conversions) in every package; it
# is turned off in modernc.org's pure-Go SQLite (C translated to Go, all
# unsafe.Pointer arithmetic), where it took about 40% of the CPU of a
# SQLite-bound test (internal/web's 1,000-instance members test: 52 s of
# CPU with it, 31 s without). Races are still detected there, and checkptr
# still runs on this project's code.
RACE ?= -race -gcflags='modernc.org/...=-d=checkptr=0'
# TEST_PARALLEL: how many tests of one package run at once (go test
# -parallel; its default is GOMAXPROCS). Most tests wait on sockets, a
# browser or a group commit, and own their temp dir, port and store; the
# few that set process state or time themselves do not call t.Parallel
# and run alone first. 2 on these 2 cores: at 4, with the packages of
# test-server beside two CPU hogs, start-up deadlines (a demo within
# 30 s, a CLI command's 30 s) ran out.
TEST_PARALLEL ?= 2

.PHONY: demo serve test test-sdk test-adapters test-node test-server test-web test-server-rest test-store bench generate lint build check-generated check-tidy check-toolchain check-shape check

# demo and serve run the built binary rather than `go run`, which exits 1
# when Ctrl-C stops its child (make then printed "Error 1" after a clean stop).
demo: build
	./bin/cbdash demo --addr $(ADDR) --db $(DEMO_DB)

serve: build
	./bin/cbdash serve --addr $(ADDR) --db $(DB)

build:
	$(GO) build -o bin/cbdash ./cmd/cbdash

# Every module (the SDK, each breaker adapter, the adapters' end-to-end
# tests and the retry example are modules of their own), with the race
# detector, including the scenario replay and the browser tests, in three
# streams side by side: the dashboard's package (internal/web, its browser
# tests under the race detector), the rest of the server's module, and
# the SDK with the adapters and the Node agent. Each stream runs to its
# end whatever another does (a failing SDK test no longer hides the
# server's results); all three must pass.
test:
	@$(MAKE) --no-print-directory test-web & web=$$!; \
	$(MAKE) --no-print-directory test-sdk test-adapters test-node & sdk=$$!; \
	$(MAKE) --no-print-directory test-server-rest; rest=$$?; \
	wait $$web; webrc=$$?; wait $$sdk; sdkrc=$$?; \
	if [ $$rest -ne 0 ] || [ $$webrc -ne 0 ] || [ $$sdkrc -ne 0 ]; then \
		echo "make test FAILED (internal/web: exit $$webrc; the SDK, adapters and Node agent: exit $$sdkrc; the rest of the server: exit $$rest)"; exit 1; fi

# SHARED_SCENARIOS: the breaker scenarios reduced from public bug reports,
# replayed from ../shared when it is there (new ones may have been added
# since testdata/scenarios was copied from it).
SHARED_SCENARIOS ?= $(abspath ../shared/scenarios)
test-sdk:
	cd sdk && $(GO) test $(RACE) -count=1 -timeout 15m ./...
	@if [ -d "$(SHARED_SCENARIOS)" ]; then cd sdk && $(GO) test -count=1 ./breaker -run '^TestScenarios$$' -args -scenarios=$(SHARED_SCENARIOS); fi

# Modules beside the SDK and the server: breaker adapters, their end-to-end
# test against a real collector, runnable examples with their own deps,
# the Hystrix source's end-to-end test against a real hystrix-go.
EXTRA_MODULES = sdk/adapter/gobreaker sdk/adapter/failsafe sdk/adapter/hystrixgo sdk/adapter/e2e examples/retry internal/source/e2e
test-adapters:
	@for m in $(EXTRA_MODULES); do (cd $$m && $(GO) test $(RACE) -count=1 -timeout 10m ./...) || exit 1; done

# The Node agent (sdk/node, an npm package): its tests under Node's test
# runner, the end-to-end one against bin/cbdash built from this tree
# (about 25 s; CBDASH_E2E_SECONDS=120 runs the failing schedule for two
# minutes). Without its npm packages (npm ci in sdk/node; .ci/run does
# it) it is skipped with a message, except in CI (CI set), where it fails.
test-node: build
	@if [ ! -d sdk/node/node_modules/ws ] || [ ! -d sdk/node/node_modules/opossum ]; then \
		if [ -n "$$CI" ]; then echo "sdk/node: its npm packages are not installed (run npm ci in sdk/node)"; exit 1; fi; \
		echo "skipping sdk/node's tests: its npm packages are not installed (run npm ci in sdk/node)"; exit 0; fi; \
	cd sdk/node && CBDASH_BIN=$(abspath bin/cbdash) npm test --silent

# The store's suite (internal/store, internal/storetest) runs on SQLite and
# then, when CBDASH_TEST_POSTGRES names a PostgreSQL server
# (postgres://cbdash:cbdash@127.0.0.1:5432/cbdash?sslmode=disable in CI),
# again on PostgreSQL; without it that run is skipped with a message.
# 30m: internal/web takes about 4 minutes under the race detector on these 2
# cores when quiet (11 before its tests ran in parallel on one Chromium),
# and far longer beside CPU hogs: slow, not hung.
test-server:
	@$(MAKE) --no-print-directory test-web & web=$$!; \
	$(MAKE) --no-print-directory test-server-rest; rest=$$?; \
	wait $$web; webrc=$$?; \
	if [ $$rest -ne 0 ] || [ $$webrc -ne 0 ]; then echo "make test-server FAILED (internal/web: exit $$webrc; the rest: exit $$rest)"; exit 1; fi

# test-server in two parts that run side by side: the dashboard's package,
# and every other package of the server's module.
test-web:
	$(GO) test $(RACE) -count=1 -parallel $(TEST_PARALLEL) -timeout 30m ./internal/web/...
test-server-rest:
	$(GO) test $(RACE) -count=1 -parallel $(TEST_PARALLEL) -timeout 30m $$($(GO) list ./... | grep -v '/internal/web$$')

# Only the store's suite, on both backends (see test-server).
test-store:
	$(GO) test $(RACE) -count=1 -parallel $(TEST_PARALLEL) ./internal/store/... ./internal/storetest/...

bench:
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count 5 ./...

generate:
	$(GO) tool templ generate

# Fails when the committed templ output is not what the generator makes
# (new or changed files alike).
check-generated: generate
	@test -z "$$(git status --porcelain -- 'web/templates/*_templ.go')" || { git status --short -- 'web/templates/*_templ.go'; \
		echo "generated templ files are not current: run 'make generate' and commit"; exit 1; }

# Fails when 'go mod tidy' would change go.mod or go.sum of any module.
MODULES = . sdk bench $(EXTRA_MODULES)
check-tidy:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || \
		{ echo "go mod tidy would change module '$$m': run it there and commit"; exit 1; }; done

# Fails unless bin/cbdash was built by $(MIN_GO) or a later Go (read back
# from the binary with `go version -m`, not from the go command).
check-toolchain: build
	@built=$$($(GO) version -m bin/cbdash | head -1 | awk '{print $$2}'); \
	echo "bin/cbdash built by $$built"; \
	lowest=$$(printf '%s\n%s\n' "$(MIN_GO)" "$$built" | sed 's/^go//' | sort -V | head -1); \
	test "$$lowest" = "$$(echo $(MIN_GO) | sed 's/^go//')" || { echo "bin/cbdash was built by $$built, older than $(MIN_GO)"; exit 1; }

# Everything CI checks besides the tests.
check: lint check-generated check-tidy check-toolchain check-shape

# Fails when a function of $(SHAPED) has a cyclomatic complexity over 15.
check-shape:
	$(GO) run $(GOCYCLO) -over 15 -ignore '_test|_templ' $(SHAPED)

lint:
	@test -z "$$(gofmt -l . | grep -v '_templ.go$$')" || { echo "gofmt would change:"; gofmt -l . | grep -v '_templ.go$$'; exit 1; }
	$(GO) vet ./...
	cd sdk && $(GO) vet ./...
	cd bench && $(GO) vet ./...
	@for m in $(EXTRA_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	$(GO) run $(STATICCHECK) ./...
	cd sdk && $(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) run $(STATICCHECK) ./...
	@for m in $(EXTRA_MODULES); do (cd $$m && $(GO) run $(STATICCHECK) ./...) || exit 1; done
