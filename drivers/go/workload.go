package main

// The run's keys, values and checks: docs/contracts.md's self-verifying value format.
// Value for key k of size n: "cm:" + crc32(k) as 8 lowercase hex digits + ":", then byte i
// is 0x21 + i%94, all cut to n bytes.

import (
	"bytes"
	"hash/crc32"
	"slices"
	"strconv"
)

const headerLen = 12

type workload struct {
	ns     string
	keys   []string // key i is ns + i, built on first use
	kind   string   // "range": sizes[0]..sizes[1]; "fixed", "choice": one of sizes
	sizes  []int
	period []byte // setup's filler: one period of the value format's text (x-value-format)
	filler []byte // byte i = period[i % len(period)]; values are a header over its start
	buf    []byte // the value being written (ops run one at a time)
}

func newWorkload(ns string, keys int, kind string, sizes []int, period string) *workload {
	w := &workload{ns: ns, keys: make([]string, keys), kind: kind, sizes: sizes, period: []byte(period)}
	w.grow(slices.Max(append([]int{headerLen}, sizes...)))
	return w
}

func (w *workload) grow(size int) {
	for i := len(w.filler); i < size; i++ {
		w.filler = append(w.filler, w.period[i%len(w.period)])
	}
	w.buf = make([]byte, len(w.filler))
	copy(w.buf, w.filler)
}

func (w *workload) key(k int) string {
	if w.keys[k] == "" {
		w.keys[k] = w.ns + strconv.Itoa(k)
	}
	return w.keys[k]
}

func header(key string) [headerLen]byte {
	var h [headerLen]byte
	copy(h[:], "cm:")
	sum := crc32.ChecksumIEEE([]byte(key))
	const hex = "0123456789abcdef"
	for i := range 8 {
		h[3+i] = hex[sum>>(28-4*i)&0xf]
	}
	h[11] = ':'
	return h
}

// value is key's value of the given size, in a buffer reused by the next call.
func (w *workload) value(key string, size int) []byte {
	if size > len(w.buf) {
		w.grow(size)
	}
	h := header(key)
	copy(w.buf, h[:])
	return w.buf[:size]
}

func (w *workload) sizeAllowed(n int) bool {
	if w.kind == "range" {
		return n >= w.sizes[0] && n <= w.sizes[len(w.sizes)-1]
	}
	return slices.Contains(w.sizes, n)
}

// valid says whether v is what the run wrote under key: a length it can write, and its bytes.
func (w *workload) valid(key string, v []byte) bool {
	n := len(v)
	if !w.sizeAllowed(n) {
		return false
	}
	h := header(key)
	if n <= headerLen {
		return bytes.Equal(v, h[:n])
	}
	if n > len(w.filler) {
		w.grow(n)
	}
	return bytes.Equal(v[:headerLen], h[:]) && bytes.Equal(v[headerLen:], w.filler[headerLen:n])
}
