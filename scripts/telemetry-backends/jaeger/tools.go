//go:build tools

// Package tools pins the Jaeger binary's packages into this module's go.mod and go.sum.
package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
