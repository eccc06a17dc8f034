package main

// gomemcache as an application builds it: memcache.New(servers...) with the target's timeout.
// Ops run one at a time, so it keeps one connection per server.

import (
	"errors"
	"math"

	"github.com/bradfitz/gomemcache/memcache"
)

type memcacheStore struct {
	c   *memcache.Client
	ttl int32 // seconds: memcached's TTLs are whole seconds
}

func openMemcache(s *setupMsg) (store, storeInfo, error) {
	addrs, err := s.addrs()
	if err != nil {
		return nil, storeInfo{}, err
	}
	if s.Password != nil || s.Username != nil {
		return nil, storeInfo{}, errors.New("gomemcache has no SASL authentication")
	}
	c := memcache.New(addrs...)
	// One timeout for dial, reads and writes: gomemcache has no separate connect timeout.
	if s.TimeoutS != nil {
		c.Timeout = seconds(*s.TimeoutS)
	}
	st := &memcacheStore{c: c, ttl: int32(math.Ceil(s.TTL))}
	// Connect now, off the clock ("version" to every server).
	if err := c.Ping(); err != nil {
		return nil, storeInfo{}, errors.New("gomemcache cannot reach " + addrs[0] + ": " + err.Error())
	}
	return st, storeInfo{"memcache.Client", "gomemcache", libraryVersion(gomemcacheModule)}, nil
}

func (s *memcacheStore) get(key string) ([]byte, error) {
	it, err := s.c.Get(key)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return it.Value, nil
}

func (s *memcacheStore) set(key string, value []byte) error {
	return s.c.Set(&memcache.Item{Key: key, Value: value, Expiration: s.ttl})
}

func (s *memcacheStore) del(key string) (bool, error) {
	err := s.c.Delete(key)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return false, nil
	}
	return err == nil, err
}

// exists is a Get: gomemcache has no exists, and Touch would change the key's TTL.
func (s *memcacheStore) exists(key string) (bool, error) {
	v, err := s.get(key)
	return v != nil, err
}

func (s *memcacheStore) getMany(keys []string) (any, error) {
	return s.c.GetMulti(keys)
}

func (s *memcacheStore) values(reply any, keys []string, dst [][]byte) {
	items := reply.(map[string]*memcache.Item)
	for i, k := range keys {
		dst[i] = nil
		if it, ok := items[k]; ok {
			dst[i] = it.Value
		}
	}
}

func (s *memcacheStore) close() { s.c.Close() }
