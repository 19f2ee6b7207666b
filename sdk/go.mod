module github.com/cbdash/cbdash/sdk

go 1.26

toolchain go1.27.3

require (
	github.com/coder/websocket v1.8.15
	go.uber.org/goleak v1.3.0
)
