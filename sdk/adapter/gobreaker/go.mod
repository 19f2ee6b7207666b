module github.com/cbdash/cbdash/sdk/adapter/gobreaker

go 1.26

toolchain go1.27.3

require (
	github.com/cbdash/cbdash/sdk v0.0.0
	github.com/sony/gobreaker/v2 v2.4.0
)

require github.com/coder/websocket v1.8.15 // indirect

replace github.com/cbdash/cbdash/sdk => ../..
