//go:build tools

// Package etcd pins the upstream etcd server that `make envtest` builds.
package etcd

import _ "go.etcd.io/etcd/server/v3"
