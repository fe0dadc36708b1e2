// Command openloop measures latency under a load that is not bursty: each of -c connections sends
// ShouldRateLimit calls at its own Poisson arrival times (exponential gaps, independent seeds), as
// the workers of many Envoys would, whether or not earlier calls have answered (open loop). The
// total rate is -rate calls/s. Latency runs from each call's send to its answer; how late each
// call was sent against its scheduled time is reported apart (sendLag: Go's timers wake up to
// about 1 ms late on a busy core), so a generator that falls behind shows in the output instead
// of hiding in the latencies. Prints one JSON line.
//
// Built by bench/run.js with Debian's golang-go and golang-google-grpc-dev (GOPATH mode):
//
//	openloop -addr 127.0.0.1:8081 -frame frame-1.bin -rate 10000 -c 50 -seconds 10 -warmup 2
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

const method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// rawCodec sends the request bytes as they are and keeps the answer's bytes. Named "proto" so
// that it replaces the default codec and the content-type stays application/grpc.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type result struct {
	Rate           float64 `json:"rate"`
	Connections    int     `json:"connections"`
	Seconds        float64 `json:"seconds"`
	Sent           int     `json:"sent"`
	OK             int     `json:"ok"`
	Errors         int     `json:"errors"`
	FirstError     string  `json:"firstError,omitempty"`
	AchievedRps    float64 `json:"achievedRps"`
	P50Ms          float64 `json:"p50Ms"`
	P90Ms          float64 `json:"p90Ms"`
	P99Ms          float64 `json:"p99Ms"`
	P999Ms         float64 `json:"p999Ms"`
	MaxMs          float64 `json:"maxMs"`
	MaxSendLagMs   float64 `json:"maxSendLagMs"`
	P99SendLagMs   float64 `json:"p99SendLagMs"`
}

func main() {
	addr := flag.String("addr", "", "host:port of the gRPC server (loopback only)")
	framePath := flag.String("frame", "", "file holding one gRPC frame (5-byte prefix and the RateLimitRequest)")
	rate := flag.Float64("rate", 1000, "total calls per second")
	conns := flag.Int("c", 50, "connections, each with its own arrival process")
	seconds := flag.Float64("seconds", 10, "measured seconds")
	warmup := flag.Float64("warmup", 1, "seconds sent before measuring (not counted)")
	timeout := flag.Duration("timeout", 5*time.Second, "per-call deadline")
	flag.Parse()
	if len(*addr) < 10 || (*addr)[:10] != "127.0.0.1:" {
		fail(fmt.Errorf("refusing target %q: loopback only", *addr))
	}
	frame, err := os.ReadFile(*framePath)
	if err != nil || len(frame) < 5 {
		fail(fmt.Errorf("reading the frame: %v", err))
	}
	request := frame[5:]
	encoding.RegisterCodec(rawCodec{})

	clients := make([]*grpc.ClientConn, *conns)
	for i := range clients {
		// One connection each: WithBlock-free dial, then wait until it is ready.
		cc, err := grpc.Dial(*addr, grpc.WithInsecure())
		if err != nil {
			fail(err)
		}
		clients[i] = cc
		var out []byte
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = cc.Invoke(ctx, method, &request, &out, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			fail(fmt.Errorf("first call on connection %d: %v", i, err))
		}
	}

	var mu sync.Mutex
	var latencies, lags []float64
	var sent, ok, errs int
	firstError := ""
	var calls sync.WaitGroup
	start := time.Now()
	measureFrom := start.Add(time.Duration(*warmup * float64(time.Second)))
	end := measureFrom.Add(time.Duration(*seconds * float64(time.Second)))
	perConn := *rate / float64(*conns)

	var senders sync.WaitGroup
	for i, cc := range clients {
		senders.Add(1)
		go func(i int, cc *grpc.ClientConn) {
			defer senders.Done()
			rng := rand.New(rand.NewSource(int64(i)*7919 + 1))
			// A random phase, so that the connections do not start together.
			next := start.Add(time.Duration(rng.ExpFloat64() / perConn * float64(time.Second)))
			for next.Before(end) {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				scheduled := next
				next = next.Add(time.Duration(rng.ExpFloat64() / perConn * float64(time.Second)))
				measured := !scheduled.Before(measureFrom)
				lag := time.Since(scheduled)
				calls.Add(1)
				go func() {
					defer calls.Done()
					ctx, cancel := context.WithTimeout(context.Background(), *timeout)
					var out []byte
					sentAt := time.Now()
					err := cc.Invoke(ctx, method, &request, &out)
					cancel()
					took := time.Since(sentAt)
					if !measured {
						return
					}
					mu.Lock()
					sent++
					lags = append(lags, ms(lag))
					if err != nil {
						errs++
						if firstError == "" {
							firstError = err.Error()
						}
					} else {
						ok++
						latencies = append(latencies, ms(took))
					}
					mu.Unlock()
				}()
			}
		}(i, cc)
	}
	senders.Wait()
	calls.Wait()
	for _, cc := range clients {
		cc.Close()
	}
	sort.Float64s(latencies)
	sort.Float64s(lags)
	r := result{
		Rate: *rate, Connections: *conns, Seconds: *seconds, Sent: sent, OK: ok, Errors: errs, FirstError: firstError,
		AchievedRps: float64(sent) / *seconds,
		P50Ms:        quantile(latencies, 0.5),
		P90Ms:        quantile(latencies, 0.9),
		P99Ms:        quantile(latencies, 0.99),
		P999Ms:       quantile(latencies, 0.999),
		MaxMs:        quantile(latencies, 1),
		MaxSendLagMs: quantile(lags, 1),
		P99SendLagMs: quantile(lags, 0.99),
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return -1
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return math.Round(sorted[i]*1000) / 1000
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "openloop:", err)
	os.Exit(2)
}
