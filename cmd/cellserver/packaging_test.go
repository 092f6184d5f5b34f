package main

import (
	"bytes"
	"crypto/x509"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testpki"
	"github.com/cellserver/cellserver/server"
)

// TestPickVersion: the -X value wins, then the module version go install
// records, then "dev" (a go build of a checkout records "(devel)").
func TestPickVersion(t *testing.T) {
	mod := func(v string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/cellserver/cellserver", Version: v}}
	}
	for _, c := range []struct {
		ldflags string
		info    *debug.BuildInfo
		ok      bool
		want    string
	}{
		{"v1.2.3", mod("v0.13.0"), true, "v1.2.3"},
		{"", mod("v0.13.0"), true, "v0.13.0"},
		{"", mod("v0.0.0-20261124180000-0123456789ab+dirty"), true, "v0.0.0-20261124180000-0123456789ab+dirty"},
		{"", mod("(devel)"), true, "dev"},
		{"", mod(""), true, "dev"},
		{"", nil, false, "dev"},
		{"", mod("v0.13.0"), false, "dev"},
	} {
		if got := pickVersion(c.ldflags, c.info, c.ok); got != c.want {
			t.Errorf("pickVersion(%q, %v, %v) = %q, want %q", c.ldflags, c.info, c.ok, got, c.want)
		}
	}
}

// TestVersionOfBuiltBinary: go build -ldflags "-X main.version=..." reports
// that value; a plain go build (main module version "(devel)") reports dev.
func TestVersionOfBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, c := range []struct{ ldflags, want string }{
		{"-X main.version=v9.8.7-test", "cellserver v9.8.7-test\n"},
		{"", "cellserver dev\n"},
	} {
		bin := filepath.Join(t.TempDir(), "cellserver")
		build := exec.Command("go", "build", "-ldflags", c.ldflags, "-o", bin, ".")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			t.Fatalf("build %q: %v", c.ldflags, err)
		}
		out, err := exec.Command(bin, "--version").Output()
		if err != nil || string(out) != c.want {
			t.Errorf("ldflags %q: --version = %q %v, want %q", c.ldflags, out, err, c.want)
		}
		info, err := exec.Command("go", "version", "-m", bin).Output()
		if err != nil || !strings.Contains(string(info), "\tmod\tgithub.com/cellserver/cellserver\t(devel)") {
			t.Errorf("go version -m: main module not (devel): %s %v", info, err)
		}
	}
}

// tlsFiles writes a CA, a server certificate for 127.0.0.1 with the given
// extended key usages, and a client certificate, all PEM, into a fresh
// directory.
type tlsFiles struct{ ca, cert, key, clientCert, clientKey string }

func writeTLSFiles(t *testing.T, serverUsage ...x509.ExtKeyUsage) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "healthcheck test CA")
	f := tlsFiles{ca: ca.WriteFile(t, dir)}
	f.cert, f.key = ca.Issue(t, "127.0.0.1", serverUsage...).WriteFiles(t, dir, "server")
	f.clientCert, f.clientKey = ca.Issue(t, "healthcheck", x509.ExtKeyUsageClientAuth).WriteFiles(t, dir, "client")
	return f
}

// TestHealthcheckTLSClientAuth: --healthcheck against a server that
// requires client certificates (--tls-ca-cert-file). With a server
// certificate valid for serverAuth only (what most CAs issue), the check
// presents --tls-client-cert-file and passes; without that option it fails
// before connecting and names the remedy (it used to present the server
// certificate and fail the handshake). A server certificate that also
// allows clientAuth still serves as the client certificate, as in Redis.
func TestHealthcheckTLSClientAuth(t *testing.T) {
	serverOnly := writeTLSFiles(t, x509.ExtKeyUsageServerAuth)
	both := writeTLSFiles(t, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	check := func(f tlsFiles, extra ...string) (int, string) {
		t.Helper()
		_, addr := servertest.Start(t, server.Config{TLSCertFile: f.cert, TLSKeyFile: f.key, TLSCACertFile: f.ca})
		args := append([]string{"--healthcheck", "--addr", addr, "--tls-cert-file", f.cert, "--tls-key-file", f.key,
			"--tls-ca-cert-file", f.ca}, extra...)
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if code == 0 && out.String() != "ok "+addr+"\n" {
			t.Errorf("healthcheck %q: stdout %q", extra, out.String())
		}
		return code, errb.String()
	}
	if code, errs := check(serverOnly, "--tls-client-cert-file", serverOnly.clientCert, "--tls-client-key-file", serverOnly.clientKey); code != 0 {
		t.Errorf("serverAuth-only server certificate, --tls-client-cert-file: exit %d, stderr %q", code, errs)
	}
	if code, errs := check(serverOnly); code != 1 || !strings.Contains(errs, "set --tls-client-cert-file and --tls-client-key-file") {
		t.Errorf("serverAuth-only server certificate, no client certificate: exit %d, stderr %q", code, errs)
	}
	if code, errs := check(both); code != 0 {
		t.Errorf("server certificate allowing clientAuth: exit %d, stderr %q", code, errs)
	}
	// The same variables the container's HEALTHCHECK reads.
	env := map[string]string{"CELLSERVER_TLS_CLIENT_CERT_FILE": serverOnly.clientCert, "CELLSERVER_TLS_CLIENT_KEY_FILE": serverOnly.clientKey}
	for k, v := range env {
		t.Setenv(k, v)
	}
	if code, errs := check(serverOnly); code != 0 {
		t.Errorf("client certificate from the environment: exit %d, stderr %q", code, errs)
	}
}

// TestTLSClientCertOptions: the client certificate options go together and
// need TLS on; a bad pair is refused at startup.
func TestTLSClientCertOptions(t *testing.T) {
	f := writeTLSFiles(t, x509.ExtKeyUsageServerAuth)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-file", f.cert, "--tls-key-file", f.key, "--tls-client-cert-file", f.clientCert},
			"--tls-client-cert-file and --tls-client-key-file must be given together"},
		{[]string{"--tls-client-cert-file", f.clientCert, "--tls-client-key-file", f.clientKey},
			"--tls-client-cert-file needs --tls-cert-file"},
		{[]string{"--tls-cert-file", f.cert, "--tls-key-file", f.key, "--tls-client-cert-file", f.clientCert, "--tls-client-key-file", f.key},
			"client certificate"},
	} {
		var errb bytes.Buffer
		_, code, done, _ := loadConfig(c.args, func(string) string { return "" }, io.Discard, &errb)
		if !done || code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: code %d done %v, stderr %q, want %q", c.args, code, done, errb.String(), c.want)
		}
	}
}

// TestHealthcheckFollowsAddrEnv: the container's HEALTHCHECK runs
// --healthcheck with no --addr, so it probes CELLSERVER_ADDR, on loopback
// when that is 0.0.0.0 (the image's default).
func TestHealthcheckFollowsAddrEnv(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	_, port, _ := net.SplitHostPort(addr)
	t.Setenv("CELLSERVER_ADDR", "0.0.0.0:"+port)
	var out, errb bytes.Buffer
	if code := run([]string{"--healthcheck"}, &out, &errb); code != 0 || out.String() != "ok 127.0.0.1:"+port+"\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestPackagingFiles checks what a Docker build depends on (no Docker
// engine is needed):
//   - go.mod's go line names no patch release: patches add no language
//     feature or API, and the golang image sets GOTOOLCHAIN=local, so a
//     go line of 1.26.8 fails on any 1.26 image older than that patch;
//   - the Dockerfile's Go image is an exact release at least that go line;
//   - /data is created in the build stage and copied with --chown to the
//     nonroot user (65532) before VOLUME and WORKDIR, since the runtime
//     image has no shell and only BuildKit chowns a WORKDIR;
//   - .dockerignore keeps .git out of the build context.
func TestPackagingFiles(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	goLine := regexp.MustCompile(`(?m)^go ([0-9]+)\.([0-9]+)(?:\.([0-9]+))?$`).FindStringSubmatch(read("go.mod"))
	if goLine == nil {
		t.Fatal("go.mod: no go line")
	}
	if goLine[3] != "" && goLine[3] != "0" {
		t.Errorf("go.mod: go %s.%s.%s names a patch release; use %s.%s.0 (or what the code needs)", goLine[1], goLine[2], goLine[3], goLine[1], goLine[2])
	}
	dockerfile := read("Dockerfile")
	from := regexp.MustCompile(`(?m)^FROM golang:([0-9]+)\.([0-9]+)\.([0-9]+)-\S+ AS build$`).FindStringSubmatch(dockerfile)
	if from == nil {
		t.Errorf("Dockerfile: the build stage is not FROM golang:X.Y.Z-<os> AS build (an exact release)")
	} else if num(from[1])*1000+num(from[2]) < num(goLine[1])*1000+num(goLine[2]) {
		t.Errorf("Dockerfile: golang:%s.%s.%s is older than go.mod's go %s.%s", from[1], from[2], from[3], goLine[1], goLine[2])
	}
	final := dockerfile[strings.LastIndex(dockerfile, "\nFROM "):]
	mk := strings.Index(dockerfile, "RUN mkdir -p /out/data")
	cp := strings.Index(final, "COPY --from=build --chown=65532:65532 /out/data /data\n")
	vol, wd := strings.Index(final, "\nVOLUME /data\n"), strings.Index(final, "\nWORKDIR /data\n")
	if mk < 0 || mk > strings.LastIndex(dockerfile, "\nFROM ") || cp < 0 || vol < cp || wd < cp {
		t.Errorf("Dockerfile: /data must be made in the build stage and copied with --chown=65532:65532 before VOLUME and WORKDIR (mkdir %d, copy %d, volume %d, workdir %d)", mk, cp, vol, wd)
	}
	if !regexp.MustCompile(`(?m)^\.git$`).MatchString(read(".dockerignore")) {
		t.Errorf(".dockerignore does not exclude .git")
	}
}

// num converts the digits a regexp matched.
func num(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestNestedModules checks what the repository's nested modules (the
// client side, docs/client.md) need elsewhere:
//   - every go.mod below the root, outside testdata, is in the Makefile's
//     MODULES, which make test, make vet and so CI run in each (go test ./...
//     at the root does not enter a nested module);
//   - go.mod replaces each one with its directory, and the Dockerfile
//     copies its go.mod before go mod download, which reads it.
func TestNestedModules(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var nested []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && p != filepath.Join(root, "go.mod") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			nested = append(nested, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	modules := regexp.MustCompile(`(?m)^MODULES = (.*)$`).FindStringSubmatch(read("Makefile"))
	if modules == nil {
		t.Fatal("Makefile: no MODULES line")
	}
	listed := strings.Fields(modules[1])
	gomod, dockerfile := read("go.mod"), read("Dockerfile")
	download := strings.Index(dockerfile, "RUN go mod download")
	for _, m := range nested {
		if !slices.Contains(listed, m) {
			t.Errorf("Makefile: MODULES (%s) lacks %s, which has a go.mod", modules[1], m)
		}
		if !regexp.MustCompile(`(?m)=> \./` + regexp.QuoteMeta(m) + `$`).MatchString(gomod) {
			t.Errorf("go.mod: no replace of the module in %s by ./%s", m, m)
		}
		if c := regexp.MustCompile(`(?m)^COPY ` + regexp.QuoteMeta(m) + `/go\.mod[ \n]`).FindStringIndex(dockerfile); c == nil || download < 0 || c[0] > download {
			t.Errorf("Dockerfile: %s/go.mod is not copied before RUN go mod download", m)
		}
	}
	if len(nested) == 0 {
		t.Fatal("no nested module found")
	}
	t.Logf("nested modules: %v", nested)
}
