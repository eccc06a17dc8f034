// cachemark-driver runs cachemark's op stream through a Go cache client, as a Go
// application uses it: go-redis (redis://, rediss://, valkey://) or gomemcache (memcached://).
// It speaks the driver protocol of docs/drivers.md (version 3) on stdin/stdout; cachemark
// pre-generates the ops, this program only runs the timed loop and hands back per-op outcomes
// and latencies, a segment at a time when the phase comes in segments.
//
//	cachemark-driver go-redis|gomemcache
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
)

const protocol = 3

const (
	goRedisModule     = "github.com/redis/go-redis/v9"
	gomemcacheModule  = "github.com/bradfitz/gomemcache"
	defaultGetManyLen = 10
)

// SIGINT (Ctrl-C) stops the loop, which reports what it ran; it stays set for the process,
// and further ones are ignored (cachemark forwards Ctrl-C to drivers that also got it).
var (
	stopFlag    atomic.Bool
	interrupted = make(chan struct{})
)

func stopRequested() bool { return stopFlag.Load() }

func watchInterrupt() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	go func() {
		<-ch
		stopFlag.Store(true)
		close(interrupted)
		for range ch {
		}
	}()
}

// driverName is the client= name cachemark knows this client by.
func driverName(client string) string {
	if client == "gomemcache" {
		return "go-memcache"
	}
	return client
}

// libraryVersion is a dependency's version as built into this binary ("9.23.0").
func libraryVersion(module string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == module {
				return strings.TrimPrefix(dep.Version, "v")
			}
		}
	}
	return "unknown"
}

type driver struct {
	client     string // "go-redis" or "gomemcache"
	conn       *conn
	store      store
	work       *workload
	worker     int
	canaries   int
	batch      *batch
	manyKeys   []string // the keys of the get_many being run
	manyValues [][]byte
}

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "go-redis" && os.Args[1] != "gomemcache") {
		fmt.Fprintln(os.Stderr, "usage: cachemark-driver go-redis|gomemcache (speaks docs/drivers.md on stdin/stdout)")
		os.Exit(2)
	}
	out, err := protocolStdout()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cachemark-driver:", err)
		os.Exit(1)
	}
	watchInterrupt()
	d := &driver{client: os.Args[1], conn: newConn(os.Stdin, out)}
	d.serve()
}

func (d *driver) serve() {
	d.conn.send(map[string]any{"type": "hello", "protocol": protocol, "driver": driverName(d.client),
		"runtime": "go " + strings.TrimPrefix(runtime.Version(), "go"),
		"libraries": map[string]string{"go-redis": libraryVersion(goRedisModule),
			"gomemcache": libraryVersion(gomemcacheModule)}}, nil)
	defer func() {
		if d.store != nil {
			d.store.close()
		}
	}()
	for {
		msg, err := d.conn.read()
		if errors.Is(err, io.EOF) {
			return // cachemark went away: the same as bye
		}
		if err != nil {
			d.conn.sendError("protocol", err.Error())
			return
		}
		switch msg.Type {
		case "setup":
			d.setup(msg)
		case "prefill":
			d.prefill(msg)
		case "ops":
			d.loadOps(msg)
		case "go":
			var g goMsg
			if err := msg.decode(&g); err != nil {
				d.conn.sendError("protocol", "go: "+err.Error())
			} else if d.batch == nil || d.store == nil {
				d.conn.sendError("protocol", "go before setup and ops")
			} else {
				d.goLoop(g)
			}
		case "bye":
			d.conn.send(map[string]any{"type": "bye"}, nil)
			return
		default:
			d.conn.sendError("protocol", fmt.Sprintf("unknown message %q", msg.Type))
		}
	}
}

func (d *driver) setup(msg *message) {
	var s setupMsg
	if err := msg.decode(&s); err != nil {
		d.conn.sendError("protocol", "setup: "+err.Error())
		return
	}
	if s.Sizes.Kind == "" || len(s.Sizes.Sizes) == 0 || s.Keys <= 0 {
		d.conn.sendError("protocol", "setup without keys or sizes")
		return
	}
	if s.GetManyCount <= 0 {
		s.GetManyCount = defaultGetManyLen
	}
	d.work = newWorkload(s.Namespace, s.Keys, s.Sizes.Kind, s.Sizes.Sizes, s.Filler)
	d.worker = s.Worker
	d.manyKeys = make([]string, s.GetManyCount)
	d.manyValues = make([][]byte, s.GetManyCount)
	st, info, err := openStore(d.client, &s)
	if err != nil {
		d.conn.sendError("setup", err.Error())
		return
	}
	if d.store != nil {
		d.store.close()
	}
	d.store = st
	d.conn.send(map[string]any{"type": "ready", "client": info.client, "client_library": info.library,
		"client_version": info.version}, nil)
}

// u32s reads n little-endian uint32 from blob at offset (in elements of 4 bytes).
func u32s(blob []byte, off, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(blob[off+4*i:])
	}
	return out
}

func (d *driver) prefill(msg *message) {
	var p struct {
		Count int `json:"count"`
	}
	if err := msg.decode(&p); err != nil || len(msg.blob) != 8*p.Count || d.store == nil {
		d.conn.sendError("protocol", "prefill: expected setup first and a blob of 8 bytes per key")
		return
	}
	ids, sizes := u32s(msg.blob, 0, p.Count), u32s(msg.blob, 4*p.Count, p.Count)
	written, refused := 0, 0
	var sample any // null unless a write failed
	for i, k := range ids {
		if stopRequested() {
			break
		}
		if int(k) >= len(d.work.keys) {
			d.conn.sendError("protocol", fmt.Sprintf("prefill: key %d of %d", k, len(d.work.keys)))
			return
		}
		key := d.work.key(int(k))
		if err := d.store.set(key, d.work.value(key, int(sizes[i]))); err != nil {
			refused++
			if sample == nil {
				sample = fmt.Sprintf("%s: %s", errorKind(err), err)
			}
			continue
		}
		written++
	}
	d.conn.send(map[string]any{"type": "prefilled", "written": written, "refused": refused,
		"error_sample": sample, "interrupted": stopRequested()}, nil)
}

// refusal is an answer's error message: its kind and its one line.
type refusal struct{ kind, message string }

// loadOps answers "ops" before "go": the batch, or its first segment, kept for the next "go".
func (d *driver) loadOps(msg *message) {
	b, bad := d.parseOps(msg)
	if bad != nil {
		d.conn.sendError(bad.kind, bad.message)
		return
	}
	d.batch = b
	d.conn.send(map[string]any{"type": "loaded", "count": len(b.entry)}, nil)
}

// parseOps reads an "ops" message: a whole batch, or one segment of it (more: another follows
// during "go", x-segments).
func (d *driver) parseOps(msg *message) (*batch, *refusal) {
	var o struct {
		Entries  [][]string `json:"entries"`
		Count    int        `json:"count"`
		Schedule bool       `json:"schedule"`
		More     bool       `json:"more"`
	}
	if err := msg.decode(&o); err != nil || d.work == nil {
		return nil, &refusal{"protocol", "ops: expected setup first and entries"}
	}
	n := o.Count
	want := 9 * n
	if o.Schedule {
		want = 17 * n
	}
	if len(msg.blob) != want {
		return nil, &refusal{"protocol", fmt.Sprintf("ops: a blob of %d bytes for %d ops", len(msg.blob), n)}
	}
	b := &batch{entry: msg.blob[:n], key: u32s(msg.blob, n, n), size: u32s(msg.blob, 5*n, n), more: o.More}
	var unknown []string
	for _, steps := range o.Entries {
		var codes []opcode
		for _, s := range steps {
			op, ok := opcodes[s]
			if !ok {
				unknown = append(unknown, s)
			}
			codes = append(codes, op)
		}
		if len(codes) == 0 {
			unknown = append(unknown, "an empty entry")
		}
		b.entries = append(b.entries, codes)
		b.names = append(b.names, strings.Join(steps, "+"))
	}
	if len(unknown) > 0 {
		return nil, &refusal{"unsupported", fmt.Sprintf("%s does not run %s", driverName(d.client),
			strings.Join(unknown, ", "))}
	}
	for i := range n {
		if int(b.entry[i]) >= len(b.entries) || int(b.key[i]) >= len(d.work.keys) {
			return nil, &refusal{"protocol", fmt.Sprintf("ops: op %d names an entry or key that does not exist", i)}
		}
	}
	if o.Schedule {
		b.at = make([]uint64, n)
		for i := range b.at {
			b.at[i] = binary.LittleEndian.Uint64(msg.blob[9*n+8*i:])
		}
	}
	return b, nil
}
