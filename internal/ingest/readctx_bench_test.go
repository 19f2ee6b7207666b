package ingest

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// BenchmarkReadMessageContext reads messages of a real websocket on
// loopback with readMessage, as a session does, under a context that can
// be done (the websocket registers and removes a context.AfterFunc for
// every frame) and under one that cannot (what readLoop passes since it
// closes the connection itself when the session ends). allocs/op and
// ns/op are per message of 2 KB (a batch of four window reports).
func BenchmarkReadMessageContext(b *testing.B) {
	msg := bytes.Repeat([]byte("x"), 2048)
	for _, tc := range []struct {
		name string
		ctx  func(context.Context) context.Context
	}{
		{"cancelable", func(ctx context.Context) context.Context { return ctx }},
		{"never-done", context.WithoutCancel},
	} {
		b.Run(tc.name, func(b *testing.B) {
			conns := make(chan *websocket.Conn, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					b.Error(err)
					return
				}
				conns <- c
			}))
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer client.CloseNow()
			server := <-conns
			defer server.CloseNow()
			go func() {
				for range b.N {
					if client.Write(ctx, websocket.MessageText, msg) != nil {
						return
					}
				}
			}()
			rctx := tc.ctx(ctx)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_, buf, err := readMessage(rctx, server)
				if err != nil {
					b.Fatal(err)
				}
				putReadBuf(buf)
			}
		})
	}
}
