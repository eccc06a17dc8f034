package main

// The framing of docs/drivers.md: one JSON line per message, and when it has "blob": N,
// exactly N raw bytes right after its newline.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

type conn struct {
	in  *bufio.Reader
	out *bufio.Writer
}

func newConn(in io.Reader, out io.Writer) *conn {
	return &conn{in: bufio.NewReaderSize(in, 1<<20), out: bufio.NewWriterSize(out, 1<<20)}
}

// message is a received message: its type, its blob, and the raw line for the fields of its type.
type message struct {
	Type string `json:"type"`
	Blob int    `json:"blob"`
	raw  []byte
	blob []byte
}

// read returns the next message; io.EOF when cachemark has gone (the same as "bye").
func (c *conn) read() (*message, error) {
	line, err := c.in.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, err
	}
	m := &message{raw: line}
	if err := json.Unmarshal(line, m); err != nil {
		return nil, fmt.Errorf("a line that is not JSON: %w", err)
	}
	if m.Blob > 0 {
		m.blob = make([]byte, m.Blob)
		if _, err := io.ReadFull(c.in, m.blob); err != nil {
			return nil, io.EOF // cut short: cachemark went away mid-message
		}
	}
	return m, nil
}

// decode fills v with the message's fields.
func (m *message) decode(v any) error {
	return json.Unmarshal(m.raw, v)
}

// send writes one message (and its blob) and flushes.
func (c *conn) send(msg map[string]any, blob []byte) {
	if len(blob) > 0 {
		msg["blob"] = len(blob)
	}
	line, err := json.Marshal(msg)
	if err != nil { // only our own values are marshalled: a bug
		panic(err)
	}
	c.out.Write(line)
	c.out.WriteByte('\n')
	c.out.Write(blob)
	if err := c.out.Flush(); err != nil {
		os.Exit(0) // stdout closed: cachemark has gone
	}
}

func (c *conn) sendError(kind, text string) {
	c.send(map[string]any{"type": "error", "kind": kind, "message": text}, nil)
}
