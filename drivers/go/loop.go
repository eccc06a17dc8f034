package main

// The timed loop ("go" → "part"s → "done"): each op timed with the monotonic clock around the
// client calls only; keys, values, verification and bookkeeping stay outside the clock, and so do
// the segment boundaries, where results go back and the next segment is read (x-segments).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"
)

// Outcome codes in "part" and "done"; 3+j is an error of kind error_kinds[j].
const (
	outOK   = 0
	outHit  = 1
	outMiss = 2
	outErr  = 3
)

type opcode uint8

const (
	opGet opcode = iota
	opSet
	opDelete
	opExists
	opGetMany
)

var opcodes = map[string]opcode{"get": opGet, "set": opSet, "delete": opDelete, "exists": opExists,
	"get_many": opGetMany}

// batch is one "ops" message, a whole batch or one segment of it: the entries (each one or
// more steps, timed as one unit) and the ops, column by column.
type batch struct {
	entries [][]opcode
	names   []string
	entry   []uint8
	key     []uint32
	size    []uint32
	at      []uint64 // open loop: when to send each op, ns after "go"; nil otherwise
	more    bool     // another segment follows during "go" (x-segments)
}

type goMsg struct {
	DurationS         *float64 `json:"duration_s"`
	Cycle             bool     `json:"cycle"`
	VerifyReads       float64  `json:"verify_reads"`
	VerifyWrites      float64  `json:"verify_writes"`
	StopAfterFailingS *float64 `json:"stop_after_failing_s"`
}

// result is what one entry's client calls returned, for the checks made after the clock.
type result struct {
	code  uint8
	err   error
	value []byte // the last get's value
	many  any    // the last get_many's reply
	sent  int    // key and value bytes of the steps sent (bytes_out)
}

// call runs one entry's steps: the timed unit. exists+get ends as a miss when exists says no.
func (d *driver) call(steps []opcode, key string, value []byte) (r result) {
	for _, op := range steps {
		r.sent += len(key)
		switch op {
		case opGet:
			r.value, r.err = d.store.get(key)
			r.code = hitOrMiss(r.value != nil)
		case opSet:
			r.err = d.store.set(key, value)
			r.code = outOK
			r.sent += len(value)
		case opDelete:
			var found bool
			found, r.err = d.store.del(key)
			r.code = hitOrMiss(found)
		case opExists:
			var found bool
			found, r.err = d.store.exists(key)
			r.code = hitOrMiss(found)
		case opGetMany:
			for _, k := range d.manyKeys[1:] { // every key is sent (the first, above)
				r.sent += len(k)
			}
			r.many, r.err = d.store.getMany(d.manyKeys)
			r.code = outHit // decided after the clock, from the reply
		}
		if r.err != nil || r.code == outMiss {
			return r
		}
	}
	return r
}

func hitOrMiss(found bool) uint8 {
	if found {
		return outHit
	}
	return outMiss
}

type entryKind struct {
	entry int
	kind  string
}

// run holds one "go": its counters and samples (the whole go), and the results of the ops run
// since the last "part" (the current segment, or pass through a cycling batch).
type run struct {
	d        *driver
	kinds    []string
	samples  []string
	extra    map[entryKind]int // errors outside an op's outcome (canaries)
	bytesIn  []int64
	bytesOut []int64
	outcome  []byte
	start    []uint64
	latency  []uint64
}

func (r *run) kindCode(kind string) uint8 {
	for i, k := range r.kinds {
		if k == kind {
			return uint8(outErr + i)
		}
	}
	r.kinds = append(r.kinds, kind)
	return uint8(outErr + len(r.kinds) - 1)
}

func (r *run) sample(entry, kind, text string) {
	if len(r.samples) < 5 {
		s := entry + ": " + kind + ": " + text
		if len(s) > 300 {
			s = s[:300]
		}
		r.samples = append(r.samples, strings.ReplaceAll(s, "\n", " "))
	}
}

func (r *run) failed(entry string, err error) uint8 {
	kind := errorKind(err)
	r.sample(entry, kind, err.Error())
	return r.kindCode(kind)
}

// check turns an entry's result into its outcome, verifying the read when asked (off the clock).
func (r *run) check(e int, k int, res result, verify bool) uint8 {
	d, name := r.d, r.d.batch.names[e]
	if res.err != nil {
		return r.failed(name, res.err)
	}
	if res.many != nil {
		d.store.values(res.many, d.manyKeys, d.manyValues)
		found := 0
		for _, v := range d.manyValues { // every value received counts, whatever verification says
			r.bytesIn[e] += int64(len(v))
		}
		for i, v := range d.manyValues {
			if v != nil {
				found++
				if verify && !d.work.valid(d.manyKeys[i], v) {
					r.sample(name, "verify", fmt.Sprintf("%s: unexpected value of %d B", d.manyKeys[i], len(v)))
					return r.kindCode("verify")
				}
			}
		}
		return hitOrMiss(found == len(d.manyKeys))
	}
	if res.code == outHit && res.value != nil {
		r.bytesIn[e] += int64(len(res.value))
		if verify && !d.work.valid(d.work.key(k), res.value) {
			r.sample(name, "verify", fmt.Sprintf("%s: unexpected value of %d B", d.work.key(k), len(res.value)))
			return r.kindCode("verify")
		}
	}
	return res.code
}

// canary writes a value of the same size under its own key, reads it back and deletes it
// (untimed): a write the server silently dropped is an error.
func (r *run) canary(e int, size int) {
	d := r.d
	d.canaries++
	key := fmt.Sprintf("%sverify:%d:%d", d.work.ns, d.worker, d.canaries)
	value := d.work.value(key, size)
	err := d.store.set(key, value)
	var back []byte
	if err == nil {
		back, err = d.store.get(key)
	}
	_, delErr := d.store.del(key)
	if err == nil {
		err = delErr
	}
	kind, text := "", ""
	switch {
	case err != nil:
		kind, text = errorKind(err), err.Error()
	case back == nil:
		kind, text = "dropped_write", key+": a value just written read back as a miss"
	case string(back) != string(value):
		kind, text = "dropped_write", key+": a value just written read back different"
	default:
		return
	}
	r.extra[entryKind{e, kind}]++
	r.sample(d.batch.names[e], kind, text)
}

func every(fraction float64) int {
	if fraction > 0 {
		return int(1 / fraction)
	}
	return 0
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// entryFlags says of each entry whether it writes, ends in a read that can be verified, and
// reads many keys (get_many).
func entryFlags(entries [][]opcode) (writes, verifiable, many []bool) {
	writes, verifiable, many = make([]bool, len(entries)), make([]bool, len(entries)), make([]bool, len(entries))
	for e, steps := range entries {
		for _, op := range steps {
			writes[e] = writes[e] || op == opSet
			many[e] = many[e] || op == opGetMany
		}
		last := steps[len(steps)-1]
		verifiable[e] = last == opGet || last == opGetMany
	}
	return writes, verifiable, many
}

// reserve makes room for a segment's results (n ops) and the counters of its entries.
func (r *run) reserve(n, entries int) {
	if cap(r.outcome) < n {
		r.outcome, r.start, r.latency = make([]byte, 0, n), make([]uint64, 0, n), make([]uint64, 0, n)
	}
	for len(r.bytesIn) < entries {
		r.bytesIn, r.bytesOut = append(r.bytesIn, 0), append(r.bytesOut, 0)
	}
}

// results lays out the ops run since the last "part" (their count, and the blob of "part" and
// "done": outcome, start_ns, latency_ns) and forgets them.
func (r *run) results() (int, []byte) {
	count := len(r.outcome)
	blob := make([]byte, 0, 17*count)
	blob = append(blob, r.outcome...)
	for _, s := range r.start {
		blob = binary.LittleEndian.AppendUint64(blob, s)
	}
	for _, l := range r.latency {
		blob = binary.LittleEndian.AppendUint64(blob, l)
	}
	r.outcome, r.start, r.latency = r.outcome[:0], r.start[:0], r.latency[:0]
	return count, blob
}

// readSegment reads the "ops" message cachemark sent ahead during "go" (x-segments); nil when
// the go ends there: cachemark has gone, or it sent something else (answered with an error).
func (d *driver) readSegment() *message {
	msg, err := d.conn.read()
	switch {
	case errors.Is(err, io.EOF):
		return nil // cachemark went away: serve sees the EOF too
	case err != nil:
		d.conn.sendError("protocol", err.Error())
		return nil
	case msg.Type != "ops":
		d.conn.sendError("protocol", fmt.Sprintf("expected the next segment's ops during go, not %q", msg.Type))
		return nil
	}
	return msg
}

// goLoop runs the loaded batch and sends "done". A batch in segments (x-segments) sends a
// "part" at the end of each segment with more and reads the next one (already waiting in stdin,
// answered by nothing); a cycling batch sends a "part" at the end of every pass. Only the
// current segment and its results are held; stdin is read only at those boundaries, and once
// more by a go that stops inside a segment with more (the one sent ahead, dropped).
func (d *driver) goLoop(msg goMsg) {
	b := d.batch
	n := len(b.entry)
	segmented := b.more
	r := &run{d: d, kinds: []string{"verify", "dropped_write"}, extra: map[entryKind]int{}}
	r.reserve(n, len(b.entries))
	writes, verifiable, many := entryFlags(b.entries)
	readEvery, writeEvery := every(msg.VerifyReads), every(msg.VerifyWrites)
	var grace time.Duration = -1
	if msg.StopAfterFailingS != nil {
		grace = seconds(*msg.StopAfterFailingS)
	}
	reads, written, missed := 0, 0, 0
	stopped := false // by the error policy
	halted := false  // by the deadline, SIGINT or the error policy: no more ops, no more parts
	var failingSince time.Duration = -1
	timer := time.NewTimer(time.Hour)
	timer.Stop()

	cpu0 := cpuSeconds()
	t := time.Now() // monotonic: every duration below is measured from it, across segments
	deadline := time.Duration(-1)
	if msg.DurationS != nil {
		deadline = seconds(*msg.DurationS)
	}
	i := 0
	for {
		for i < n {
			e, k := int(b.entry[i]), int(b.key[i])
			key := d.work.key(k)
			var value []byte
			if writes[e] {
				value = d.work.value(key, int(b.size[i]))
			}
			if many[e] {
				for m := range d.manyKeys {
					d.manyKeys[m] = d.work.key((k + m) % len(d.work.keys))
				}
			}
			if b.at != nil {
				due := time.Duration(b.at[i])
				if deadline >= 0 && due >= deadline {
					halted = true
					break
				}
				if wait := due - time.Since(t); wait > 0 {
					timer.Reset(wait)
					select {
					case <-timer.C:
					case <-interrupted:
						timer.Stop()
					}
					if stopRequested() {
						halted = true
						break
					}
				}
			}
			verify := false
			if readEvery > 0 && verifiable[e] {
				if reads++; reads >= readEvery {
					reads, verify = 0, true
				}
			}

			t0 := time.Since(t)
			res := d.call(b.entries[e], key, value)
			t1 := time.Since(t)

			code := r.check(e, k, res, verify)
			r.bytesOut[e] += int64(res.sent)
			r.outcome = append(r.outcome, code)
			r.start = append(r.start, uint64(t0))
			r.latency = append(r.latency, uint64(t1-t0))
			i++
			if code < outErr {
				failingSince = -1
				if writeEvery > 0 && writes[e] && code == outOK {
					if written++; written >= writeEvery {
						written = 0
						r.canary(e, int(b.size[i-1]))
					}
				}
			} else {
				if failingSince < 0 {
					failingSince = t1
				}
				if grace >= 0 && t1-failingSince >= grace {
					stopped, halted = true, true
					break
				}
			}
			if stopRequested() || (deadline >= 0 && t1 >= deadline) {
				halted = true
				break
			}
		}
		cycle := msg.Cycle && b.at == nil && n > 0
		if halted || !(b.more || cycle) {
			break
		}
		// the end of a segment with more, or of a pass through a cycling batch: its results go back
		count, blob := r.results()
		d.conn.send(map[string]any{"type": "part", "count": count, "error_kinds": r.kinds}, blob)
		if b.more {
			next := d.readSegment()
			if next == nil {
				d.batch = nil
				return
			}
			nb, bad := d.parseOps(next)
			if bad != nil {
				d.batch = nil
				d.conn.sendError(bad.kind, bad.message)
				return
			}
			b, n, d.batch = nb, len(nb.entry), nb
			writes, verifiable, many = entryFlags(b.entries)
			r.reserve(n, len(b.entries))
		}
		i = 0
	}
	wall := time.Since(t)
	if b.at != nil && deadline >= 0 && i < n {
		for _, at := range b.at[i:] {
			if time.Duration(at) < deadline {
				missed++
			}
		}
	}
	cpu := cpuSeconds() - cpu0
	if segmented {
		d.batch = nil // its segments are gone: a batch in segments runs once
	}
	if halted && b.more && d.readSegment() == nil { // the segment sent ahead: dropped
		return
	}

	count, blob := r.results()
	extra := [][3]any{}
	for ek, c := range r.extra {
		extra = append(extra, [3]any{ek.entry, ek.kind, c})
	}
	d.conn.send(map[string]any{"type": "done", "count": count, "wall_ns": int64(wall), "cpu_s": cpu,
		"error_kinds": r.kinds, "extra_errors": extra, "error_samples": append([]string{}, r.samples...),
		"bytes_in": r.bytesIn, "bytes_out": r.bytesOut, "missed": missed, "stopped_on_errors": stopped,
		"interrupted": stopRequested()}, blob)
}
