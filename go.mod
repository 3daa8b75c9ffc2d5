module github.com/sbxdb/sbxdb

go 1.26.8

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/google/go-cmp v0.7.0
	github.com/klauspost/compress v1.20.4
	go.etcd.io/bbolt v1.5.0
)

require golang.org/x/sys v0.45.0
