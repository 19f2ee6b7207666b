module github.com/cbdash/cbdash/examples/retry

go 1.26

toolchain go1.27.3

require github.com/cbdash/cbdash/sdk v0.0.0

require github.com/cenkalti/backoff/v5 v5.0.3

replace github.com/cbdash/cbdash/sdk => ../../sdk
