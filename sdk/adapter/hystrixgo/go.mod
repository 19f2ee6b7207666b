module github.com/cbdash/cbdash/sdk/adapter/hystrixgo

go 1.26

toolchain go1.27.3

require (
	github.com/afex/hystrix-go v0.0.0-20180502004556-fa1af6a1f4f5
	github.com/cbdash/cbdash/sdk v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/smartystreets/goconvey v1.8.1 // indirect
)

replace github.com/cbdash/cbdash/sdk => ../..
