# cbdash: `make demo` runs a live simulated fleet; `make test` runs every test.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
ADDR ?= 127.0.0.1:8080
DB ?= ./cbdash.db
DEMO_DB ?= ./cbdash-demo.db

.PHONY: demo serve test test-sdk test-server bench generate lint build check-generated check-tidy check

# demo and serve run the built binary rather than `go run`, which exits 1
# when Ctrl-C stops its child (make then printed "Error 1" after a clean stop).
demo: build
	./bin/cbdash demo --addr $(ADDR) --db $(DEMO_DB)

serve: build
	./bin/cbdash serve --addr $(ADDR) --db $(DB)

build:
	$(GO) build -o bin/cbdash ./cmd/cbdash

# Both modules (the SDK is its own module), with the race detector,
# including the scenario replay and the browser tests.
test: test-sdk test-server

test-sdk:
	cd sdk && $(GO) test -race -count=1 -timeout 15m ./...

test-server:
	$(GO) test -race -count=1 -timeout 15m ./...

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
MODULES = . sdk bench
check-tidy:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || \
		{ echo "go mod tidy would change module '$$m': run it there and commit"; exit 1; }; done

# Everything CI checks besides the tests.
check: lint check-generated check-tidy

lint:
	@test -z "$$(gofmt -l . | grep -v '_templ.go$$')" || { echo "gofmt would change:"; gofmt -l . | grep -v '_templ.go$$'; exit 1; }
	$(GO) vet ./...
	cd sdk && $(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd sdk && $(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) run $(STATICCHECK) ./...
