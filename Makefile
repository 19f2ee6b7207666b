# cbdash: `make demo` runs a live simulated fleet; `make test` runs every test.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
ADDR ?= 127.0.0.1:8080
DB ?= ./cbdash.db
DEMO_DB ?= ./cbdash-demo.db

.PHONY: demo serve test test-sdk test-server bench generate lint build check-generated

demo:
	$(GO) run ./cmd/cbdash demo --addr $(ADDR) --db $(DEMO_DB)

serve:
	$(GO) run ./cmd/cbdash serve --addr $(ADDR) --db $(DB)

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

check-generated: generate
	git diff --exit-code -- web/templates

lint:
	test -z "$$(gofmt -l . | grep -v '_templ.go$$')" || (gofmt -l . ; exit 1)
	$(GO) vet ./...
	cd sdk && $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd sdk && $(GO) run $(STATICCHECK) ./...
