package main

// The cache client behind one driver process, and what its errors mean to cachemark.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"
)

// store is one client with one connection. Each method is the bare client call an
// application writes; a nil value with a nil error is a miss.
type store interface {
	get(key string) ([]byte, error)
	set(key string, value []byte) error
	del(key string) (bool, error)
	exists(key string) (bool, error)
	// getMany returns the client's own reply; values decodes it off the clock into
	// dst (one entry per key, nil for a miss).
	getMany(keys []string) (any, error)
	values(reply any, keys []string, dst [][]byte)
	close()
}

// storeInfo is what "ready" says about the client.
type storeInfo struct {
	client, library, version string
}

type setupMsg struct {
	Scheme          *string  `json:"scheme"`
	Servers         [][]any  `json:"servers"`
	DB              int      `json:"db"`
	Username        *string  `json:"username"`
	Password        *string  `json:"password"`
	TLS             bool     `json:"tls"`
	SSLCertReqs     string   `json:"ssl_cert_reqs"` // "none": no certificate check (not sent yet)
	SSLCACerts      string   `json:"ssl_ca_certs"`  // a PEM file of CAs to trust (not sent yet)
	Namespace       string   `json:"namespace"`
	Worker          int      `json:"worker"`
	Keys            int      `json:"keys"`
	TTL             float64  `json:"ttl_s"`
	Sizes           sizesMsg `json:"sizes"`
	Filler          string   `json:"filler"`
	GetManyCount    int      `json:"get_many_count"`
	TimeoutS        *float64 `json:"timeout_s"`
	ConnectTimeoutS *float64 `json:"connect_timeout_s"`
}

type sizesMsg struct {
	Kind  string `json:"kind"`
	Sizes []int  `json:"sizes"`
}

// addrs are the servers as "host:port".
func (s *setupMsg) addrs() ([]string, error) {
	var out []string
	for _, hp := range s.Servers {
		if len(hp) != 2 {
			return nil, fmt.Errorf("a server is not [host, port]: %v", hp)
		}
		host, _ := hp[0].(string)
		port, _ := hp[1].(float64)
		out = append(out, net.JoinHostPort(host, fmt.Sprint(int(port))))
	}
	if len(out) == 0 {
		return nil, errors.New("no server given")
	}
	return out, nil
}

// openStore builds the client this process serves (go-redis or gomemcache) for the setup's
// target; a null scheme gets the do-nothing store.
func openStore(client string, s *setupMsg) (store, storeInfo, error) {
	scheme := "null"
	if s.Scheme != nil {
		scheme = *s.Scheme
	}
	switch {
	case scheme == "null":
		return nullStore{}, storeInfo{"null", "cachemark-driver", "0"}, nil
	case client == "go-redis" && (strings.HasPrefix(scheme, "redis") || strings.HasPrefix(scheme, "valkey")):
		return openRedis(s)
	case client == "gomemcache" && scheme == "memcached":
		return openMemcache(s)
	}
	return nil, storeInfo{}, fmt.Errorf("%s has no client for %s://", driverName(client), scheme)
}

// nullStore does nothing: what the protocol and the timed loop cost (the driver's floor).
// Reads miss, writes succeed.
type nullStore struct{}

func (nullStore) get(string) ([]byte, error)     { return nil, nil }
func (nullStore) set(string, []byte) error       { return nil }
func (nullStore) del(string) (bool, error)       { return false, nil }
func (nullStore) exists(string) (bool, error)    { return false, nil }
func (nullStore) getMany([]string) (any, error)  { return nil, nil }
func (nullStore) values(any, []string, [][]byte) {}
func (nullStore) close()                         {}

// errorKind names an error as docs/contracts.md does: timeout, connection, server, or
// the error's type when nothing fits.
func errorKind(err error) string {
	var netErr net.Error
	var redisErr redis.Error
	var connectTimeout *memcache.ConnectTimeoutError
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &connectTimeout), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &opErr), errors.Is(err, memcache.ErrNoServers):
		return "connection"
	case errors.As(err, &redisErr), errors.Is(err, memcache.ErrServerError), errors.Is(err, memcache.ErrNotStored):
		return "server" // the server answered with an error (OOM, SERVER_ERROR, NOT_STORED)
	}
	text := strings.ToLower(err.Error())
	switch {
	case strings.Contains(text, "timeout"), strings.Contains(text, "timed out"):
		return "timeout"
	case strings.Contains(text, "connect"), strings.Contains(text, "closed"), strings.Contains(text, "network"):
		return "connection"
	case strings.Contains(text, "error"), strings.Contains(text, "too large"), strings.Contains(text, "oom"):
		return "server" // gomemcache's "unexpected response line: SERVER_ERROR ..."
	}
	name := strings.TrimLeft(fmt.Sprintf("%T", err), "*")
	if name == "errors.errorString" || name == "fmt.wrapError" {
		return "error"
	}
	return name[strings.LastIndexByte(name, '.')+1:]
}
