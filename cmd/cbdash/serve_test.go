package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/cbdash/cbdash/internal/clocktest"
	"github.com/cbdash/cbdash/internal/eventually"
)

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		// Real time: TLS checks validity against the wall clock.
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestServeOverTLSThenShutsDownCleanly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var o serveOptions
	o.Addr, o.DB = "127.0.0.1:0", filepath.Join(dir, "cbdash.db")
	o.TLSCert, o.TLSKey = selfSigned(t, dir)
	o.LogLevel, o.LogFormat = "error", "text"
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := openServer(ctx, o, slog.New(slog.DiscardHandler), clocktest.NewRunning())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx, nil) }()

	if got := srv.AgentURL(); got[:6] != "wss://" {
		t.Errorf("AgentURL() = %q, want wss://", got)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	eventually.True(t, "GET /readyz over TLS: 200", func() bool {
		resp, err := client.Get(srv.URL() + "/readyz")
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	// The database was closed cleanly: the WAL is checkpointed away.
	if _, err := os.Stat(o.DB + "-wal"); !os.IsNotExist(err) {
		t.Errorf("%s-wal still there after shutdown (%v)", o.DB, err)
	}
}

// --quorum is the server-wide kill switch: without it the rules are read
// and checked but none reaches the collector.
func TestQuorumRulesReachTheCollectorOnlyWithQuorumOn(t *testing.T) {
	o := serveOptions{QuorumRules: []string{"checkout/*:q=50%,m=3,box=30s", "checkout/legacy:off"}}
	if err := o.validateQuorum(); err != nil {
		t.Fatal(err)
	}
	if got := o.quorumRules(); got != nil {
		t.Errorf("quorum off: rules %v, want none", got)
	}
	o.Quorum = true
	if got := o.quorumRules(); len(got) != 2 || got[0].String() != "checkout/*:q=50%,m=3,box=30s" || !got[1].Off {
		t.Errorf("quorum on: rules %v, want both", got)
	}
}

// --quorum-probes (default true) is the probe rotation's server-wide
// kill switch: false keeps the rules' probes=K from running it.
func TestQuorumProbesFlagIsOnByDefaultAndTurnsTheRotationOff(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, true}, {[]string{"--quorum-probes=false"}, false}} {
		var o serveOptions
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		o.bind(fs, "cbdash.db", false, time.Minute)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if o.QuorumProbes != tc.want {
			t.Errorf("%v: QuorumProbes %v, want %v", tc.args, o.QuorumProbes, tc.want)
		}
	}
}
