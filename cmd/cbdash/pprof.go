package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// pprofServer serves net/http/pprof on a loopback address (serve --pprof):
// profiles of a running server, for `go tool pprof`. It is its own
// listener, never the dashboard's, and refuses any address that is not
// loopback.
type pprofServer struct {
	srv  *http.Server
	done chan struct{}
}

// startPprof listens on addr (host:port, loopback only) and serves the
// profiles until stop; "" starts nothing and returns nil.
func startPprof(addr string, log *slog.Logger) (*pprofServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %s: %w", addr, err)
	}
	if !loopbackOnly(ln.Addr()) {
		ln.Close()
		return nil, fmt.Errorf("--pprof %s: profiles are served on a loopback address only (e.g. 127.0.0.1:6060)", addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	p := &pprofServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		if err := p.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server", "err", err)
		}
	}()
	log.Info("serving profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return p, nil
}

// stop closes the listener and waits for the server goroutine; nil-safe.
func (p *pprofServer) stop() {
	if p == nil {
		return
	}
	p.srv.Close()
	<-p.done
}
