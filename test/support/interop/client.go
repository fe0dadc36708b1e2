// A gRPC client on grpc-go (Debian's golang-google-grpc-dev) for test/server/h2-interop.test.ts:
// it checks that our HTTP/2 server (src/server/h2) serves clients other than grpc-js. No
// generated code: a codec passes raw message bytes, given and printed in hex.
//
// Build (GOPATH mode): GO111MODULE=off GOPATH=/usr/share/gocode go build -o client client.go
// Usage: client HOST:PORT < calls.json, where calls.json is
//
//	{"concurrency": 1, "calls": [{"method": "/pkg.Service/Method", "request": "<hex>",
//	                              "timeoutMs": 5000, "metadata": [["key", "value"]]}]}
//
// All calls share one connection; up to `concurrency` of them are in flight at once (default 1:
// one after another). Prints one JSON line per call, in the order of the calls:
//
//	{"code": 0, "details": "", "response": "<hex>", "trailers": [["key", "value"]]}
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type call struct {
	Method    string     `json:"method"`
	Request   string     `json:"request"`
	TimeoutMs int        `json:"timeoutMs"`
	Metadata  [][]string `json:"metadata"`
}

type outcome struct {
	Code     uint32     `json:"code"`
	Details  string     `json:"details"`
	Response *string    `json:"response"`
	Trailers [][]string `json:"trailers"`
}

// rawCodec sends and receives messages as the bytes they are. Its name makes the content-type
// application/grpc+proto, as a generated client's would be with this codec forced.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func invoke(conn *grpc.ClientConn, c call) outcome {
	request, err := hex.DecodeString(c.Request)
	if err != nil {
		fail(err)
	}
	timeout := time.Duration(c.TimeoutMs) * time.Millisecond
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, kv := range c.Metadata {
		ctx = metadata.AppendToOutgoingContext(ctx, kv[0], kv[1])
	}
	var response []byte
	var trailer metadata.MD
	err = conn.Invoke(ctx, c.Method, &request, &response, grpc.ForceCodec(rawCodec{}), grpc.Trailer(&trailer))
	st := status.Convert(err)
	out := outcome{Code: uint32(st.Code()), Details: st.Message(), Trailers: [][]string{}}
	if err == nil {
		text := hex.EncodeToString(response)
		out.Response = &text
	}
	for k, values := range trailer {
		for _, v := range values {
			out.Trailers = append(out.Trailers, []string{k, v})
		}
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

func main() {
	var spec struct {
		Concurrency int    `json:"concurrency"`
		Calls       []call `json:"calls"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&spec); err != nil {
		fail(err)
	}
	if spec.Concurrency < 1 {
		spec.Concurrency = 1
	}
	// Straight to the test server, whatever proxy the environment names.
	conn, err := grpc.Dial(os.Args[1], grpc.WithInsecure(), grpc.WithNoProxy())
	if err != nil {
		fail(err)
	}
	defer conn.Close()

	// Each call answers on its own channel, so the lines come out in the order of the calls.
	results := make([]chan outcome, len(spec.Calls))
	for i := range results {
		results[i] = make(chan outcome, 1)
	}
	slots := make(chan struct{}, spec.Concurrency)
	go func() {
		for i, c := range spec.Calls {
			slots <- struct{}{}
			go func(i int, c call) {
				results[i] <- invoke(conn, c)
				<-slots
			}(i, c)
		}
	}()
	encoder := json.NewEncoder(os.Stdout)
	for i := range spec.Calls {
		encoder.Encode(<-results[i])
	}
}
