package main

// go-redis as an application builds it: redis.NewClient with its defaults (RESP3, 3 retries
// with backoff), one connection, the target's timeouts.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

type redisStore struct {
	c   *redis.Client
	ttl time.Duration
}

var ctx = context.Background()

func openRedis(s *setupMsg) (store, storeInfo, error) {
	addrs, err := s.addrs()
	if err != nil {
		return nil, storeInfo{}, err
	}
	if len(addrs) > 1 { // a Ring or a ClusterClient is another client than redis.NewClient
		return nil, storeInfo{}, fmt.Errorf("go-redis: one server per target, not %d", len(addrs))
	}
	opts := &redis.Options{Addr: addrs[0], DB: s.DB, PoolSize: 1}
	if s.Username != nil {
		opts.Username = *s.Username
	}
	if s.Password != nil {
		opts.Password = *s.Password
	}
	if s.TLS {
		if opts.TLSConfig, err = tlsConfig(s, addrs[0]); err != nil {
			return nil, storeInfo{}, err
		}
	}
	if s.ConnectTimeoutS != nil {
		opts.DialTimeout = seconds(*s.ConnectTimeoutS)
	}
	if s.TimeoutS != nil {
		opts.ReadTimeout = seconds(*s.TimeoutS)
		opts.WriteTimeout = opts.ReadTimeout
	}
	st := &redisStore{c: redis.NewClient(opts)}
	if s.TTL > 0 {
		st.ttl = seconds(s.TTL)
	}
	// Connect now, off the clock, as an app server's connection is open before its requests.
	if err := st.c.Ping(ctx).Err(); err != nil {
		st.c.Close()
		return nil, storeInfo{}, fmt.Errorf("go-redis cannot reach %s: %w", addrs[0], err)
	}
	return st, storeInfo{"redis.Client", "go-redis", redis.Version()}, nil
}

// tlsConfig verifies the server's certificate against the system's CAs, or the target's own
// (ssl_ca_certs), unless the target says ssl_cert_reqs=none.
func tlsConfig(s *setupMsg, addr string) (*tls.Config, error) {
	host, _, _ := net.SplitHostPort(addr)
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.SSLCertReqs == "none"}
	if s.SSLCACerts != "" {
		pem, err := os.ReadFile(s.SSLCACerts)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", s.SSLCACerts)
		}
	}
	return cfg, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (s *redisStore) get(key string) ([]byte, error) {
	v, err := s.c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

func (s *redisStore) set(key string, value []byte) error {
	return s.c.Set(ctx, key, value, s.ttl).Err()
}

func (s *redisStore) del(key string) (bool, error) {
	n, err := s.c.Del(ctx, key).Result()
	return n > 0, err
}

func (s *redisStore) exists(key string) (bool, error) {
	n, err := s.c.Exists(ctx, key).Result()
	return n > 0, err
}

func (s *redisStore) getMany(keys []string) (any, error) {
	return s.c.MGet(ctx, keys...).Result()
}

func (s *redisStore) values(reply any, _ []string, dst [][]byte) {
	for i, v := range reply.([]any) {
		dst[i] = nil
		if str, ok := v.(string); ok {
			dst[i] = []byte(str)
		}
	}
}

func (s *redisStore) close() { s.c.Close() }
