// Command go-rls is a measuring instrument, not a product: a minimal Go rate limit service that
// does, per request, the work envoyproxy/ratelimit does on a store in memory, so that bench/run.js
// can put the CPU time per call of our service beside that of a Go service in the same run.
//
// It serves /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit with grpc-go and no
// generated code (a raw-bytes codec, the protobuf wire format read and written by hand) and, for
// each descriptor of a request, does what upstream does: match it against the config (one rule:
// domain "bench", key client_id with any value, 10^9 per second: bench/processes.js SERVICE_CONFIG),
// build upstream's cache key (domain_key_value_..._windowStart), add the hits to a counter in a
// map behind a mutex (windows past their end are swept once a second), compute the status (OK or
// OVER_LIMIT, limit remaining, duration until reset) and encode the RateLimitResponse.
//
// It does not do what upstream also does: no stats, no config files or reload, no limit overrides
// (descriptor field 2 is ignored), no local cache, no shadow mode, no response headers, no
// logging. GOMAXPROCS comes from the environment (bench/run.js sets 1 and pins it to CPU 0).
//
// Built by bench/run.js with Debian's golang-go and golang-google-grpc-dev (GOPATH mode, no
// network). Debian has no google.golang.org/protobuf (so no protowire): the varints are
// encoding/binary's, which are protobuf's. Prints "listening <addr>" when ready:
//
//	GOMAXPROCS=1 go-rls -addr 127.0.0.1:0
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// rawCodec hands the request's bytes to the handler and sends the handler's bytes. Named "proto"
// so that it replaces grpc-go's default codec (content-type application/grpc).
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// ---------------------------------------------------------------------------------------------
// Config: upstream's descriptor tree (src/config/config_impl.go), here holding one rule.

const (
	codeOK        = 1
	codeOverLimit = 2
	unitSecond    = 1 // RateLimitResponse.RateLimit.Unit SECOND
)

type limit struct {
	requestsPerUnit uint64
	unit            uint64
	divider         int64 // seconds in the unit
}

type node struct {
	limit    *limit
	children map[string]*node
}

var domains = map[string]map[string]*node{
	"bench": {"client_id": {limit: &limit{requestsPerUnit: 1_000_000_000, unit: unitSecond, divider: 1}}},
}

// getLimit walks the entries down the tree: at each level the exact key_value, else the bare key;
// a limit counts only on the node of the last entry (upstream's GetLimit without wildcards).
func getLimit(level map[string]*node, entries []entry) *limit {
	var buf [128]byte
	for i, e := range entries {
		n := level[string(append(append(append(buf[:0], e.key...), '_'), e.value...))]
		if n == nil {
			n = level[string(e.key)]
		}
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.limit
		}
		if n.children == nil {
			return nil
		}
		level = n.children
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Counters: a map of cache keys, each dropped once its window has ended.

type counter struct {
	count   uint64
	expires int64
}

type store struct {
	mu        sync.Mutex
	counters  map[string]*counter
	nextSweep int64
}

// add adds hits to the key's counter and returns the count after.
func (s *store) add(key []byte, hits uint64, expires, now int64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now >= s.nextSweep {
		for k, c := range s.counters {
			if c.expires <= now {
				delete(s.counters, k)
			}
		}
		s.nextSweep = now + 1
	}
	c := s.counters[string(key)]
	if c == nil {
		c = &counter{expires: expires}
		s.counters[string(key)] = c
	}
	c.count += hits
	return c.count
}

var counters = &store{counters: make(map[string]*counter)}

// ---------------------------------------------------------------------------------------------
// The request (envoy.service.ratelimit.v3.RateLimitRequest) and the work per descriptor.

type entry struct{ key, value []byte }

type descriptor struct {
	entries []entry
	hits    uint64
	hasHits bool // hits_addend (google.protobuf.UInt64Value, field 3) present, 0 included
}

type request struct {
	domain      []byte
	descriptors []descriptor
	hitsAddend  uint64
}

func shouldRateLimit(msg []byte) ([]byte, error) {
	req, err := decodeRequest(msg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if len(req.domain) == 0 {
		return nil, status.Error(codes.Unknown, "rate limit domain must not be empty")
	}
	if len(req.descriptors) == 0 {
		return nil, status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
	}
	now := time.Now().Unix()
	tree := domains[string(req.domain)]
	overall := uint64(codeOK)
	out := make([]byte, 0, 16+32*len(req.descriptors))
	var keyBuf [256]byte
	for _, d := range req.descriptors {
		var l *limit
		if tree != nil {
			l = getLimit(tree, d.entries)
		}
		if l == nil {
			out = appendMessage(out, 2, appendUint(nil, 1, codeOK))
			continue
		}
		hits := d.hits
		if !d.hasHits {
			hits = req.hitsAddend
			if hits == 0 {
				hits = 1
			}
		}
		// Upstream's cache key: domain_key_value_..._windowStart.
		windowStart := now / l.divider * l.divider
		key := append(append(keyBuf[:0], req.domain...), '_')
		for _, e := range d.entries {
			key = append(append(append(append(key, e.key...), '_'), e.value...), '_')
		}
		key = strconv.AppendInt(key, windowStart, 10)
		after := counters.add(key, hits, windowStart+l.divider, now)
		code, remaining := uint64(codeOK), uint64(0)
		if after > l.requestsPerUnit {
			code, overall = codeOverLimit, codeOverLimit
		} else {
			remaining = l.requestsPerUnit - after
		}
		out = appendStatus(out, code, l, remaining, uint64(l.divider-now%l.divider))
	}
	return appendUint(out, 1, overall), nil // field order does not matter to a decoder
}

// appendStatus appends one RateLimitResponse.statuses entry (field 2).
func appendStatus(b []byte, code uint64, l *limit, remaining, resetSeconds uint64) []byte {
	var lim, dur, st [32]byte
	currentLimit := appendUint(appendUint(lim[:0], 1, l.requestsPerUnit), 2, l.unit)
	durationUntilReset := appendUint(dur[:0], 1, resetSeconds) // google.protobuf.Duration seconds
	s := appendUint(st[:0], 1, code)
	s = appendMessage(s, 2, currentLimit)
	s = appendUint(s, 3, remaining)
	s = appendMessage(s, 4, durationUntilReset)
	return appendMessage(b, 2, s)
}

// ---------------------------------------------------------------------------------------------
// Protobuf wire format: varint (type 0) and length-delimited (type 2) fields.

func appendUint(b []byte, field int, v uint64) []byte {
	if v == 0 { // proto3 leaves default values out
		return b
	}
	return binary.AppendUvarint(binary.AppendUvarint(b, uint64(field)<<3), v)
}

func appendMessage(b []byte, field int, m []byte) []byte {
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	return append(binary.AppendUvarint(b, uint64(len(m))), m...)
}

var errMalformed = errors.New("malformed RateLimitRequest")

// fields calls f for each field of msg: its number, its varint value (type 0) or its bytes (type 2).
// Fixed-width fields are skipped.
func fields(msg []byte, f func(field int, v uint64, data []byte) error) error {
	for len(msg) > 0 {
		tag, n := binary.Uvarint(msg)
		if n <= 0 {
			return errMalformed
		}
		msg = msg[n:]
		var v uint64
		var data []byte
		switch tag & 7 {
		case 0:
			if v, n = binary.Uvarint(msg); n <= 0 {
				return errMalformed
			}
			msg = msg[n:]
		case 2:
			size, n := binary.Uvarint(msg)
			if n <= 0 || uint64(len(msg)-n) < size {
				return errMalformed
			}
			data, msg = msg[n:n+int(size)], msg[n+int(size):]
		case 1, 5:
			width := 8
			if tag&7 == 5 {
				width = 4
			}
			if len(msg) < width {
				return errMalformed
			}
			msg = msg[width:]
			continue
		default:
			return errMalformed
		}
		if err := f(int(tag>>3), v, data); err != nil {
			return err
		}
	}
	return nil
}

func decodeRequest(msg []byte) (request, error) {
	var req request
	err := fields(msg, func(field int, v uint64, data []byte) error {
		switch field {
		case 1:
			req.domain = data
		case 2:
			var d descriptor
			err := fields(data, func(field int, v uint64, data []byte) error {
				switch field {
				case 1: // Entry { key = 1, value = 2 }
					var e entry
					err := fields(data, func(field int, _ uint64, data []byte) error {
						if field == 1 {
							e.key = data
						} else if field == 2 {
							e.value = data
						}
						return nil
					})
					d.entries = append(d.entries, e)
					return err
				case 3: // google.protobuf.UInt64Value { value = 1 }
					d.hasHits = true
					return fields(data, func(field int, v uint64, _ []byte) error {
						if field == 1 {
							d.hits = v
						}
						return nil
					})
				}
				return nil
			})
			req.descriptors = append(req.descriptors, d)
			return err
		case 3:
			req.hitsAddend = v
		}
		return nil
	})
	return req, err
}

// ---------------------------------------------------------------------------------------------
// Server

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "envoy.service.ratelimit.v3.RateLimitService",
	HandlerType: (*interface{})(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "ShouldRateLimit",
		Handler: func(_ interface{}, _ context.Context, dec func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			out, err := shouldRateLimit(in)
			if err != nil {
				return nil, err
			}
			return &out, nil
		},
	}},
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "host:port to listen on (loopback only; port 0: any free port)")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		fail(fmt.Errorf("refusing -addr %q: a loopback IP address only", *addr))
	}
	encoding.RegisterCodec(rawCodec{})
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fail(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&serviceDesc, struct{}{})
	fmt.Printf("go-rls GOMAXPROCS=%d %s listening %s\n", runtime.GOMAXPROCS(0), runtime.Version(), lis.Addr())
	if err := srv.Serve(lis); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "go-rls:", err)
	os.Exit(2)
}
