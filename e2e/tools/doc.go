// Package tools is the module that pins the command-line tools the checks
// of this repository build from the Go module proxy, so that their
// dependencies enter neither the library's go.mod nor the e2e module's.
//
// Today it holds one: promtool (github.com/prometheus/prometheus/cmd/promtool,
// a `tool` directive in go.mod), which checks and unit-tests the example's
// alerting rules and parses its dashboard's queries (package
// github.com/quietpatch/quietpatch/e2e/monitoring). Build it with
// `make tools` (e2e/hack/build-tools.sh): the binary is cached per version
// in ~/.cache/quietpatch/bin and linked from e2e/.bin/promtool. `go tool
// promtool` in this directory runs it too, built into Go's cache.
//
// To move to another Prometheus release:
//
//	cd e2e/tools && go get -tool github.com/prometheus/prometheus/cmd/promtool@v0.X.Y && go mod tidy
//
// This package has no code.
package tools
