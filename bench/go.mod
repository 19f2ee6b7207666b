module github.com/cbdash/cbdash/bench

go 1.26

toolchain go1.27.3

require (
	github.com/cbdash/cbdash/sdk v0.0.0
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/sony/gobreaker/v2 v2.4.0
)

require github.com/bits-and-blooms/bitset v1.24.4 // indirect

replace github.com/cbdash/cbdash/sdk => ../sdk
