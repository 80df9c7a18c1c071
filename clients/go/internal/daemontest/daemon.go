// Package daemontest starts a real einsummabled for tests, as clients/python/tests/conftest.py
// does: the binary named by $EINSUMMABLE_DAEMON (default <repository>/build/bin/einsummabled)
// on a free loopback port, the CPU backend with 8 virtual devices, a temporary plan cache
// directory, no metrics endpoint, and extra flags from $EINSUMMABLE_DAEMON_ARGS last (so they
// win). Tests skip, saying why, when the binary is absent.
package daemontest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/einsummable/einsummable/clients/go/einsummable"
)

// Devices is the daemon's --devices.
const Devices = 8

// startTimeout bounds the first stdout line and readiness (generous: CI runs the daemon under
// ASan+UBSan).
const startTimeout = 60 * time.Second

// Binary is the daemon to test, or skips t saying where it looked.
func Binary(t testing.TB) string {
	t.Helper()
	binary := os.Getenv("EINSUMMABLE_DAEMON")
	if binary == "" {
		root, err := repositoryRoot()
		if err != nil {
			t.Skipf("einsummabled not found: %v; point EINSUMMABLE_DAEMON at it", err)
		}
		binary = filepath.Join(root, "build", "bin", "einsummabled")
	}
	info, err := os.Stat(binary)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		t.Skipf("einsummabled not found at %s: build it (cmake --build build --target einsummabled) "+
			"or point EINSUMMABLE_DAEMON at it", binary)
	}
	return binary
}

// repositoryRoot is the directory above the working directory holding clients/go/go.mod (go
// test runs in the package's directory).
func repositoryRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "clients", "go", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no clients/go/go.mod above the working directory")
		}
		dir = parent
	}
}

// Config is how to start a daemon beyond the defaults.
type Config struct {
	// Flags after the defaults, e.g. "--token_file=PATH", "--tls_cert=...".
	Flags []string
	// Token and RootsPEM are what the readiness check needs to reach a daemon started with
	// --token_file or --tls_cert.
	Token    string
	RootsPEM []byte
}

// Daemon is a running einsummabled.
type Daemon struct {
	// Address is host:port from the daemon's first stdout line, "listening on HOST:PORT".
	Address string
	// Dir is the daemon's own temporary directory (its working directory and plan cache).
	Dir     string
	cmd     *exec.Cmd
	logPath string
	// done is closed once the process has exited, waitErr then being Wait's answer.
	done    chan struct{}
	waitErr error
	stopped bool
}

// Start starts a daemon, waits until it answers, and stops it (SIGTERM, expecting exit status
// 0) when t ends; its log is printed when t failed.
func Start(t testing.TB, config Config) *Daemon {
	t.Helper()
	binary := Binary(t)
	d := &Daemon{Dir: t.TempDir(), done: make(chan struct{})}
	d.logPath = filepath.Join(d.Dir, "einsummabled.log")
	plans := filepath.Join(d.Dir, "plans")
	if err := os.Mkdir(plans, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--listen=127.0.0.1:0",
		"--plan_cache_dir=" + plans,
		// The CPU backend unless EINSUMMABLE_DAEMON_ARGS asks for another (scripts/gpu-check
		// passes "--backend=cuda --devices=0,0,0,0,0,0,0,0").
		"--backend=cpu",
		fmt.Sprintf("--devices=%d", Devices),
		"--metrics_port=0",
	}
	args = append(args, config.Flags...)
	args = append(args, strings.Fields(os.Getenv("EINSUMMABLE_DAEMON_ARGS"))...)

	log, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(binary, args...)
	d.cmd.Dir = d.Dir
	d.cmd.Stderr = log
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", binary, err)
	}
	t.Cleanup(func() {
		d.Stop(t)
		if t.Failed() {
			t.Logf("einsummabled %s's log:\n%s", strings.Join(args, " "), d.LogTail(60))
		}
	})

	// The first line gives the port; the rest of stdout keeps draining into the log so the
	// daemon never blocks on a full pipe.
	firstLine := make(chan string, 1)
	go func() {
		reader := bufio.NewReader(stdout)
		line, _ := reader.ReadString('\n')
		firstLine <- strings.TrimSpace(line)
		_, _ = io.Copy(log, reader)
		d.waitErr = d.cmd.Wait()
		log.Close()
		close(d.done)
	}()
	var line string
	select {
	case line = <-firstLine:
	case <-time.After(startTimeout):
		t.Fatalf("einsummabled printed no 'listening on' line within %v", startTimeout)
	}
	const prefix = "listening on "
	if !strings.HasPrefix(line, prefix) {
		t.Fatalf("einsummabled's first line is %q, not '%sHOST:PORT'", line, prefix)
	}
	d.Address = strings.TrimPrefix(line, prefix)

	opts := []einsummable.Option{einsummable.WithToken(config.Token)}
	if config.RootsPEM != nil {
		opts = append(opts, einsummable.WithRootCertificates(config.RootsPEM))
	}
	client, err := einsummable.Dial(d.Address, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := client.WaitReady(ctx); err != nil {
		t.Fatalf("einsummabled at %s: %v", d.Address, err)
	}
	return d
}

// Stop sends SIGTERM and waits for the daemon (killing it after 15 s); a non-zero exit status
// fails t. Stopping twice is harmless.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if d.stopped {
		return
	}
	d.stopped = true
	select {
	case <-d.done:
		t.Errorf("einsummabled exited before it was stopped: %v", d.waitErr)
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		if d.waitErr != nil {
			t.Errorf("einsummabled exited with %v after SIGTERM", d.waitErr)
		}
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("einsummabled did not stop within 15 s of SIGTERM; killed")
	}
}

// LogTail is the last lines of the daemon's stderr and stdout.
func (d *Daemon) LogTail(lines int) string {
	data, err := os.ReadFile(d.logPath)
	if err != nil {
		return "(no log)"
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// SelfSigned is a self-signed certificate and its key (PEM) for localhost and 127.0.0.1, valid
// for a day: what --tls_cert and --tls_key take, made without openssl.
func SelfSigned(t testing.TB) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// WriteFile writes data to name in the daemon-independent temporary directory of t, returning
// the path (for --token_file, --tls_cert, --tls_key).
func WriteFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
