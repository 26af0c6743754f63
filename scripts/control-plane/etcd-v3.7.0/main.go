// Command etcd is upstream etcd v3.7.0, unmodified: the same entry point as
// https://github.com/etcd-io/etcd/blob/v3.7.0/server/main.go (etcdmain.Main).
// It exists because go.etcd.io/etcd/server/v3 has no installable main package of its own.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
