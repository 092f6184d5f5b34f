package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRLSOptions: --rls-addr needs --rls-config, and both reach the Config.
func TestRLSOptions(t *testing.T) {
	env := func(string) string { return "" }
	var out, errb bytes.Buffer
	_, code, done, _ := loadConfig([]string{"--rls-addr", "127.0.0.1:8081"}, env, &out, &errb)
	if !done || code != 2 || !strings.Contains(errb.String(), "needs rls-config") {
		t.Fatalf("--rls-addr alone: code %d done %v, stderr %q", code, done, errb.String())
	}
	errb.Reset()
	cfg, code, done, _ := loadConfig([]string{"--rls-addr", "127.0.0.1:8081", "--rls-config", "/etc/rls", "--rls-response-headers", "yes"}, env, &out, &errb)
	if done || code != 0 {
		t.Fatalf("code %d, stderr %q", code, errb.String())
	}
	if cfg.RLSAddr != "127.0.0.1:8081" || cfg.RLSConfig != "/etc/rls" || !cfg.RLSResponseHeaders || cfg.RLS == nil {
		t.Fatalf("config %q %q %v %v", cfg.RLSAddr, cfg.RLSConfig, cfg.RLSResponseHeaders, cfg.RLS != nil)
	}
}
